package resilient

import (
	"fmt"
	"time"
)

// SchedLag is s's estimate of how long its goroutines wait to run: while
// it is above half the deadline a call past its deadline is waited for
// longer (see Store.call). Tests add the time it stayed there to their
// latency bounds.
func SchedLag(s *Store) time.Duration { return s.lag.get() }

// OpenScopes names the scopes whose breakers are not closed, with their
// states, for a test's failure message.
func OpenScopes(s *Store) []string {
	var open []string
	s.scoped.Range(func(name, b any) bool {
		if st := b.(*breaker).State(); st != StateClosed {
			open = append(open, fmt.Sprintf("%q %v", name, st))
		}
		return true
	})
	return open
}
