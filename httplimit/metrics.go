package httplimit

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice"
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
type Metrics struct {
	decisions *prometheus.CounterVec
	latency   [numOps]prometheus.Observer
	errors    [numOps]prometheus.Counter
}

type outcome int

const (
	outcomeAllowed outcome = iota
	outcomeDenied
	outcomeShadowDenied
	outcomeDelayed
	outcomeCancelled
	outcomeFailedOpen
	outcomeFailedClosed
	outcomeCacheDenied
	outcomeLocalAllowed
	outcomeLocalDenied
	numOutcomes
)

var outcomeNames = [numOutcomes]string{"allowed", "denied", "shadow_denied", "delayed", "cancelled", "failed_open", "failed_closed",
	"cache_denied", "local_allowed", "local_denied"}

// outcomeOf is the outcome a result is counted under: what decided it
// when that was not the store's bucket, else allowed, delayed or denied.
func outcomeOf(res sluice.Result) outcome {
	switch res.DecidedBy {
	case sluice.ByOpen:
		return outcomeFailedOpen
	case sluice.ByLocal:
		if res.Allowed {
			return outcomeLocalAllowed
		}
		return outcomeLocalDenied
	case sluice.ByDenialCache:
		if !res.Allowed {
			return outcomeCacheDenied
		}
	}
	switch {
	case !res.Allowed:
		return outcomeDenied
	case res.Delay > 0:
		return outcomeDelayed
	}
	return outcomeAllowed
}

type op int

const (
	opCheck op = iota
	opAdjust
	numOps
)

var opNames = [numOps]string{"check", "adjust"}

// NewMetrics creates the collectors and registers them with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_decisions_total",
			Help: "Rate limit decisions by policy and outcome.",
		}, []string{"policy", "outcome"}),
	}
	latency := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "sluice_http_store_duration_seconds",
		Help:    "Time the HTTP middleware waited for its store, by operation.",
		Buckets: []float64{.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25},
	}, []string{"op"})
	errs := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_http_store_errors_total",
		Help: "Store calls of the HTTP middleware that failed, by operation.",
	}, []string{"op"})
	for _, c := range []prometheus.Collector{m.decisions, latency, errs} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	for i := range numOps {
		m.latency[i] = latency.WithLabelValues(opNames[i])
		m.errors[i] = errs.WithLabelValues(opNames[i])
	}
	return m, nil
}

// policyCounters are one policy's decision counters, looked up once.
type policyCounters [numOutcomes]prometheus.Counter

func (m *Metrics) forPolicy(name string) *policyCounters {
	if m == nil {
		return nil
	}
	var pc policyCounters
	for i := range numOutcomes {
		pc[i] = m.decisions.WithLabelValues(name, outcomeNames[i])
	}
	return &pc
}

func (pc *policyCounters) inc(o outcome) {
	if pc != nil {
		pc[o].Inc()
	}
}

func (m *Metrics) observe(o op, d time.Duration, err error) {
	if m == nil {
		return
	}
	m.latency[o].Observe(d.Seconds())
	if err != nil {
		m.errors[o].Inc()
	}
}
