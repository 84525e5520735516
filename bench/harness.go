package bench

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// ringLen is the number of latency samples kept per caller: the last
// ringLen sampled checks.
const ringLen = 8192

// Callers is a set of concurrent callers, each with its own place in the
// workload's key sequence and its own latency samples, allocated before the
// timed part so that the loop itself allocates nothing.
type Callers struct {
	w           *Workload
	sampleEvery int
	callers     []caller
}

type caller struct {
	start   int
	samples []int64 // ns, a ring
	n       int     // samples taken
	_       [64]byte
}

// NewCallers prepares n callers on w that time one check in sampleEvery (a
// power of two; 1 times every check).
func NewCallers(w *Workload, n, sampleEvery int) *Callers {
	c := &Callers{w: w, sampleEvery: sampleEvery, callers: make([]caller, n)}
	for i := range c.callers {
		// Spread the callers over the sequence: they do not walk in step.
		c.callers[i] = caller{start: i * (seqLen / n), samples: make([]int64, ringLen)}
	}
	return c
}

// Run makes ops checks of cost in all, shared evenly by the callers, and
// returns the number that failed with an error and the first error.
func (c *Callers) Run(ctx context.Context, lim Limiter, ops int, cost int64) (int64, error) {
	var (
		wg       sync.WaitGroup
		failed   atomic.Int64
		firstErr atomic.Pointer[error]
		mask     = c.sampleEvery - 1
	)
	for i := range c.callers {
		cl := &c.callers[i]
		n := ops / len(c.callers)
		if i < ops%len(c.callers) {
			n++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range n {
				key := c.w.Key(cl.start + j)
				var err error
				if j&mask == 0 {
					t := time.Now()
					_, err = lim.Allow(ctx, key, cost)
					cl.samples[cl.n%ringLen] = int64(time.Since(t))
					cl.n++
				} else {
					_, err = lim.Allow(ctx, key, cost)
				}
				if err != nil && failed.Add(1) == 1 {
					e := err
					firstErr.Store(&e)
				}
			}
			cl.start += n // a later Run goes on where this one stopped
		}()
	}
	wg.Wait()
	if p := firstErr.Load(); p != nil {
		return failed.Load(), *p
	}
	return 0, nil
}

// Latency returns the p50 and p99 of the sampled checks since Reset.
func (c *Callers) Latency() (p50, p99 time.Duration) {
	var all []int64
	for i := range c.callers {
		cl := &c.callers[i]
		all = append(all, cl.samples[:min(cl.n, ringLen)]...)
	}
	if len(all) == 0 {
		return 0, 0
	}
	slices.Sort(all)
	at := func(q float64) time.Duration { return time.Duration(all[int(q*float64(len(all)-1))]) }
	return at(0.50), at(0.99)
}

// LastKey returns the key that the first caller checked last.
func (c *Callers) LastKey() string {
	return c.w.Key(c.callers[0].start - 1)
}

// Reset forgets the samples taken so far.
func (c *Callers) Reset() {
	for i := range c.callers {
		c.callers[i].n = 0
	}
}
