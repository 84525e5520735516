// Package monotonic is the clock of the in-process stores.
package monotonic

import "time"

// Micros returns a clock of Unix microseconds: the wall time when Micros
// is called, advanced by the monotonic clock. It reads one clock per call
// instead of time.Now's two (time.Since on a time that carries a monotonic
// reading does not read the wall clock), and it ignores wall-clock steps,
// so an NTP jump neither mints nor loses tokens.
func Micros() func() int64 {
	start := time.Now()
	startUs := start.UnixMicro()
	return func() int64 { return startUs + time.Since(start).Microseconds() }
}
