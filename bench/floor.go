package bench

import (
	"context"
	"hash/maphash"
	"sync"
)

// floorMap is the memory-latency floor of a keyed limiter: a bare map
// split into as many shards as memstore's (256), each under its mutex,
// that finds the caller's entry and writes it, with no clock and no
// limiting. Whatever a keyed limiter does, it does at least this: the
// distance of a row to this one is what the limiting costs.
type floorMap struct {
	seed   maphash.Seed
	shards [256]floorShard
}

type floorShard struct {
	mu sync.Mutex
	m  map[string]*floorEntry
	_  [40]byte // keeps neighbouring shards' locks off one cache line
}

// floorEntry is the size of one memstore bucket: tokens and a time.
type floorEntry struct {
	tokens float64
	last   int64
}

func newFloorMap() *floorMap {
	f := &floorMap{seed: maphash.MakeSeed()}
	for i := range f.shards {
		f.shards[i].m = make(map[string]*floorEntry)
	}
	return f
}

func (f *floorMap) Allow(_ context.Context, key string, cost int64) (bool, error) {
	sh := &f.shards[maphash.String(f.seed, key)>>56]
	sh.mu.Lock()
	e := sh.m[key]
	if e == nil {
		e = &floorEntry{tokens: RuleBurst}
		sh.m[key] = e
	}
	e.tokens -= float64(cost)
	e.last++
	sh.mu.Unlock()
	return true, nil
}

func (f *floorMap) Close() error { return nil }
