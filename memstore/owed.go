package memstore

import "github.com/sluicehq/sluice"

// owed remembers what evicted keys owed: for a key dropped at the cap
// before its buckets were full again, the time at which they would have
// been full. A key that comes back starts from that, not from a full
// bucket, so eviction never hands a caller tokens it had spent.
//
// It is fixed at New, in groups chosen by the key's id. A group has
// owedWays cells (one cache line), each holding one key's id and fullAt,
// and a merged record: a 512-bit Bloom filter of ids (three bits an id)
// and the latest fullAt of the keys merged into it. When a key is evicted
// and its group has no free cell (none empty, of the same key, or past its
// fullAt), the entry due soonest among the group's cells and the new one
// goes into the merged record; the others keep their cells. A merged
// record whose fullAt has passed starts empty again. So:
//
//   - a key that comes back is never fuller than it was: its own cell is
//     exact (up to the microsecond fullAt was rounded up to), and the
//     merged record, which its bits match once it was merged, holds a
//     fullAt at least as late as its own;
//   - a key that never was evicted but whose three bits the merged record
//     of its group holds by chance may start emptier than full: as if its
//     own buckets were full only at the merged fullAt, and at worst empty
//     (no debt), so it loses at most one burst, once, and refills at its
//     own rate. The chance is that of a Bloom filter: about 0.03% once 12
//     keys were merged into the group (the gateway's default cap under a
//     flood of 2 million keys), 7% once 90 were (a cap of 10,000 flooded
//     by 200,000), and it grows towards certainty under a flood far
//     beyond the cap, until the flood stops and the merged fullAt passes;
//   - a key in debt below zero (paced reservations, Adjust charges) whose
//     entry was merged comes back empty, not in debt: the one way a key
//     can come back fuller than it was, by at most that debt, and only
//     when its group overflowed.
//
// Memory: a group (four 16-byte cells and a 72-byte merged record) per 4
// to 8 keys of the cap, the number of groups a power of two: 17 to 34
// bytes per key of the cap.
type owed struct {
	cells  []owedCell   // groups of owedWays; nil when the store has no cap
	merged []owedMerged // one a group
	mask   uint64       // number of groups - 1
}

type owedCell struct {
	id     uint64 // the key's id; 0: empty
	fullAt int64  // Unix µs when the key's buckets are full again
}

type owedMerged struct {
	filter [8]uint64 // 512 bits
	fullAt int64     // the latest fullAt merged in; the record is empty once it has passed
}

// owedWays is the cells a group: 64 bytes, one cache line.
const owedWays = 4

// newOwed returns the array for a shard of capacity keys: a group per
// eight keys, in a power of two of groups.
func newOwed(capacity int) owed {
	groups := 1
	for groups*owedWays*2 < capacity {
		groups <<= 1
	}
	return owed{
		cells:  make([]owedCell, groups*owedWays),
		merged: make([]owedMerged, groups),
		mask:   uint64(groups - 1),
	}
}

// group returns the index of the group of id, from id bits that neither
// the shard nor the table's home slot uses alone.
func (o *owed) group(id uint64) int {
	return int((id * 0x9e3779b97f4a7c15) >> 32 & o.mask)
}

// bloomBits returns the three bits of id in a merged filter, as indexes
// from 0 to 511, from a mix of id other than the one group uses.
func bloomBits(id uint64) [3]uint {
	x := id * 0xff51afd7ed558ccd
	return [3]uint{uint(x >> 55), uint(x>>46) & 511, uint(x>>37) & 511}
}

func (m *owedMerged) add(id uint64) {
	for _, b := range bloomBits(id) {
		m.filter[b>>6] |= 1 << (b & 63)
	}
}

func (m *owedMerged) holds(id uint64) bool {
	for _, b := range bloomBits(id) {
		if m.filter[b>>6]&(1<<(b&63)) == 0 {
			return false
		}
	}
	return true
}

// remember records that the key of id, evicted at now, is full again at
// fullAt (> now).
func (o *owed) remember(id uint64, fullAt, now int64) {
	gi := o.group(id)
	g := o.cells[gi*owedWays : gi*owedWays+owedWays]
	free, soonest := -1, 0
	for i := range g {
		c := &g[i]
		if c.id == id {
			c.fullAt = max(c.fullAt, fullAt)
			return
		}
		if free < 0 && (c.id == 0 || c.fullAt <= now) {
			free = i
		}
		if c.fullAt < g[soonest].fullAt {
			soonest = i
		}
	}
	if free >= 0 {
		g[free] = owedCell{id: id, fullAt: fullAt}
		return
	}
	// Every cell is live: the entry due soonest goes into the merged record.
	m := &o.merged[gi]
	if m.fullAt <= now {
		*m = owedMerged{}
	}
	if g[soonest].fullAt < fullAt {
		m.add(g[soonest].id)
		m.fullAt = max(m.fullAt, g[soonest].fullAt)
		g[soonest] = owedCell{id: id, fullAt: fullAt}
		return
	}
	m.add(id)
	m.fullAt = max(m.fullAt, fullAt)
}

// recall returns, for the key of id coming back at now, the fullAt of its
// own cell and of its group's merged record if that holds it (each ≤ now
// when there is none), and frees its own cell: the key's state is in the
// table again.
func (o *owed) recall(id uint64, now int64) (own, merged int64) {
	own, merged = now, now
	gi := o.group(id)
	g := o.cells[gi*owedWays : gi*owedWays+owedWays]
	for i := range g {
		if c := &g[i]; c.id == id {
			if c.fullAt > now {
				own = c.fullAt
			}
			*c = owedCell{}
			break
		}
	}
	if m := &o.merged[gi]; m.fullAt > now && m.holds(id) {
		merged = m.fullAt
	}
	return own, merged
}

// owedBucket is the bucket of r at now for a key whose own record says it
// is full at own and whose group's merged record says merged (either ≤ now
// when absent): the tokens a bucket full at own has now, at most as many
// as one full at merged has, but never fewer than none because of
// merged, which may be other keys'.
func owedBucket(r sluice.Rule, now, own, merged int64) sluice.Bucket {
	burst := float64(r.Burst)
	var deficit float64
	if own > now {
		deficit = float64(uint64(own)-uint64(now)) / 1e6 * r.Rate // own > now: the difference fits in uint64
	}
	if merged > now {
		deficit = max(deficit, min(burst, float64(uint64(merged)-uint64(now))/1e6*r.Rate))
	}
	return sluice.Bucket{Tokens: burst - deficit, Last: now}
}
