package resilient

import "time"

// SchedLag is s's estimate of how long its goroutines wait to run: while
// it is above half the deadline a call past its deadline is waited for
// longer (see Store.call). Tests add the time it stayed there to their
// latency bounds.
func SchedLag(s *Store) time.Duration { return s.lag.get() }
