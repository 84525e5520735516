package resilient

import (
	"math"
	rtmetrics "runtime/metrics"
	"sync/atomic"
	"time"
)

// schedLag follows how long this process's runnable goroutines wait to
// run: the 99th percentile of runtime/metrics /sched/latencies:seconds
// over each tick, and how late the tick itself came (which sees the
// machine's other processes too). Under a burst of a thousand requests on
// two busy cores a goroutine that a store's reply made runnable waits tens
// of milliseconds for a processor, while a timer is served first: a
// deadline check that saw no answer then proves nothing about the store.
// The estimate rises at once and decays by an eighth a tick (20ms), so it
// covers calls sent just before a stall. Each tick's lag, before the
// decay, is observed by observe (sluice_store_scheduling_lag_seconds).
type schedLag struct {
	ns      atomic.Int64
	observe func(float64)
	stop    chan struct{}
	done    chan struct{}
}

const lagTick = 20 * time.Millisecond

func startSchedLag(observe func(float64)) *schedLag {
	l := &schedLag{observe: observe, stop: make(chan struct{}), done: make(chan struct{})}
	go l.run()
	return l
}

// get returns the estimate now.
func (l *schedLag) get() time.Duration { return time.Duration(l.ns.Load()) }

func (l *schedLag) close() {
	close(l.stop)
	<-l.done
}

func (l *schedLag) run() {
	defer close(l.done)
	sample := []rtmetrics.Sample{{Name: "/sched/latencies:seconds"}}
	rtmetrics.Read(sample)
	var prev []uint64
	if sample[0].Value.Kind() == rtmetrics.KindFloat64Histogram {
		prev = append(prev, sample[0].Value.Float64Histogram().Counts...)
	}
	t := time.NewTimer(lagTick)
	defer t.Stop()
	for {
		start := time.Now()
		t.Reset(lagTick)
		select {
		case <-l.stop:
			return
		case <-t.C:
		}
		est := max(int64(time.Since(start)-lagTick), 0)
		if prev != nil {
			rtmetrics.Read(sample)
			h := sample[0].Value.Float64Histogram()
			est = max(est, quantile(h.Counts, prev, h.Buckets, 0.99))
			copy(prev, h.Counts)
		}
		l.observe(float64(est) / 1e9)
		old := l.ns.Load()
		l.ns.Store(max(est, old-old/8))
	}
}

// quantile returns the upper bound of the bucket that holds quantile q of
// the counts added since prev, in nanoseconds; 0 when none were added.
func quantile(counts, prev []uint64, buckets []float64, q float64) int64 {
	var total uint64
	for i := range counts {
		total += counts[i] - prev[i]
	}
	if total == 0 {
		return 0
	}
	target := uint64(math.Ceil(q * float64(total)))
	var seen uint64
	for i := range counts {
		seen += counts[i] - prev[i]
		if seen >= target {
			upper := buckets[i+1]
			if math.IsInf(upper, 1) {
				upper = buckets[i]
			}
			return int64(upper * 1e9)
		}
	}
	return 0
}
