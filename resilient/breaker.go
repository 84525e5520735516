package resilient

import (
	"fmt"
	"sync/atomic"
)

// State is the circuit breaker's state.
type State int32

const (
	// StateClosed: the store is called.
	StateClosed State = iota
	// StateOpen: the store is not called; the failure policy decides.
	StateOpen
	// StateHalfOpen: one probe call is in flight; the others are decided
	// as when open.
	StateHalfOpen
)

var stateNames = [...]string{StateClosed: "closed", StateOpen: "open", StateHalfOpen: "half_open"}

// String returns "closed", "open" or "half_open".
func (s State) String() string {
	if s >= 0 && int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("State(%d)", int32(s))
}

// breaker counts consecutive failures and opens after threshold of them.
// It is lock-free: the closed path, the one every healthy check takes,
// is an atomic load on the way in and, after a success, a load on the way
// out. Times are the Store's monotonic nanoseconds.
type breaker struct {
	state     atomic.Int32
	failures  atomic.Int32 // consecutive, while closed
	probeAt   atomic.Int64 // when open: the time the next probe may go
	threshold int32
	interval  int64
	onChange  func(from, to State)
}

// State returns the state now.
func (b *breaker) State() State { return State(b.state.Load()) }

// allow reports whether a call may go to the store now, and whether it is
// the probe of an open breaker (exactly one caller wins each probe).
func (b *breaker) allow(now int64) (probe, ok bool) {
	switch State(b.state.Load()) {
	case StateClosed:
		return false, true
	case StateOpen:
		if now >= b.probeAt.Load() && b.state.CompareAndSwap(int32(StateOpen), int32(StateHalfOpen)) {
			b.onChange(StateOpen, StateHalfOpen)
			return true, true
		}
	}
	return false, false
}

// success records a call that the store answered. Only the probe closes an
// open breaker: a slow call sent before the breaker opened proves nothing
// about the store now.
func (b *breaker) success(probe bool) {
	if b.failures.Load() != 0 {
		b.failures.Store(0)
	}
	if probe {
		b.state.Store(int32(StateClosed))
		b.onChange(StateHalfOpen, StateClosed)
	}
}

// failure records a call that failed at now.
func (b *breaker) failure(probe bool, now int64) {
	if probe {
		b.probeAt.Store(now + b.interval)
		b.state.Store(int32(StateOpen))
		b.onChange(StateHalfOpen, StateOpen)
		return
	}
	if b.failures.Add(1) < b.threshold {
		return
	}
	b.probeAt.Store(now + b.interval)
	if b.state.CompareAndSwap(int32(StateClosed), int32(StateOpen)) {
		b.failures.Store(0)
		b.onChange(StateClosed, StateOpen)
	}
}

// abandon records a call that its caller gave up on: it says nothing about
// the store, so a probe is handed to the next caller.
func (b *breaker) abandon(probe bool, now int64) {
	if probe {
		b.probeAt.Store(now)
		b.state.Store(int32(StateOpen))
		b.onChange(StateHalfOpen, StateOpen)
	}
}
