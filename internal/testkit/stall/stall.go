// Package stall measures how long a busy machine keeps this process from
// running: the longest gap between two consecutive wake-ups of a short
// timer, beyond the timer's own tick. Tests that bound a latency add it to
// their bound rather than assume a deadline is met to the millisecond on a
// shared 2-core machine. It is a test aid; nothing in sluice's serving
// path uses it.
package stall

import (
	"sync/atomic"
	"time"
)

const tick = 5 * time.Millisecond

// Watch is a running measurement, from Start until Stop.
type Watch struct {
	worst atomic.Int64 // the longest gap beyond the tick so far, ns
	stop  chan struct{}
	done  chan time.Duration
}

// Start begins measuring.
func Start() *Watch {
	w := &Watch{stop: make(chan struct{}), done: make(chan time.Duration, 1)}
	go w.run()
	return w
}

func (w *Watch) run() {
	timer := time.NewTimer(tick)
	defer timer.Stop()
	prev := time.Now()
	for {
		select {
		case <-w.stop:
			// The gap up to now counts too: a stall at the very end.
			w.note(time.Since(prev) - tick)
			w.done <- w.Longest()
			return
		case <-timer.C:
		}
		now := time.Now()
		w.note(now.Sub(prev) - tick)
		prev = now
		timer.Reset(tick)
	}
}

func (w *Watch) note(gap time.Duration) {
	if int64(gap) > w.worst.Load() {
		w.worst.Store(int64(gap)) // only run writes it
	}
}

// Longest returns the longest stall seen so far, without stopping.
func (w *Watch) Longest() time.Duration { return time.Duration(w.worst.Load()) }

// Stop ends the measurement and returns the longest stall, the gap in
// which Stop was called included. It may be called only once.
func (w *Watch) Stop() time.Duration {
	close(w.stop)
	return <-w.done
}
