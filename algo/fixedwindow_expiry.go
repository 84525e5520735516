package algo

import (
	"hash/maphash"
	"sync/atomic"
	"time"
)

// A counter's EXPIRE is sent with the first INCRBY this store sends it,
// and again once less than expiryGrace is known to be left of the expiry
// it gave; an INCRBY in between goes alone. envoyproxy/ratelimit sends an
// EXPIRE with every INCRBY: at counters that exist (a counter is made once
// a window), 8 or more a round trip, the EXPIRE was a sixth to a third of
// what Redis spent on each (BENCHMARKS.md, 6 December 2026 (fifth
// session)).
//
// The danger of an INCRBY alone is that it reaches Redis after its counter
// expired (or was deleted, or Redis restarted empty) and makes it anew,
// without an expiry: a counter kept for ever. Two things stand against it:
//   - the store sends one alone only while the expiry it gave is at least
//     expiryGrace away by its own clock (a lower bound: the time is read
//     before the EXPIRE is sent, and only an EXPIRE that answered 1, the
//     counter had it, is remembered);
//   - an INCRBY sent alone whose total is its own sum made its counter
//     (whatever the reason), and the store sends that counter's EXPIRE
//     at once, before the batch's checks are answered (fixedWindowRedis.
//     reexpire).
//
// So a counter is left without an expiry only if an INCRBY sent alone both
// makes it and never has its answer read (the process or its connection
// ends in between) — as envoyproxy/ratelimit's is if its connection ends
// between its INCRBY and its EXPIRE — and the next INCRBY of that counter
// within expiryGrace of its known expiry gives it one again.

// expiryGrace is how much of a counter's known expiry must be left for an
// INCRBY to go without its EXPIRE. A counter whose window is no longer
// (a window of a second, of ten) gets its EXPIRE with every INCRBY.
const expiryGrace = 10 * time.Second

// horizon is the least second of expiry that is fresh at the second now:
// expiryGrace after now, which is rounded up.
func horizon(now uint32) uint64 {
	return uint64(now) + 1 + uint64(expiryGrace/time.Second)
}

// expirySlots is the size of a store's expiryMemo: 2 MiB, made when the
// store first gives a counter an expiry.
const expirySlots = 1 << 18

// expiryWays is the slots a key's hash may use: a set of 8, one cache
// line. A counter put in a set with no free slot and none stale takes the
// slot of the counter known to expire soonest. Forgetting a counter costs
// its next INCRBY an EXPIRE, which puts it back; a counter never
// remembered would carry its EXPIRE with every INCRBY. With two slots a
// key and no replacement, a counter that came after 100,000 others found
// no room in about one case of six, and in the Envoy benchmark the hot
// key, unlucky, sent an EXPIRE with every batch for the rest of the hour
// (BENCHMARKS.md, 6 December 2026, seventh session).
const expiryWays = 8

// An expiryMemo is what a store knows of its counters' expiries: a slot
// holds a counter's tag (the high half of its key's hash, never 0) and the
// second before which the counter cannot expire (a lower bound), counted
// on a clock of the memo's own (sec). A wrong entry costs at most an
// INCRBY alone, whose answer repairs a counter it made.
type expiryMemo struct {
	seed  maphash.Seed
	base  time.Time // sec's origin, less a year: a test clock may go back
	slots []atomic.Uint64
}

func newExpiryMemo(now time.Time) *expiryMemo {
	return &expiryMemo{seed: maphash.MakeSeed(), base: now.Add(-365 * 24 * time.Hour), slots: make([]atomic.Uint64, expirySlots)}
}

// hash is key's hash; its tag is never 0, an empty slot's.
func (m *expiryMemo) hash(key string) uint64 {
	return maphash.String(m.seed, key) | 1<<32
}

// sec is t in whole seconds of the memo's clock: t's monotonic reading
// when it has one (a store's time.Now), else its wall time; 0 before the
// origin, saturating at 2³²-1 (136 years).
func (m *expiryMemo) sec(t time.Time) uint32 {
	d := t.Sub(m.base)
	if d < 0 {
		return 0
	}
	return uint32(min(d/time.Second, 1<<32-1))
}

// set is the expiryWays slots that key's hash h may use.
func (m *expiryMemo) set(h uint64) []atomic.Uint64 {
	i := h & (expirySlots - 1) &^ (expiryWays - 1)
	return m.slots[i : i+expiryWays : i+expiryWays]
}

// fresh reports whether the counter of hash h is known to expire no
// sooner than expiryGrace after the second now (a lower bound of now:
// the second is rounded up here).
func (m *expiryMemo) fresh(h uint64, now uint32) bool {
	tag := uint32(h >> 32)
	set := m.set(h)
	for i := range set {
		if v := set[i].Load(); uint32(v>>32) == tag {
			return uint64(uint32(v)) >= horizon(now)
		}
	}
	return false
}

// until is what to put for counter c given its expiry at the second
// sent: the expiry, or, when its window ends sooner, just past the end,
// where the entry stops being fresh: no INCRBY of the counter comes after
// its window, and its slot is free for another.
func (m *expiryMemo) until(sent uint32, c *counter) uint32 {
	return uint32(min(uint64(sent)+uint64(c.ttl), horizon(m.sec(time.UnixMicro(c.end))), 1<<32-1))
}

// put remembers that the counter of hash h cannot expire before the
// second until: in its own slot, or else in the slot of its set whose
// counter is known to expire soonest (a free slot's is 0, a stale one's
// in the past). Concurrent puts in one set may lose one of them, which
// costs that counter's next INCRBY an EXPIRE.
func (m *expiryMemo) put(h uint64, until uint32) {
	tag := uint32(h >> 32)
	v := uint64(tag)<<32 | uint64(until)
	set := m.set(h)
	victim, soonest := 0, uint32(1<<32-1)
	for i := range set {
		old := set[i].Load()
		if uint32(old>>32) == tag {
			set[i].Store(v)
			return
		}
		if u := uint32(old); u < soonest {
			victim, soonest = i, u
		}
	}
	set[victim].Store(v)
}

// forget drops what is known of the counter of hash h.
func (m *expiryMemo) forget(h uint64) {
	tag := uint32(h >> 32)
	set := m.set(h)
	for i := range set {
		if old := set[i].Load(); uint32(old>>32) == tag {
			set[i].CompareAndSwap(old, 0)
		}
	}
}
