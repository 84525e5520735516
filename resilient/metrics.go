package resilient

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the Store's Prometheus collectors. They exist whether or not
// a Registerer was given, so the hot path never checks; label values are
// resolved once, so an observation is an atomic add.
type metrics struct {
	failureDecisions [len(modeNames)]prometheus.Counter
	state            [len(stateNames)]prometheus.Gauge
	denialHits       prometheus.Counter
	callDuration     prometheus.Observer
	callErrors       [2]prometheus.Counter // timeout, error
}

func newMetrics(reg prometheus.Registerer) *metrics {
	decisions := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_store_failure_decisions_total",
		Help: "Checks decided by the failure policy because the rate limit store failed or the circuit breaker was open, by policy (on_error).",
	}, []string{"on_error"})
	state := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "sluice_store_breaker_state",
		Help: "State of the circuit breaker in front of the rate limit store: 1 for the current state (closed, open, half_open), 0 for the others.",
	}, []string{"state"})
	hits := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "sluice_store_denial_cache_hits_total",
		Help: "Checks answered by the denial cache (a key denied until its retry time) without calling the rate limit store.",
	})
	duration := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "sluice_store_call_duration_seconds",
		Help:    "Latency of calls to the rate limit store, failed ones included.",
		Buckets: []float64{.0002, .0005, .001, .002, .005, .01, .02, .05, .1, .25, .5},
	})
	callErrors := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_store_errors_total",
		Help: "Calls to the rate limit store that failed, by reason (timeout: the deadline passed; error: any other failure).",
	}, []string{"reason"})
	if reg != nil {
		decisions = register(reg, decisions)
		state = register(reg, state)
		hits = register(reg, hits)
		duration = register(reg, duration)
		callErrors = register(reg, callErrors)
	}
	m := &metrics{denialHits: hits, callDuration: duration}
	for i, name := range modeNames {
		m.failureDecisions[i] = decisions.WithLabelValues(name)
	}
	for i, name := range stateNames {
		m.state[i] = state.WithLabelValues(name)
	}
	m.callErrors[0] = callErrors.WithLabelValues("timeout")
	m.callErrors[1] = callErrors.WithLabelValues("error")
	return m
}

// register registers c on reg, or returns the collector registered before
// under the same name: a second Store (a reload) shares the series.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
		panic("resilient: register metrics: " + err.Error())
	}
	return c
}

func (m *metrics) observeCall(ns int64, err error) {
	m.callDuration.Observe(float64(ns) / 1e9)
	switch {
	case err == nil:
	case errors.Is(err, context.DeadlineExceeded) || isTimeout(err):
		m.callErrors[0].Inc()
	default:
		m.callErrors[1].Inc()
	}
}

func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}

func (m *metrics) setState(s State) {
	for i, g := range m.state {
		if State(i) == s {
			g.Set(1)
		} else {
			g.Set(0)
		}
	}
}

// limitedLog writes at most one line per interval about failure-policy
// decisions, with the number made since the previous line: an outage at
// 10,000 checks a second is one line every ten seconds, not 100,000.
type limitedLog struct {
	logger   *slog.Logger
	interval int64
	next     atomic.Int64 // the earliest time of the next line
	count    atomic.Int64 // decisions since the last line
}

func (l *limitedLog) failure(now int64, mode Mode, cause error) {
	l.count.Add(1)
	next := l.next.Load()
	if now < next || !l.next.CompareAndSwap(next, now+l.interval) {
		return
	}
	l.logger.Warn("resilient: rate limit store unavailable, the failure policy decides",
		"on_error", mode.String(),
		"decisions", l.count.Swap(0),
		"log_interval", time.Duration(l.interval),
		"error", cause)
}
