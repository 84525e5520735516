package sluice

import (
	"fmt"
	"strings"
)

// OnError is a failure policy: what decides a check when the rate limit
// store fails (or a circuit breaker in front of it is open). It is the one
// type of on_error for the whole module: the configuration parses it once
// (ParseOnError), the decision core (package decide) applies it, and a
// store that decides failures itself (package resilient) reads it from
// Request.OnError.
//
// The zero value is OnErrorLocal, the default of the YAML configuration
// too, so a Go program and a configuration file that say nothing mean the
// same.
type OnError uint8

const (
	// OnErrorLocal decides with an in-process bucket while the store
	// fails (a Fallback of the decision core, or resilient's local
	// bucket); where there is none, the request is served as with
	// OnErrorOpen. The default.
	OnErrorLocal OnError = iota
	// OnErrorOpen serves the request unlimited, and counts and logs it.
	OnErrorOpen
	// OnErrorClosed refuses it: HTTP 503, Envoy's OVER_LIMIT.
	OnErrorClosed
)

// String returns "local", "open" or "closed", as ParseOnError reads them.
func (o OnError) String() string {
	switch o {
	case OnErrorLocal:
		return "local"
	case OnErrorOpen:
		return "open"
	case OnErrorClosed:
		return "closed"
	}
	return fmt.Sprintf("OnError(%d)", uint8(o))
}

// ParseOnError reads a failure policy as a configuration writes it:
// "local", "open" or "closed" (any case, outer spaces ignored); the empty
// string is OnErrorLocal. Anything else is an error wrapping ErrInvalid.
func ParseOnError(s string) (OnError, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "local":
		return OnErrorLocal, nil
	case "open":
		return OnErrorOpen, nil
	case "closed":
		return OnErrorClosed, nil
	}
	return OnErrorLocal, fmt.Errorf("%w: on_error %q: want open, closed or local", ErrInvalid, s)
}
