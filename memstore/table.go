package memstore

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
)

// table is an open-addressing hash table of keys' state, with linear
// probing and backward-shift deletion (no tombstones). A key is its 64-bit
// hash; the low bits of the stored id hold the key's number of rules, so
// that a key checked with another number of rules is seen as another
// state. The bucket of a one-rule key lives in its slot, so a check
// touches one cache line of the table; keys with more rules keep all
// their buckets in extra.
//
// Every slot carries its own lock, a bit of its id. A check of a one-rule
// key that exists takes no other lock when the slot is free: it finds the
// slot in the published array, locks the slot by compare-and-swap from the
// id it looked for, and unlocks it by storing the id back (lockExisting).
// A check that finds the slot locked tries a few more times, then queues on
// the table's queue mutex, which parks it: only the head of the queue keeps
// trying the slot, so a hot key checked by many callers at once costs one
// waiter's spinning per shard, not one per caller; and a head that still
// finds the slot locked after a few hundred tries sleeps between tries,
// since the holder's thread is then off its core (more threads than cores,
// or the holder preempted), and spinning would only keep it off. Everything that changes
// which key a slot holds (insert, the moves of a backward shift, grow,
// sweep, evict) runs under the shard's mutex and locks every slot it reads
// or writes, so:
//
//   - a key's state is read and written only by the holder of the lock of
//     a slot that holds the key's id;
//   - at any moment at most one unlocked slot holds a given id (a move
//     writes the destination while it still holds the source locked, and
//     grow marks every old slot moved before it publishes the new array);
//   - a check that misses the key on the lock-free path, because the key
//     is new or because a writer moved it meanwhile, falls back to the
//     locked path, which sees the table as it is.
type table struct {
	cur   atomic.Pointer[[]slot] // the published array, for lockExisting
	queue sync.Mutex             // the checks that found their slot locked, but its holder
	slots []slot                 // the same array, for writers; length a power of two, or nil
	used  int
	extra map[uint64][]sluice.Bucket // by id, for keys of 2 or more rules
}

type slot struct {
	id     atomic.Uint64 // hash with the rule count in ruleBits and the lock in lockBit; 0: empty
	fullAt int64         // Unix µs when every bucket is full again
	b      [1]sluice.Bucket
}

const (
	ruleBits = 5 // rule counts up to 31 ≥ sluice.MaxRules
	ruleMask = 1<<ruleBits - 1
	lockBit  = 1 << ruleBits
	idBits   = ruleBits + 1 // the id bits that are not the hash
	// moved is the id of a slot of an array that grow replaced (a locked
	// slot of no key): a check that meets it takes the locked path.
	moved = lockBit

	maxLoad  = 3 // of 4
	minSlots = 8

	// spinsBeforeQueue is how many times a check tries a locked slot
	// before it queues: a lock is held for a few tens of nanoseconds, so
	// a free slot is usually seen within these, and a slot still held
	// after them has a holder that is waiting for a core.
	spinsBeforeQueue = 16
	// spinsBeforeYield is how often the head of the queue, and a writer,
	// let the goroutines of their core run while they wait for a slot.
	spinsBeforeYield = 64
	// spinsBeforeSleep is how long the head of the queue spins and yields
	// before it sleeps, from a microsecond up to maxPause, doubling: a
	// slot held that long has a holder whose thread the operating system
	// took off its core (more threads than cores), and the sleep gives the
	// core back to it.
	spinsBeforeSleep = 4 * spinsBeforeYield
	maxPause         = 100 * time.Microsecond
)

func makeID(hash uint64, rules int) uint64 { return hash&^(1<<idBits-1) | uint64(rules) }

func home(id uint64, mask int) int { return int(id>>idBits) & mask }

// lockExisting locks and returns the slot of id if the published array
// holds it, without the shard's mutex; nil means the caller must take the
// locked path (the key is missing, or a writer is moving it). The caller
// unlocks the slot.
func (t *table) lockExisting(id uint64) *slot {
	p := t.cur.Load()
	if p == nil {
		return nil
	}
	slots := *p
	mask := len(slots) - 1
	for i := home(id, mask); ; i = (i + 1) & mask {
		s := &slots[i]
		v := s.id.Load()
		if v == id && s.id.CompareAndSwap(id, id|lockBit) {
			return s // the common case: a free slot, one compare-and-swap
		}
		if v&^lockBit == id {
			if t.waitID(s, id) {
				return s
			}
			return nil
		}
		if v&^lockBit == 0 { // empty, or moved
			return nil
		}
	}
}

// waitID waits while s is locked and locks it if it still holds id; false
// means a writer gave s another id. It tries spinsBeforeQueue times, then
// queues behind the other waiters of the table (see table).
func (t *table) waitID(s *slot, id uint64) bool {
	for range spinsBeforeQueue {
		if locked, done := s.tryID(id); done {
			return locked
		}
	}
	t.queue.Lock()
	defer t.queue.Unlock()
	pause := time.Microsecond
	for n := 1; ; n++ {
		if locked, done := s.tryID(id); done {
			return locked
		}
		switch {
		case n >= spinsBeforeSleep:
			time.Sleep(pause)
			pause = min(2*pause, maxPause)
		case n%spinsBeforeYield == 0:
			runtime.Gosched()
		}
	}
}

// tryID tries once to lock s if it holds id: done is false while another
// holds it, and then the caller tries again.
func (s *slot) tryID(id uint64) (locked, done bool) {
	switch s.id.Load() {
	case id:
		locked = s.id.CompareAndSwap(id, id|lockBit)
		return locked, locked
	case id | lockBit:
		return false, false
	}
	return false, true
}

// lock waits for s to be unlocked and locks it, whatever id it holds, for
// a writer (which holds the shard's mutex, so the id itself cannot change
// meanwhile). It returns the id, unlocked.
func (s *slot) lock() uint64 {
	for n := 1; ; n++ {
		if v := s.id.Load(); v&lockBit == 0 && s.id.CompareAndSwap(v, v|lockBit) {
			return v
		}
		if n%spinsBeforeYield == 0 {
			runtime.Gosched()
		}
	}
}

func (s *slot) unlock() { s.id.Store(s.id.Load() &^ lockBit) }

// find returns the slot of id, or nil, under the shard's mutex. The slot
// is not locked: a check may hold it.
func (t *table) find(id uint64) *slot {
	if t.slots == nil {
		return nil
	}
	mask := len(t.slots) - 1
	for i := home(id, mask); ; i = (i + 1) & mask {
		s := &t.slots[i]
		v := s.id.Load() &^ lockBit
		if v == id {
			return s
		}
		if v == 0 {
			return nil
		}
	}
}

// insert adds id, which must not be present, and returns its slot, locked
// and with zero state, for the caller to fill and unlock.
func (t *table) insert(id uint64) *slot {
	if (t.used+1)*4 > len(t.slots)*maxLoad {
		t.grow()
	}
	mask := len(t.slots) - 1
	i := home(id, mask)
	for t.slots[i].id.Load() != 0 {
		i = (i + 1) & mask
	}
	t.used++
	s := &t.slots[i]
	s.id.Store(id | lockBit) // no check locks an empty slot: a plain store takes it
	return s
}

// grow moves every key to an array twice as large and publishes it. Each
// old slot is locked (waiting out a check that holds it), copied, and left
// locked as moved, so a check still probing the old array takes the locked
// path and waits for grow to finish.
func (t *table) grow() {
	old := t.slots
	n := 2 * len(old)
	if n < minSlots {
		n = minSlots
	}
	slots := make([]slot, n)
	mask := n - 1
	for j := range old {
		o := &old[j]
		if o.id.Load() == 0 {
			continue
		}
		id := o.lock()
		i := home(id, mask)
		for slots[i].id.Load() != 0 {
			i = (i + 1) & mask
		}
		slots[i].fullAt, slots[i].b = o.fullAt, o.b
		slots[i].id.Store(id)
		o.id.Store(moved)
	}
	t.slots = slots
	t.cur.Store(&slots)
}

// deleteAt empties slot i, which the caller has locked, and shifts back the
// slots after it that would otherwise no longer be found. The slot moved
// into the hole is written while its old place is still locked; the last
// hole is unlocked as empty.
func (t *table) deleteAt(i int) {
	if id := t.slots[i].id.Load() &^ lockBit; id&ruleMask > 1 {
		delete(t.extra, id)
	}
	mask := len(t.slots) - 1
	for j := (i + 1) & mask; ; j = (j + 1) & mask {
		id := t.slots[j].id.Load() &^ lockBit // ids change only under the mutex we hold
		if id == 0 {
			break
		}
		h := home(id, mask)
		// Slot j may move to i unless its home lies cyclically in (i, j].
		if (j > i && (h <= i || h > j)) || (j < i && h <= i && h > j) {
			src, dst := &t.slots[j], &t.slots[i]
			src.lock()
			dst.fullAt, dst.b = src.fullAt, src.b
			dst.id.Store(id) // unlocked, in its new place
			i = j            // src stays locked: the new hole
		}
	}
	s := &t.slots[i]
	s.fullAt, s.b = 0, [1]sluice.Bucket{}
	s.id.Store(0)
	t.used--
}

// buckets returns the buckets of the key in s for its rules.
func (t *table) buckets(s *slot) []sluice.Bucket {
	if id := s.id.Load(); id&ruleMask > 1 {
		return t.extra[id&^lockBit]
	}
	return s.b[:]
}

// sweep empties every slot whose buckets are full at now and returns how
// many. A backward shift may move a slot into the position just visited,
// so that position is looked at again; one moved across the end of the
// array is only looked at twice, which is harmless.
func (t *table) sweep(now int64) int {
	dropped := 0
	for i := 0; i < len(t.slots); {
		s := &t.slots[i]
		if s.id.Load() == 0 {
			i++
			continue
		}
		s.lock()
		if s.fullAt <= now {
			t.deleteAt(i)
			dropped++
			continue
		}
		s.unlock()
		i++
	}
	return dropped
}

// evict empties one slot to make room: a key that is full again if the
// sample of up to evictSample keys after a random start holds one, else
// the sampled key that will be full soonest. It returns the id of the key
// it dropped, when that key would have been full again, and, when one of
// its buckets is a calendar quota within its period (Last after now) and
// the key is not full, a copy of its buckets.
func (t *table) evict(now int64, start uint64) (id uint64, fullAt int64, quota []sluice.Bucket) {
	if t.used == 0 {
		return 0, now, nil
	}
	mask := len(t.slots) - 1
	victim, victimAt, seen := -1, int64(0), 0
	for i := int(start) & mask; seen < evictSample; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.id.Load() == 0 {
			continue
		}
		s.lock()
		at := s.fullAt
		s.unlock()
		if victim < 0 || at < victimAt {
			victim, victimAt = i, at
		}
		seen++
		if at <= now || seen == t.used {
			break
		}
	}
	id = t.slots[victim].lock()
	if victimAt > now {
		for _, bk := range t.buckets(&t.slots[victim]) {
			if bk.Last > now {
				quota = append([]sluice.Bucket(nil), t.buckets(&t.slots[victim])...)
				break
			}
		}
	}
	t.deleteAt(victim)
	return id, victimAt, quota
}
