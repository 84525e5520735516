// Package fakeclock is the one fake clock of sluice's tests: a time in
// Unix microseconds (the stores' resolution) that moves only when the
// test moves it. Pass its Now to the injectable clocks of memstore,
// redisstore (client-clock mode), algo and httplimit.
package fakeclock

import (
	"sync/atomic"
	"time"
)

// Clock is a fake clock, safe for concurrent use. The zero Clock reads
// the Unix epoch.
type Clock struct{ us atomic.Int64 }

// New returns a clock that reads t (truncated to the microsecond) until
// it is moved.
func New(t time.Time) *Clock {
	c := &Clock{}
	c.Set(t)
	return c
}

// Now is the clock's time.
func (c *Clock) Now() time.Time { return time.UnixMicro(c.us.Load()) }

// Micros is the clock's time in Unix microseconds.
func (c *Clock) Micros() int64 { return c.us.Load() }

// Advance moves the clock by d (backwards when d < 0), truncated to the
// microsecond.
func (c *Clock) Advance(d time.Duration) { c.us.Add(d.Microseconds()) }

// AdvanceMicros moves the clock by us microseconds.
func (c *Clock) AdvanceMicros(us int64) { c.us.Add(us) }

// Set sets the clock to t, truncated to the microsecond.
func (c *Clock) Set(t time.Time) { c.us.Store(t.UnixMicro()) }

// SetMicros sets the clock to us Unix microseconds.
func (c *Clock) SetMicros(us int64) { c.us.Store(us) }
