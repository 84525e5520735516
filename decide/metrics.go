package decide

import (
	"time"
)

// Metrics are the Prometheus collectors of one or more Limiters (a gateway
// that reloads its configuration keeps one Metrics across Limiters):
//
//	sluice_decisions_total{policy, outcome}  outcome: allowed, denied,
//	    shadow_denied, delayed, cancelled (left while held), and for the
//	    decisions not made by the store's bucket (Result.DecidedBy), what
//	    made them: cache_denied (a denial the store made, remembered),
//	    local_allowed and local_denied (the in-process bucket, while the
//	    store failed or was busy), failed_open, failed_closed
//	sluice_http_store_duration_seconds{op}   op: check, adjust
//	sluice_http_store_errors_total{op}
//
// The store metrics are the time the middleware waited for its store and
// the errors it got back, whatever the store is (a resilient store in front
// of Redis reports its own calls to Redis beside them).
//
// Package decide holds what is counted; the Prometheus collectors are made
// and registered by httplimit.NewMetrics, so that this package links no
// Prometheus client (and through it no net/http).
type Metrics struct {
	decision func(policy, outcome string) Counter
	latency  [numOps]Observer
	errors   [numOps]Counter
}

// Counter is a counter of Metrics (a prometheus.Counter is one).
type Counter interface{ Inc() }

// Observer is a distribution of Metrics (a prometheus.Observer is one).
type Observer interface{ Observe(float64) }

// Collectors are what Metrics count into: the decision counter of a
// policy and outcome, and the store's latency and errors of an operation
// ("check", "adjust").
type Collectors struct {
	Decision     func(policy, outcome string) Counter
	StoreLatency func(op string) Observer
	StoreErrors  func(op string) Counter
}

// NewMetrics returns Metrics that count into c.
func NewMetrics(c Collectors) *Metrics {
	m := &Metrics{decision: c.Decision}
	for i := range numOps {
		m.latency[i] = c.StoreLatency(opNames[i])
		m.errors[i] = c.StoreErrors(opNames[i])
	}
	return m
}

// Op is a store operation, as the store metrics label it.
type Op int

const (
	OpCheck  Op = iota // Store.Check
	OpAdjust           // Store.Adjust
	numOps
)

var opNames = [numOps]string{"check", "adjust"}

// Counters are one policy's decision counters, looked up once.
type Counters [numCounted]Counter

// ForPolicy returns the decision counters of the named policy; nil (which
// counts nothing) when m is nil.
func (m *Metrics) ForPolicy(name string) *Counters {
	if m == nil {
		return nil
	}
	var pc Counters
	for i := range numCounted {
		pc[i] = m.decision(name, outcomeNames[i])
	}
	return &pc
}

// Inc counts o, unless pc is nil or o is not counted (Allowlisted, None).
func (pc *Counters) Inc(o Outcome) {
	if pc != nil && o.Counted() {
		pc[o].Inc()
	}
}

// Observe records a store call of d that failed with err (or not).
func (m *Metrics) Observe(o Op, d time.Duration, err error) {
	if m == nil {
		return
	}
	m.latency[o].Observe(d.Seconds())
	if err != nil {
		m.errors[o].Inc()
	}
}
