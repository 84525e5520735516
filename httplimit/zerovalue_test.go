package httplimit_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/memstore"
)

// A Policy without Cost charges 1, as the YAML configuration's default
// does: a router's middleware (as chi takes it) with burst 2 refuses the
// third request. Before, Go's zero meant "only inspect" and nothing was
// ever limited, without an error.
func TestPolicyCostZeroChargesOne(t *testing.T) {
	store := memstore.New(memstore.Options{SweepInterval: -1})
	defer store.Close()
	mw, err := httplimit.Middleware(httplimit.Options{
		Store:    store,
		Policies: []httplimit.Policy{{Name: "api", Pattern: "/", Anonymous: []sluice.Rule{{Rate: 1.0 / 3600, Burst: 2}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux() // the router, with the middleware in front as chi's Use puts it
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") })
	h := mw(mux)
	var codes []int
	for range 3 {
		w := httptest.NewRecorder()
		r := httptest.NewRequest("GET", "/x", nil)
		r.RemoteAddr = "192.0.2.7:1"
		h.ServeHTTP(w, r)
		codes = append(codes, w.Code)
	}
	if codes[0] != 200 || codes[1] != 200 || codes[2] != 429 {
		t.Fatalf("statuses %v, want 200 200 429", codes)
	}
}

// InspectOnly is the explicit way to take nothing, and says so with Cost.
func TestPolicyInspectOnly(t *testing.T) {
	st := &script{res: sluice.Result{Allowed: true, Limit: 2, Remaining: 2}}
	var cost []int64
	rec := storeFunc(func(req sluice.Request) { cost = append(cost, req.Cost) })
	lim, err := httplimit.New(httplimit.Options{Store: recording{st, rec},
		Policies: []httplimit.Policy{{Name: "look", Pattern: "/", InspectOnly: true, Anonymous: []sluice.Rule{{Rate: 1, Burst: 2}}}}})
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest("GET", "/x", nil)
	lim.Handler(http.NotFoundHandler()).ServeHTTP(httptest.NewRecorder(), r)
	if len(cost) != 1 || cost[0] != 0 {
		t.Fatalf("costs asked %v, want [0]", cost)
	}
	_, err = httplimit.New(httplimit.Options{Store: st,
		Policies: []httplimit.Policy{{Name: "both", Pattern: "/", InspectOnly: true, Cost: 3, Anonymous: []sluice.Rule{{Rate: 1, Burst: 5}}}}})
	if err == nil {
		t.Fatal("InspectOnly with Cost 3: no error")
	}
}

// OnError's zero value means what YAML's default (local) means: the
// Fallback decides while the store fails. Before, the zero value was
// FailOpen and the Fallback was never asked.
func TestOnErrorZeroIsLocal(t *testing.T) {
	if httplimit.OnError(0) != httplimit.FailLocal || sluice.OnError(0) != sluice.OnErrorLocal {
		t.Fatal("the zero OnError is not local")
	}
	asked := false
	lim, err := httplimit.New(httplimit.Options{
		Store:    &script{err: errDown},
		Policies: []httplimit.Policy{{Name: "p", Pattern: "/", Anonymous: []sluice.Rule{{Rate: 1, Burst: 1}}}},
		Fallback: func(context.Context, string, sluice.Request, error) (sluice.Result, bool) {
			asked = true
			return sluice.Result{Limit: 1, RetryAfter: 1e9}, true
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	w := httptest.NewRecorder()
	lim.Handler(http.NotFoundHandler()).ServeHTTP(w, httptest.NewRequest("GET", "/x", nil))
	if !asked || w.Code != http.StatusTooManyRequests {
		t.Fatalf("fallback asked %v, status %d: want the local bucket's 429", asked, w.Code)
	}
}

type storeFunc func(sluice.Request)

// recording is a store that tells f of each check before st answers it.
type recording struct {
	st *script
	f  storeFunc
}

func (r recording) Check(ctx context.Context, req sluice.Request) (sluice.Result, error) {
	r.f(req)
	return r.st.Check(ctx, req)
}

func (r recording) Adjust(ctx context.Context, req sluice.Request, delta int64) (sluice.Result, error) {
	return r.st.Adjust(ctx, req, delta)
}

// TestZeroLimiterByName: a zero Limiter has no policies; deciding by name
// answers httplimit.ErrUnknownPolicy rather than panic.
func TestZeroLimiterByName(t *testing.T) {
	var l httplimit.Limiter
	if _, err := l.Check(context.Background(), "p", "k", 1); !errors.Is(err, httplimit.ErrUnknownPolicy) {
		t.Errorf("Check: %v", err)
	}
	if v := l.Verdict(context.Background(), "p", httplimit.Attributes{Identity: "k"}, 1); !errors.Is(v.Err, httplimit.ErrUnknownPolicy) {
		t.Errorf("Verdict: %v", v.Err)
	}
	if l.FailsClosed("p") || len(l.Policies()) != 0 {
		t.Error("a zero Limiter has policies")
	}
	if err := l.ValidateRules("p", nil); !errors.Is(err, httplimit.ErrUnknownPolicy) {
		t.Errorf("ValidateRules: %v", err)
	}
}
