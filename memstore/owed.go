package memstore

import (
	"github.com/sluicehq/sluice"
	owedtab "github.com/sluicehq/sluice/internal/owed"
)

// owed remembers what evicted keys owed: for a key dropped at the cap
// before its buckets were full again, the time at which they would have
// been full. A key that comes back starts from that, not from a full
// bucket, so eviction never hands a caller tokens it had spent.
//
// It is fixed at New (package internal/owed, whose cells here hold no
// value), in groups chosen by the key's id. A group has owedtab.Ways cells
// (one cache line), each holding one key's id and fullAt, and a merged
// record: a 512-bit Bloom filter of ids (three bits an id)
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
type owed struct{ t owedtab.Table[struct{}] }

// newOwed returns the array for a shard of capacity keys: a group per
// eight keys, in a power of two of groups.
func newOwed(capacity int) owed { return owed{owedtab.New[struct{}](capacity)} }

// remember records that the key of id, evicted at now, is full again at
// fullAt (> now).
func (o *owed) remember(id uint64, fullAt, now int64) { o.t.Remember(id, fullAt, now, struct{}{}) }

// recall returns, for the key of id coming back at now, the fullAt of its
// own cell and of its group's merged record if that holds it (each ≤ now
// when there is none), and frees its own cell: the key's state is in the
// table again.
func (o *owed) recall(id uint64, now int64) (own, merged int64) {
	_, own, merged = o.t.Recall(id, now)
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
