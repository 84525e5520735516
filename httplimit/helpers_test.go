package httplimit

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testkit/fakeclock"
	"github.com/sluicehq/sluice/memstore"
)

// env is a limiter in front of a handler on a real loopback server.
type env struct {
	t     *testing.T
	srv   *httptest.Server
	lim   *Limiter
	clock *fakeclock.Clock
	store *memstore.Store
	reg   *prometheus.Registry
}

func rule(rate float64, burst int64) []sluice.Rule {
	return []sluice.Rule{{Rate: rate, Burst: burst}}
}

// newEnv serves ok (or next, when given) behind a limiter of opts, with a
// memstore on a fake clock unless opts has a store; outer wraps the limiter.
func newEnv(t *testing.T, opts Options, next http.Handler, outer ...func(http.Handler) http.Handler) *env {
	t.Helper()
	e := &env{t: t, clock: fakeclock.New(time.Unix(1_800_000_000, 0)), reg: prometheus.NewRegistry()}
	if opts.Store == nil {
		e.store = memstore.New(memstore.Options{Now: e.clock.Now, SweepInterval: -1})
		t.Cleanup(func() { e.store.Close() })
		opts.Store = e.store
	}
	m, err := NewMetrics(e.reg)
	if err != nil {
		t.Fatal(err)
	}
	opts.Metrics = m
	lim, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	e.lim = lim
	if next == nil {
		next = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	}
	h := lim.Handler(next)
	for _, o := range outer {
		h = o(h)
	}
	e.srv = httptest.NewServer(h)
	t.Cleanup(e.srv.Close)
	return e
}

type response struct {
	status int
	header http.Header
	body   string
}

// do sends a request; header holds extra request headers as key, value pairs.
func (e *env) do(method, path string, header ...string) response {
	e.t.Helper()
	return e.doCtx(context.Background(), method, path, header...)
}

func (e *env) doCtx(ctx context.Context, method, path string, header ...string) response {
	e.t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, e.srv.URL+path, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return response{}
		}
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return response{status: resp.StatusCode, header: resp.Header, body: string(body)}
}

// limit returns the RateLimit-Limit of r as a number (-1 when absent).
func (r response) limit() int64 {
	v := r.header.Get("RateLimit-Limit")
	if v == "" {
		return -1
	}
	n, _ := strconv.ParseInt(v, 10, 64)
	return n
}

// counter returns the value of sluice_decisions_total{policy, outcome}.
func (e *env) counter(policy, outcome string) float64 {
	e.t.Helper()
	return metricValue(e.t, e.reg, "sluice_decisions_total", map[string]string{"policy": policy, "outcome": outcome})
}

func metricValue(t *testing.T, g prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if want, ok := labels[lp.GetName()]; ok && want != lp.GetValue() {
					continue metrics
				}
			}
			if c := m.GetCounter(); c != nil {
				return c.GetValue()
			}
			if h := m.GetHistogram(); h != nil {
				return float64(h.GetSampleCount())
			}
		}
	}
	return 0
}

// failingStore is a fake sluice.Store that cannot answer, standing in for
// a Redis that is down.
type failingStore struct{}

var errStoreDown = errors.New("fake store: connection refused")

func (failingStore) Check(context.Context, sluice.Request) (sluice.Result, error) {
	return sluice.Result{}, errStoreDown
}

func (failingStore) Adjust(context.Context, sluice.Request, int64) (sluice.Result, error) {
	return sluice.Result{}, errStoreDown
}
