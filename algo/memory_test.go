package algo

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testkit/fakeclock"
)

// In-memory state is bounded: the sweep drops every key whose state is
// idle, and MaxKeys caps the number held under a flood of distinct keys.
func TestMemoryIsBounded(t *testing.T) {
	rules := []sluice.Rule{{Rate: 10, Burst: 5}} // W = 500 ms
	for _, name := range Names()[1:] {
		c := fakeclock.New(time.UnixMicro(edge))
		s, _ := Memory(name, MemoryOptions{Now: c.Now, SweepInterval: -1, MaxKeys: 1000, Shards: 4})
		m := s.(interface {
			Len() int
			Sweep(int64) int
		})
		for i := range 5000 {
			s.Check(ctx, sluice.Request{Key: fmt.Sprint("spoofed-", i), Cost: 1, Rules: rules})
		}
		if n := m.Len(); n > 1000 {
			t.Fatalf("%s holds %d keys, cap 1000", name, n)
		}
		c.AdvanceMicros(2 * 500_000) // two windows: everything is idle
		if m.Sweep(c.Micros()); m.Len() != 0 {
			t.Fatalf("%s: %d keys left after the sweep of idle state", name, m.Len())
		}
		s.Close()
	}
}

// Concurrent checks on one key (run with -race): with the clock stopped,
// each algorithm admits exactly the burst, however the goroutines
// interleave.
func TestConcurrentChecks(t *testing.T) {
	r := sluice.Rule{Rate: 1, Burst: 50}
	for _, name := range Names() {
		c := fakeclock.New(time.UnixMicro(edge + 1))
		s, _ := Memory(name, MemoryOptions{Now: c.Now})
		var wg sync.WaitGroup
		var mu sync.Mutex
		admitted := 0
		for range 8 {
			wg.Go(func() {
				for range 40 {
					res, err := s.Check(ctx, sluice.Request{Key: "hot", Cost: 1, Rules: []sluice.Rule{r}})
					if err != nil {
						t.Error(err)
						return
					}
					if res.Allowed {
						mu.Lock()
						admitted++
						mu.Unlock()
					}
				}
			})
		}
		wg.Wait()
		s.Close()
		if admitted != int(r.Burst) {
			t.Fatalf("%s admitted %d of 320 concurrent checks, want exactly %d", name, admitted, r.Burst)
		}
	}
}

// The Result carries what the headers need, the same way for every
// algorithm: limit, remaining, retry after (denied), reset after.
func TestResultFields(t *testing.T) {
	r := sluice.Rule{Rate: 2, Burst: 4} // W = 2 s
	for _, name := range Names() {
		c := fakeclock.New(time.UnixMicro(edge))
		s, _ := Memory(name, MemoryOptions{Now: c.Now, SweepInterval: -1})
		req := sluice.Request{Key: "k", Cost: 1, Rules: []sluice.Rule{r}}
		first, _ := s.Check(ctx, req)
		if !first.Allowed || first.Limit != 4 || first.Remaining != 3 || first.ResetAfter <= 0 || first.ResetAfter > 4*time.Second {
			t.Fatalf("%s first check: %+v", name, first)
		}
		var last sluice.Result
		for range 4 {
			last, _ = s.Check(ctx, req)
		}
		if last.Allowed || last.Remaining != 0 || last.RetryAfter <= 0 || last.RetryAfter > 4*time.Second { // at most 2W
			t.Fatalf("%s fifth check: %+v", name, last)
		}
		c.AdvanceMicros(last.RetryAfter.Microseconds())
		if res, _ := s.Check(ctx, req); !res.Allowed {
			t.Fatalf("%s: denied after waiting RetryAfter %v: %+v", name, last.RetryAfter, res)
		}
		s.Close()
	}
}
