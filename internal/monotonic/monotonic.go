// Package monotonic is the clock of the in-process stores.
package monotonic

import "time"

// Clock reads Unix microseconds: the wall time when it was made, advanced
// by the monotonic clock. It reads one clock per call instead of
// time.Now's two (time.Since on a time that carries a monotonic reading
// does not read the wall clock), and it ignores wall-clock steps, so an
// NTP jump neither mints nor loses tokens. Micros is small enough to
// inline, so a store that holds a Clock reads it without a call through
// a func value. The zero Clock is not ready: make one with New.
type Clock struct {
	start   time.Time
	startUs int64
}

// New returns a Clock that starts at the wall time now.
func New() Clock {
	start := time.Now()
	return Clock{start: start, startUs: start.UnixMicro()}
}

// Micros returns the time in Unix microseconds.
func (c *Clock) Micros() int64 { return c.startUs + time.Since(c.start).Microseconds() }

// Micros returns a Clock's Micros as a func, for stores whose clock is a
// func value that tests replace.
func Micros() func() int64 {
	c := New()
	return c.Micros
}
