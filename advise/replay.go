package advise

import (
	"slices"
	"unsafe"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

// replayer is pass 2: it runs the proposed rules over the same log, with
// the log's own timestamps, on the real in-memory store.
type replayer struct {
	cls      *classes
	start    int64           // window start, Unix seconds
	rules    [][]sluice.Rule // by class; nil: not limited
	store    *memstore.Store
	keybuf   []byte
	lastSw   int64
	requests []int64
	rejected []int64
	byKey    []map[string]int64 // rejected requests per key, by class
	// apart are the keys set apart, by class: the others' requests are
	// the legitimate ones, counted in legit and legitRejected.
	apart         []map[string]bool
	legit         []int64
	legitRejected []int64
	keys          []*distinct // distinct keys, by class
	ro            *reorder
	variants      []*variant // what-ifs (whatif.go)
}

// newReplayer returns a replayer of rules (by class) over the records
// from second start on, put back in time order within reorder seconds.
func newReplayer(cls *classes, start, reorder int64, rules [][]sluice.Rule) *replayer {
	rp := &replayer{
		cls:      cls,
		start:    start,
		rules:    rules,
		store:    memstore.New(memstore.Options{SweepInterval: -1}),
		requests: make([]int64, len(rules)),
		rejected: make([]int64, len(rules)),
		byKey:    make([]map[string]int64, len(rules)),
		keys:     make([]*distinct, len(rules)),
		apart:    make([]map[string]bool, len(rules)),

		legit:         make([]int64, len(rules)),
		legitRejected: make([]int64, len(rules)),
	}
	rp.ro = newReorder(reorder, true, rp.release)
	return rp
}

func (rp *replayer) batch(b *batch) { feed(rp.cls, rp.ro, b) }

// feed adds the records of b that have a class, or may have one, to ro.
func feed(cls *classes, ro *reorder, b *batch) {
	for i := range b.recs {
		r := &b.recs[i]
		if ep := knownEndpoint(cls, r); ep != -1 {
			ro.add(b, r, max(ep, -1))
		}
	}
}

// release replays the records of one second, in time order.
func (rp *replayer) release(s *slotBuf) {
	if s.sec < rp.start {
		return
	}
	for i := range s.items {
		it := &s.items[i]
		class := classOfItem(rp.cls, s, it)
		if class < 0 || int(class) >= len(rp.rules) || rp.rules[class] == nil || it.status&statusRefused != 0 {
			continue
		}
		sweep := false
		if m := it.time / 60e6; m > rp.lastSw {
			// a bucket full again is the same as no bucket: drop them
			rp.store.Sweep(it.time)
			rp.lastSw, sweep = m, true
		}
		rp.requests[class]++
		if rp.keys[class] == nil {
			rp.keys[class] = new(distinct)
		}
		rp.keys[class].add(it.keyHash)
		key := s.bytes(it.key)
		rp.keybuf = appendStateKey(rp.keybuf[:0], class, key)
		// memstore copies a key it keeps, so a view of keybuf is enough.
		k := unsafe.String(unsafe.SliceData(rp.keybuf), len(rp.keybuf))
		res := rp.store.CheckAt(sluice.Request{Key: k, Cost: 1, Rules: rp.rules[class]}, it.time)
		rp.checkVariants(class, k, it.keyHash, it.time, sweep)
		legit := !rp.apart[class][string(key)]
		if legit {
			rp.legit[class]++
		}
		if !res.Allowed {
			if legit {
				rp.legitRejected[class]++
			}
			rp.rejected[class]++
			if rp.byKey[class] == nil {
				rp.byKey[class] = make(map[string]int64)
			}
			rp.byKey[class][string(key)]++
		}
	}
}

// finish replays what the reorder buffer still holds.
func (rp *replayer) finish() { rp.ro.flush() }

// KeyCount is a caller and how many of its requests were rejected.
type KeyCount struct {
	Key      string `json:"key"`
	Rejected int64  `json:"rejected"`
}

// top returns the n keys of class with the most rejections, ties by key.
func (rp *replayer) top(class, n int) []KeyCount {
	var out []KeyCount
	for k, c := range rp.byKey[class] {
		out = append(out, KeyCount{k, c})
	}
	slices.SortFunc(out, func(a, b KeyCount) int {
		if a.Rejected != b.Rejected {
			if a.Rejected > b.Rejected {
				return -1
			}
			return 1
		}
		if a.Key < b.Key {
			return -1
		}
		if a.Key > b.Key {
			return 1
		}
		return 0
	})
	if len(out) > n {
		out = out[:n]
	}
	return out
}
