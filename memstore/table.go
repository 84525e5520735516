package memstore

import "github.com/sluicehq/sluice"

// table is an open-addressing hash table of keys' state, with linear
// probing and backward-shift deletion (no tombstones). A key is its 64-bit
// hash; the low bits of the stored id hold the key's number of rules, so
// that a key checked with another number of rules is seen as another
// state. The bucket of a one-rule key lives in its slot, so a check
// touches one cache line of the table; keys with more rules keep all
// their buckets in extra.
type table struct {
	slots []slot // length a power of two, or nil
	used  int
	extra map[uint64][]sluice.Bucket // by id, for keys of 2 or more rules
}

type slot struct {
	id     uint64 // hash with the rule count in idBits; 0: empty
	fullAt int64  // Unix µs when every bucket is full again
	b      [1]sluice.Bucket
}

const (
	idBits   = 5 // rule counts up to 31 ≥ sluice.MaxRules
	idMask   = 1<<idBits - 1
	maxLoad  = 3 // of 4
	minSlots = 8
)

func makeID(hash uint64, rules int) uint64 { return hash&^idMask | uint64(rules) }

func (t *table) home(id uint64) int { return int(id>>idBits) & (len(t.slots) - 1) }

// find returns the slot of id, or nil.
func (t *table) find(id uint64) *slot {
	if t.slots == nil {
		return nil
	}
	mask := len(t.slots) - 1
	for i := t.home(id); ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.id == id {
			return s
		}
		if s.id == 0 {
			return nil
		}
	}
}

// insert adds id, which must not be present, and returns its slot.
func (t *table) insert(id uint64) *slot {
	if (t.used+1)*4 > len(t.slots)*maxLoad {
		t.grow()
	}
	mask := len(t.slots) - 1
	i := t.home(id)
	for t.slots[i].id != 0 {
		i = (i + 1) & mask
	}
	t.used++
	s := &t.slots[i]
	s.id = id
	return s
}

func (t *table) grow() {
	old := t.slots
	n := 2 * len(old)
	if n < minSlots {
		n = minSlots
	}
	t.slots = make([]slot, n)
	mask := n - 1
	for _, s := range old {
		if s.id == 0 {
			continue
		}
		i := t.home(s.id)
		for t.slots[i].id != 0 {
			i = (i + 1) & mask
		}
		t.slots[i] = s
	}
}

// deleteAt empties slot i and shifts back the slots after it that would
// otherwise no longer be found.
func (t *table) deleteAt(i int) {
	if id := t.slots[i].id; id&idMask > 1 {
		delete(t.extra, id)
	}
	mask := len(t.slots) - 1
	for j := (i + 1) & mask; t.slots[j].id != 0; j = (j + 1) & mask {
		h := t.home(t.slots[j].id)
		// Slot j may move to i unless its home lies cyclically in (i, j].
		if (j > i && (h <= i || h > j)) || (j < i && h <= i && h > j) {
			t.slots[i] = t.slots[j]
			i = j
		}
	}
	t.slots[i] = slot{}
	t.used--
}

// buckets returns the buckets of the key in s for its rules.
func (t *table) buckets(s *slot) []sluice.Bucket {
	if s.id&idMask == 1 {
		return s.b[:]
	}
	return t.extra[s.id]
}

// sweep empties every slot whose buckets are full at now and returns how
// many. A backward shift may move a slot into the position just visited,
// so that position is looked at again; one moved across the end of the
// array is only looked at twice, which is harmless.
func (t *table) sweep(now int64) int {
	dropped := 0
	for i := 0; i < len(t.slots); {
		if s := &t.slots[i]; s.id != 0 && s.fullAt <= now {
			t.deleteAt(i)
			dropped++
			continue
		}
		i++
	}
	return dropped
}

// evict empties one slot to make room: a key that is full again if the
// sample of up to evictSample keys after a random start holds one, else
// the sampled key that will be full soonest.
func (t *table) evict(now int64, start uint64) {
	if t.used == 0 {
		return
	}
	mask := len(t.slots) - 1
	victim, seen := -1, 0
	for i := int(start) & mask; seen < evictSample; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.id == 0 {
			continue
		}
		if victim < 0 || s.fullAt < t.slots[victim].fullAt {
			victim = i
		}
		seen++
		if s.fullAt <= now || seen == t.used {
			break
		}
	}
	t.deleteAt(victim)
}
