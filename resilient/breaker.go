package resilient

import (
	"fmt"
	"sync"
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
	failures  atomic.Int32  // consecutive, while closed
	probeAt   atomic.Int64  // when open: the time the next probe may go
	reason    atomic.Uint32 // the Reason of the last failure
	answer    atomic.Int64  // when the store last answered a call
	touched   atomic.Bool   // a check asked for it since the last look of retireWhenIdle
	threshold int32
	interval  int64
	silence   int64  // timeouts open the breaker only after this long without an answer
	scope     string // the part of the store it guards; empty: all of it
	onChange  func(b *breaker, from, to State)
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
			b.onChange(b, StateOpen, StateHalfOpen)
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
		b.onChange(b, StateHalfOpen, StateClosed)
	}
}

// failure records a call that failed at now for reason.
func (b *breaker) failure(probe bool, now int64, reason Reason) {
	if Reason(b.reason.Load()) != reason {
		b.reason.Store(uint32(reason))
	}
	if probe {
		b.probeAt.Store(now + b.interval)
		b.state.Store(int32(StateOpen))
		b.onChange(b, StateHalfOpen, StateOpen)
		return
	}
	if b.failures.Add(1) < b.threshold {
		return
	}
	if reason == ReasonTimeout && now-b.answer.Load() < b.silence {
		// Timeouts prove less than errors: a store that answered within
		// the last few deadlines is slow (a busy machine can keep a
		// Redis from running for a deadline or two), not gone.
		return
	}
	b.probeAt.Store(now + b.interval)
	if b.state.CompareAndSwap(int32(StateClosed), int32(StateOpen)) {
		b.failures.Store(0)
		b.onChange(b, StateClosed, StateOpen)
	}
}

// answered records that the store answered a call at now.
func (b *breaker) answered(now int64) {
	if b.answer.Load() < now {
		b.answer.Store(now)
	}
}

// answeredSince reports whether the store answered a call after t.
func (b *breaker) answeredSince(t int64) bool { return b.answer.Load() > t }

// abandon records a call that its caller gave up on: it says nothing about
// the store, so a probe is handed to the next caller.
func (b *breaker) abandon(probe bool, now int64) {
	if probe {
		b.probeAt.Store(now)
		b.state.Store(int32(StateOpen))
		b.onChange(b, StateHalfOpen, StateOpen)
	}
}

// breakerStates counts the breakers that are not closed, so that the
// Store's state is the worst of them without a walk over every breaker.
type breakerStates struct {
	mu       sync.Mutex
	open     int
	halfOpen int
}

// change records one breaker's change and returns the worst state now.
func (c *breakerStates) change(from, to State) State {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, d := range [...]struct {
		s State
		n int
	}{{from, -1}, {to, 1}} {
		switch d.s {
		case StateOpen:
			c.open += d.n
		case StateHalfOpen:
			c.halfOpen += d.n
		}
	}
	return c.worstLocked()
}

func (c *breakerStates) worst() State {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.worstLocked()
}

func (c *breakerStates) worstLocked() State {
	switch {
	case c.open > 0:
		return StateOpen
	case c.halfOpen > 0:
		return StateHalfOpen
	}
	return StateClosed
}

// notClosed returns the number of breakers open or half open.
func (c *breakerStates) notClosed() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.open + c.halfOpen
}
