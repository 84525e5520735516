package advise

import "math"

// The burst pass measures, for every (class, key) of the window, the
// smallest bucket that would have passed all of the key's requests of the
// class at the class's proposed rate: the most a leaky bucket draining at
// the rate ever held,
//
//	fill after a request = max(0, fill − rate × time since the last one) + 1
//	need                 = ⌈the largest fill⌉
//
// (a token bucket of that burst, full at the start, never rejects the
// key). It runs once the rates are known, over the same input in time
// order, and costs one more pass; the burst is then read from the needs
// of the normal keys (proposeByKeys).

// burstPass is the pass that fills keySum.need.
type burstPass struct {
	m     *measurer
	cls   *classes
	start int64     // window start, Unix seconds
	rates []float64 // per second, by class; 0: not measured
	ro    *reorder
}

func newBurstPass(m *measurer, cls *classes, start, reorder int64, rates []float64) *burstPass {
	bp := &burstPass{m: m, cls: cls, start: start, rates: rates}
	bp.ro = newReorder(reorder, true, bp.release)
	return bp
}

func (bp *burstPass) batch(b *batch) { feed(bp.cls, bp.ro, b) }

// release adds the records of one second, in time order, to their keys'
// buckets.
func (bp *burstPass) release(s *slotBuf) {
	if s.sec < bp.start {
		return
	}
	for i := range s.items {
		it := &s.items[i]
		class := classOfItem(bp.cls, s, it)
		if class < 0 || int(class) >= len(bp.rates) || bp.rates[class] == 0 || it.status&statusRefused != 0 {
			continue
		}
		idx, ok := bp.m.sumIndex[stateHash(class, it.keyHash)]
		if !ok {
			continue
		}
		k := &bp.m.sums[idx]
		if k.need > 0 {
			// a late line (counted in an older second) drains nothing
			k.fill = max(0, k.fill-bp.rates[class]*float64(max(0, it.time-k.last))/1e6)
		}
		k.fill++
		k.last = max(k.last, it.time)
		// the rate's refill is exact to a microsecond: a hair above a
		// whole number of requests is that number
		k.need = max(k.need, uint32(math.Ceil(k.fill-1e-6)))
	}
}

func (bp *burstPass) finish() { bp.ro.flush() }
