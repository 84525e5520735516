package httplimit

import (
	"io"
	"log/slog"
	"testing"

	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/resilient"
)

// Every decision not made by the store's bucket is counted under what made
// it: a remembered denial, the local bucket, or the Open policy.
func TestDecisionsCountedByWhatDecided(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	policy := []Policy{{Name: "api", Pattern: "/", Cost: 1, Anonymous: rule(1, 2)}}
	expect := func(e *env, want map[string]float64) {
		t.Helper()
		for outcome, n := range want {
			if got := e.counter("api", outcome); got != n {
				t.Errorf("%s: %v, want %v", outcome, got, n)
			}
		}
	}

	t.Run("store and denial cache", func(t *testing.T) {
		ms := memstore.New(memstore.Options{})
		t.Cleanup(func() { ms.Close() })
		rs := resilient.New(ms, resilient.Options{Logger: quiet})
		t.Cleanup(func() { rs.Close() })
		e := newEnv(t, Options{Store: rs, Policies: policy}, nil)
		for range 4 {
			e.do("GET", "/")
		}
		// Two pass, the store denies the third, its denial answers the fourth.
		expect(e, map[string]float64{"allowed": 2, "denied": 1, "cache_denied": 1, "local_allowed": 0, "failed_open": 0})
	})
	t.Run("local bucket", func(t *testing.T) {
		rs := resilient.New(failingStore{}, resilient.Options{Logger: quiet})
		t.Cleanup(func() { rs.Close() })
		e := newEnv(t, Options{Store: rs, Policies: policy}, nil)
		for range 3 {
			e.do("GET", "/")
		}
		expect(e, map[string]float64{"local_allowed": 2, "local_denied": 1, "allowed": 0, "denied": 0})
	})
	t.Run("open", func(t *testing.T) {
		rs := resilient.New(failingStore{}, resilient.Options{OnError: resilient.Open, Logger: quiet})
		t.Cleanup(func() { rs.Close() })
		e := newEnv(t, Options{Store: rs, Policies: policy}, nil)
		for range 3 {
			e.do("GET", "/")
		}
		expect(e, map[string]float64{"failed_open": 3, "allowed": 0})
	})
	t.Run("fallback", func(t *testing.T) {
		local := memstore.New(memstore.Options{})
		t.Cleanup(func() { local.Close() })
		p := policy[0]
		p.Local = true
		e := newEnv(t, Options{Store: failingStore{}, Fallback: LocalFallback(local, 1), Policies: []Policy{p}, Logger: quiet}, nil)
		for range 3 {
			e.do("GET", "/")
		}
		expect(e, map[string]float64{"local_allowed": 2, "local_denied": 1, "allowed": 0, "denied": 0})
	})
}
