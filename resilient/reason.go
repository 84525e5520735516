package resilient

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
)

// Reason says what a store error tells about the store: the label of
// sluice_store_errors_total, and the reason in logs and in a Report.
type Reason uint8

const (
	reasonNone Reason = iota // no error
	// ReasonOther: any other error of a call that was sent. It counts
	// against the store.
	ReasonOther
	// ReasonTimeout: a call that was sent got no answer within the deadline.
	ReasonTimeout
	// ReasonConnection: the connection failed (refused, reset, closed).
	ReasonConnection
	// ReasonOOM: the store refused a write for want of memory (Redis OOM
	// under maxmemory with noeviction).
	ReasonOOM
	// ReasonReadOnly: the store refuses writes (a Redis replica: READONLY).
	ReasonReadOnly
	// ReasonLoading: the store is loading its data set (Redis LOADING).
	ReasonLoading
	// ReasonUnavailable: the store says it cannot serve (Redis
	// CLUSTERDOWN, MASTERDOWN, TRYAGAIN, BUSY).
	ReasonUnavailable
	// ReasonBusy: the call waited in front of the store (every call slot or
	// every pooled connection taken) and never reached it. Load, not a
	// failure: it never counts against the store, and the local bucket
	// decides.
	ReasonBusy
	// ReasonCircuitOpen: the store was not called, its breaker is open.
	ReasonCircuitOpen
	// ReasonForgotten: the store allowed more than this instance alone
	// admitted under the rule: it lost the bucket, and the guard denied.
	ReasonForgotten
)

var reasonNames = [...]string{
	reasonNone: "none", ReasonOther: "error", ReasonTimeout: "timeout", ReasonConnection: "connection",
	ReasonOOM: "oom", ReasonReadOnly: "readonly", ReasonLoading: "loading", ReasonUnavailable: "unavailable",
	ReasonBusy: "busy", ReasonCircuitOpen: "circuit_open", ReasonForgotten: "forgotten",
}

// String returns the reason's label: error, timeout, connection, oom,
// readonly, loading, unavailable, busy or circuit_open.
func (r Reason) String() string {
	if int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return "unknown"
}

// DefaultClassify reads the errors any store may return: a passed
// deadline or a network timeout is ReasonTimeout, a failed connection
// ReasonConnection, and an error reply of Redis (an error with a
// RedisError method, as go-redis returns them) is read by its prefix:
// OOM, READONLY, LOADING, and CLUSTERDOWN, MASTERDOWN, TRYAGAIN or BUSY.
// Everything else is ReasonOther. It knows nothing of client-side queues:
// a classifier for a go-redis client adds its pool timeout as ReasonBusy.
func DefaultClassify(err error) Reason {
	var reply interface{ RedisError() }
	if errors.As(err, &reply) {
		msg := err.Error()
		if re, ok := reply.(error); ok {
			msg = re.Error()
		}
		switch prefix, _, _ := strings.Cut(msg, " "); prefix {
		case "OOM":
			return ReasonOOM
		case "READONLY":
			return ReasonReadOnly
		case "LOADING":
			return ReasonLoading
		case "CLUSTERDOWN", "MASTERDOWN", "TRYAGAIN", "BUSY":
			return ReasonUnavailable
		}
		return ReasonOther
	}
	var timeout interface{ Timeout() bool }
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &timeout) && timeout.Timeout():
		return ReasonTimeout
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return ReasonConnection
	}
	var netErr *net.OpError
	if errors.As(err, &netErr) {
		return ReasonConnection
	}
	return ReasonOther
}
