package httplimit

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/decide"
)

// Metrics are the Prometheus collectors of one or more Limiters (a gateway
// that reloads its configuration keeps one Metrics across Limiters); what
// they count is decide.Metrics':
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
type Metrics = decide.Metrics

// NewMetrics creates the collectors and registers them with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	decisions := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_decisions_total",
		Help: "Rate limit decisions by policy and outcome.",
	}, []string{"policy", "outcome"})
	latency := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "sluice_http_store_duration_seconds",
		Help:    "Time the HTTP middleware waited for its store, by operation.",
		Buckets: []float64{.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25},
	}, []string{"op"})
	errs := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_http_store_errors_total",
		Help: "Store calls of the HTTP middleware that failed, by operation.",
	}, []string{"op"})
	for _, c := range []prometheus.Collector{decisions, latency, errs} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return decide.NewMetrics(decide.Collectors{
		Decision:     func(policy, outcome string) decide.Counter { return decisions.WithLabelValues(policy, outcome) },
		StoreLatency: func(op string) decide.Observer { return latency.WithLabelValues(op) },
		StoreErrors:  func(op string) decide.Counter { return errs.WithLabelValues(op) },
	}), nil
}
