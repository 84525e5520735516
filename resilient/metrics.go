package resilient

import (
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
	failureDecisions [lastMode + 1]prometheus.Counter // by Mode
	busyDecisions    prometheus.Counter
	guardDenials     prometheus.Counter
	state            [len(stateNames)]prometheus.Gauge
	breakersOpen     prometheus.Gauge
	denialHits       prometheus.Counter
	callDuration     prometheus.Observer
	queueWait        prometheus.Observer
	callErrors       [ReasonBusy]prometheus.Counter // by Reason, of calls sent
	schedLag         prometheus.Observer
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
		Help: "Calls to the rate limit store that were sent and failed, by reason (timeout, connection, oom, readonly, loading, unavailable, error). Each counts towards the circuit breaker.",
	}, []string{"reason"})
	busy := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "sluice_store_busy_decisions_total",
		Help: "Checks and adjustments decided by the local bucket because every call slot to the rate limit store stayed taken for the queue wait (or the client's connection pool was exhausted): load, not a store failure; they never open the breaker.",
	})
	open := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "sluice_store_breakers_open",
		Help: "Circuit breakers open or half open: one per part of the store (a Redis Cluster master), or one for the whole store.",
	})
	queueWait := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "sluice_store_queue_wait_seconds",
		Help:    "Time checks waited for a call slot when every slot was taken (those that found one free at once are not observed).",
		Buckets: []float64{.0005, .001, .002, .005, .01, .02, .05, .1, .25, .5, 1, 2.5},
	})
	guard := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "sluice_store_guard_denials_total",
		Help: "Checks the rate limit store allowed but the in-process guard denied: this instance alone had admitted the rule's worth, so the store had lost the bucket (an evicting Redis, a flush, a failover).",
	})
	lag := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "sluice_store_scheduling_lag_seconds",
		Help:    "How late this process ran, sampled every 20ms: the larger of how late the sampler's timer fired and the 99th percentile of the time goroutines waited to run. While it stays above half the store's deadline a call past its deadline is not given up (the process was too busy to tell whether the store answered), up to max_wait.",
		Buckets: []float64{.001, .002, .005, .01, .02, .03, .05, .075, .1, .15, .2, .3, .4, .5, .75, 1, 1.5, 2, 3, 5},
	})
	if reg != nil {
		lag = register(reg, lag)
		guard = register(reg, guard)
		decisions = register(reg, decisions)
		state = register(reg, state)
		hits = register(reg, hits)
		duration = register(reg, duration)
		callErrors = register(reg, callErrors)
		busy = register(reg, busy)
		open = register(reg, open)
		queueWait = register(reg, queueWait)
	}
	m := &metrics{guardDenials: guard, denialHits: hits, callDuration: duration, busyDecisions: busy, breakersOpen: open, queueWait: queueWait, schedLag: lag}
	for mode := range lastMode + 1 {
		m.failureDecisions[mode] = decisions.WithLabelValues(mode.String())
	}
	for i, name := range stateNames {
		m.state[i] = state.WithLabelValues(name)
	}
	for r := ReasonOther; r < ReasonBusy; r++ {
		m.callErrors[r] = callErrors.WithLabelValues(r.String())
	}
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

func (m *metrics) observeCall(ns int64, r Reason) {
	m.callDuration.Observe(float64(ns) / 1e9)
	if r != reasonNone && r < ReasonBusy {
		m.callErrors[r].Inc()
	}
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

// limitedLog writes at most one line per interval about decisions made
// without the store, with the number made since the previous line: an
// outage at 10,000 checks a second is one line every ten seconds, not
// 100,000.
type limitedLog struct {
	logger   *slog.Logger
	interval int64
	msg      string
	next     atomic.Int64 // the earliest time of the next line
	count    atomic.Int64 // decisions since the last line
}

func (l *limitedLog) note(now int64, decidedBy string, cause error, reason Reason) {
	l.count.Add(1)
	next := l.next.Load()
	if now < next || !l.next.CompareAndSwap(next, now+l.interval) {
		return
	}
	l.logger.Warn(l.msg,
		"decided_by", decidedBy,
		"reason", reason.String(),
		"decisions", l.count.Swap(0),
		"log_interval", time.Duration(l.interval),
		"error", cause)
}
