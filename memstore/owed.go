package memstore

import "github.com/sluicehq/sluice"

// owed remembers what evicted keys owed: for a key dropped at the cap
// before its buckets were full again, the time at which they would have
// been full. A key that comes back starts from that, not from a full
// bucket, so eviction never hands a caller tokens it had spent.
//
// It is a fixed array of cells in groups of owedWays (a group is one
// cache line), chosen by the key's id. A cell holds one key's id and
// fullAt. When a group has no free cell (none empty, none of the same
// key, none whose fullAt has passed), the two entries due soonest among
// the group's and the new one are merged into one merged cell, which
// keeps the later fullAt of the two, and the ids of both in a 58-bit Bloom
// filter (two bits an id): it applies to every key whose two bits are set
// in it. Keys that owe the longest keep cells of their own; a merged cell
// holds what the keys that owed least owed. So:
//
//   - a key that comes back is never fuller than it was: its own cell is
//     exact (up to the microsecond fullAt was rounded up to), a merged
//     cell holds a fullAt at least as late as its own;
//   - a key that never was evicted but whose bits a live merged cell of
//     its group holds (by chance: about 2% once 4 keys were merged into
//     the cell, 40% once 29 were) may start emptier than full: by what the merged fullAt would
//     mean for its own rules, and at worst an empty bucket (no debt), so
//     it loses at most one burst, once, and refills at its own rate. This
//     happens only while more evicted keys owe something than the array
//     has cells (a flood of distinct keys at the cap);
//   - a key in debt below zero (paced reservations, Adjust charges) whose
//     entry was merged comes back empty, not in debt: the one way a key
//     can come back fuller than it was, by at most that debt, and only
//     when its group overflowed.
//
// Cells expire by themselves: one whose fullAt has passed is free. Memory
// is fixed at New: about half a cell (8 bytes) per key of the cap.
type owed struct {
	cells []owedCell // groups of owedWays; nil when the store has no cap
	mask  uint64     // number of groups - 1
}

type owedCell struct {
	id     uint64 // the key's id; 0: empty; mergedBit set: a merged cell, whose other bits are a Bloom filter of ids
	fullAt int64  // Unix µs when the key's buckets are full again
}

const (
	owedWays = 4 // cells a group: 64 bytes, one cache line
	// mergedBit marks a merged cell: it is an id's lock bit, which is
	// clear in every id, so no merged cell equals an id.
	mergedBit = lockBit
)

// bloomBits are the two bits of id in a merged cell's filter, among bits
// 6 to 63 (the ones above mergedBit).
func bloomBits(id uint64) uint64 {
	x := id * 0xff51afd7ed558ccd
	return 1<<(idBits+(x>>40)%(64-idBits)) | 1<<(idBits+(x>>16)%(64-idBits))
}

// filter is what a cell contributes to a merged cell's filter.
func (c owedCell) filter() uint64 {
	if c.id&mergedBit != 0 {
		return c.id
	}
	return mergedBit | bloomBits(c.id)
}

// newOwed returns the array for a shard of capacity keys: about half a
// cell per key, in a power of two of groups.
func newOwed(capacity int) owed {
	groups := 1
	for groups*owedWays*2 < capacity {
		groups <<= 1
	}
	return owed{cells: make([]owedCell, groups*owedWays), mask: uint64(groups - 1)}
}

// group returns the cells id may use. The group comes from id bits that
// neither the shard nor the table's home slot uses alone.
func (o *owed) group(id uint64) []owedCell {
	g := int((id*0x9e3779b97f4a7c15)>>32&o.mask) * owedWays
	return o.cells[g : g+owedWays : g+owedWays]
}

// remember records that the key of id, evicted at now, is full again at
// fullAt (> now).
func (o *owed) remember(id uint64, fullAt, now int64) {
	g := o.group(id)
	free := -1
	for i := range g {
		c := &g[i]
		if c.id == id {
			c.fullAt = max(c.fullAt, fullAt)
			return
		}
		if free < 0 && (c.id == 0 || c.fullAt <= now) {
			free = i
		}
	}
	if free >= 0 {
		g[free] = owedCell{id: id, fullAt: fullAt}
		return
	}
	// Every cell is live: merge the two entries due soonest, the new one
	// (index owedWays) included.
	entry := owedCell{id: id, fullAt: fullAt}
	cell := func(i int) owedCell {
		if i == owedWays {
			return entry
		}
		return g[i]
	}
	at := func(i int) int64 { return cell(i).fullAt }
	a, b := -1, -1 // a due soonest, then b
	for i := 0; i <= owedWays; i++ {
		switch {
		case a < 0 || at(i) < at(a):
			a, b = i, a
		case b < 0 || at(i) < at(b):
			b = i
		}
	}
	merged := owedCell{id: cell(a).filter() | cell(b).filter(), fullAt: max(at(a), at(b))}
	switch {
	case a == owedWays:
		g[b] = merged
	case b == owedWays:
		g[a] = merged
	default:
		g[a], g[b] = merged, entry
	}
}

// recall returns, for the key of id coming back at now, the fullAt of its
// own cell and the latest of the group's merged cells whose filter holds
// it (each ≤ now when there is none), and frees its own cell: the key's state is in the table again.
func (o *owed) recall(id uint64, now int64) (own, merged int64) {
	own, merged = now, now
	bits := bloomBits(id)
	g := o.group(id)
	for i := range g {
		c := &g[i]
		switch {
		case c.fullAt <= now:
		case c.id == id:
			own = c.fullAt
			*c = owedCell{}
		case c.id&mergedBit != 0 && c.id&bits == bits:
			merged = max(merged, c.fullAt)
		}
	}
	return own, merged
}

// owedBucket is the bucket of r at now for a key whose own record says it
// is full at own and whose group's merged record says merged (either ≤ now
// when absent): the tokens a bucket full at own has now, at most as many
// as one full at merged has, but never fewer than none because of
// merged, which may be another key's.
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
