// Package owed remembers, in memory fixed when a store is made, what keys
// evicted from a capped in-memory store still owed, so that a key that
// comes back never starts fresher than it left.
//
// A Table is a power of two of groups, a key's group chosen by its id. A
// group has Ways cells, each holding one key's id, the time until which it
// owes something and a value the store packs its state into, and a merged
// record: a 512-bit Bloom filter of ids (three bits an id) and the latest
// time until which a key merged into it owes. When a key is remembered and
// its group has no free cell (none empty, of the same key, or past its
// time), the entry due soonest among the group's cells and the new one goes
// into the merged record; the others keep their cells. A merged record
// whose time has passed starts empty again. So a key that comes back finds
// either its own cell, exact, or a merged record that holds it and a time
// at least as late as its own; a key that never was evicted matches a
// merged record by chance with the odds of a Bloom filter (about 0.03%
// once 12 keys were merged into the group, 7% once 90 were), and the store
// then treats it as owing what any key due by the merged time could owe.
package owed

// Ways is the number of cells a group.
const Ways = 4

// Table is the remembrance of one shard; the zero Table remembers nothing.
// It is not safe for concurrent use: the shard's lock guards it.
type Table[V any] struct {
	cells  []cell[V] // groups of Ways; nil when the store has no cap
	merged []merged  // one a group
	mask   uint64    // number of groups - 1
	// used: a key was remembered. Until then every cell is empty and
	// every merged record too, and Peek and Recall answer without reading
	// them: a store under its cap evicts nothing, and reading a table of
	// a million keys that was never written costs microseconds a read
	// (pages never touched; BenchmarkNewKeysUnderCap in memstore).
	used bool
}

type cell[V any] struct {
	v     V
	id    uint64 // the key's id; 0: empty
	until int64  // Unix µs from which the key owes nothing
}

type merged struct {
	filter [8]uint64 // 512 bits
	until  int64     // the latest until merged in; the record is empty once it has passed
}

// New returns the Table for a shard of capacity keys: a group per eight
// keys, in a power of two of groups.
func New[V any](capacity int) Table[V] {
	groups := 1
	for groups*Ways*2 < capacity {
		groups <<= 1
	}
	return Table[V]{
		cells:  make([]cell[V], groups*Ways),
		merged: make([]merged, groups),
		mask:   uint64(groups - 1),
	}
}

// Cells returns the number of cells: what the table can hold exactly.
func (o *Table[V]) Cells() int { return len(o.cells) }

// Merged returns the number of merged records, one a group.
func (o *Table[V]) Merged() int { return len(o.merged) }

// group returns the index of the group of id, from id bits that neither
// a shard nor a hash table's home slot uses alone.
func (o *Table[V]) group(id uint64) int {
	return int((id * 0x9e3779b97f4a7c15) >> 32 & o.mask)
}

// bloomBits returns the three bits of id in a merged filter, as indexes
// from 0 to 511, from a mix of id other than the one group uses.
func bloomBits(id uint64) [3]uint {
	x := id * 0xff51afd7ed558ccd
	return [3]uint{uint(x >> 55), uint(x>>46) & 511, uint(x>>37) & 511}
}

func (m *merged) add(id uint64) {
	for _, b := range bloomBits(id) {
		m.filter[b>>6] |= 1 << (b & 63)
	}
}

func (m *merged) holds(id uint64) bool {
	for _, b := range bloomBits(id) {
		if m.filter[b>>6]&(1<<(b&63)) == 0 {
			return false
		}
	}
	return true
}

// Remember records that the key of id (not 0), evicted at now, owes v
// until until (> now). A cell the key already holds takes the new value.
func (o *Table[V]) Remember(id uint64, until, now int64, v V) {
	if o.cells == nil {
		return
	}
	o.used = true
	gi := o.group(id)
	g := o.cells[gi*Ways : gi*Ways+Ways]
	free, soonest := -1, 0
	for i := range g {
		c := &g[i]
		if c.id == id {
			*c = cell[V]{v: v, id: id, until: max(c.until, until)}
			return
		}
		if free < 0 && (c.id == 0 || c.until <= now) {
			free = i
		}
		if c.until < g[soonest].until {
			soonest = i
		}
	}
	if free >= 0 {
		g[free] = cell[V]{v: v, id: id, until: until}
		return
	}
	// Every cell is live: the entry due soonest goes into the merged record.
	m := &o.merged[gi]
	if m.until <= now {
		*m = merged{}
	}
	if g[soonest].until < until {
		m.add(g[soonest].id)
		m.until = max(m.until, g[soonest].until)
		g[soonest] = cell[V]{v: v, id: id, until: until}
		return
	}
	m.add(id)
	m.until = max(m.until, until)
}

// Recall returns, for the key of id coming back at now, what Peek does,
// and frees its own cell: the key's state is in the store again.
func (o *Table[V]) Recall(id uint64, now int64) (v V, own, mergedUntil int64) {
	v, own, mergedUntil = o.Peek(id, now)
	if o.used {
		gi := o.group(id)
		for i := gi * Ways; i < gi*Ways+Ways; i++ {
			if o.cells[i].id == id {
				o.cells[i] = cell[V]{}
			}
		}
	}
	return v, own, mergedUntil
}

// Peek returns, for the key of id at now, the value and the until of its
// own cell (until ≤ now when it has none that is still owed) and the until
// of its group's merged record if that holds it (≤ now when there is
// none).
func (o *Table[V]) Peek(id uint64, now int64) (v V, own, mergedUntil int64) {
	own, mergedUntil = now, now
	if !o.used {
		return v, now, now
	}
	gi := o.group(id)
	for _, c := range o.cells[gi*Ways : gi*Ways+Ways] {
		if c.id == id && c.until > now {
			v, own = c.v, c.until
		}
	}
	if m := &o.merged[gi]; m.until > now && m.holds(id) {
		mergedUntil = m.until
	}
	return v, own, mergedUntil
}

// MergedHolds reports whether the merged record of id's group holds id,
// whether or not its time has passed.
func (o *Table[V]) MergedHolds(id uint64) bool {
	return o.used && o.merged[o.group(id)].holds(id)
}

// Live returns the number of cells that still owe something at now.
func (o *Table[V]) Live(now int64) int {
	n := 0
	for i := range o.cells {
		if o.cells[i].id != 0 && o.cells[i].until > now {
			n++
		}
	}
	return n
}
