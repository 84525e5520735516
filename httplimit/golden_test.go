package httplimit_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
)

// The golden tests hold what the decision core answers, byte for byte, so
// that moving it changes nothing a deployment sees: the store keys (a
// bucket written before an upgrade is the bucket read after it), the
// header values of each header mode, and the outcome of each kind of
// decision. `go test ./httplimit/ -run Golden -update` rewrites the files
// in testdata/golden; a diff there is a change of behaviour.

var update = flag.Bool("update", false, "rewrite the golden files in testdata/golden")

// golden compares got with testdata/golden/name, or rewrites it.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", "golden", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("%s differs from the golden file (run with -update to accept a change on purpose):\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

// script is a store that records each key it is asked about and answers
// with res, or with err.
type script struct {
	mu   sync.Mutex
	keys []string
	res  sluice.Result
	err  error
}

func (s *script) Check(_ context.Context, req sluice.Request) (sluice.Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keys = append(s.keys, req.Key)
	if s.err != nil {
		return sluice.Result{}, s.err
	}
	return s.res, nil
}

func (s *script) Adjust(context.Context, sluice.Request, int64) (sluice.Result, error) {
	return s.res, s.err
}

func (s *script) last() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.keys) == 0 {
		return "(no store call)"
	}
	return fmt.Sprintf("%x", s.keys[len(s.keys)-1])
}

func grules(burst int64) []sluice.Rule { return []sluice.Rule{{Rate: 1, Burst: burst}} }

// keyPolicies cover every way a key is built.
func keyPolicies() []httplimit.Policy {
	return []httplimit.Policy{
		{Name: "ident", Pattern: "GET /ident/", Cost: 1, Anonymous: grules(5), Authenticated: grules(10),
			Overrides: []httplimit.Override{{Identity: "vip", Rules: grules(50)}},
			Plans:     map[string][]sluice.Rule{"gold": grules(40)}, DefaultPlan: ""},
		{Name: "one", Pattern: "GET /one/", Cost: 1, Anonymous: grules(5)},
		{Name: "attrs", Pattern: "GET /t/{tenant}/", Cost: 1, Anonymous: grules(5), Authenticated: grules(10),
			Overrides: []httplimit.Override{{Identity: "vip", Rules: grules(50)}},
			Plans:     map[string][]sluice.Rule{"gold": grules(40)},
			Key:       httplimit.Key{Parts: []httplimit.KeyPart{{Header: "x-tenant"}, {Path: "tenant"}, {Claim: "org"}, {ClientIP: true}}}},
		{Name: "shared", Pattern: "GET /s/", Cost: 1, Anonymous: grules(5),
			Key: httplimit.Key{Parts: []httplimit.KeyPart{{Header: "X-Tenant"}}}},
		{Name: "global", Pattern: "GET /g/", Cost: 1, Anonymous: grules(5), Key: httplimit.Key{Global: true}},
	}
}

func TestGoldenKeys(t *testing.T) {
	st := &script{res: sluice.Result{Allowed: true, Limit: 5, Remaining: 4}}
	lim, err := httplimit.New(httplimit.Options{Store: st, Policies: keyPolicies(), Headers: httplimit.HeadersNone})
	if err != nil {
		t.Fatal(err)
	}
	h := lim.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	var out strings.Builder
	type hreq struct {
		name, path, remote string
		caller             *httplimit.Caller
		header             []string
	}
	for _, c := range []hreq{
		{name: "anonymous v4", path: "/ident/x", remote: "192.0.2.7:1234"},
		{name: "anonymous v6 grouped by /64", path: "/ident/x", remote: "[2001:db8:1:2:3:4:5:6]:1234"},
		{name: "anonymous v4-mapped v6", path: "/ident/x", remote: "[::ffff:192.0.2.7]:1234"},
		{name: "authenticated", path: "/ident/x", remote: "192.0.2.7:1", caller: &httplimit.Caller{ID: "user-1"}},
		{name: "override", path: "/ident/x", remote: "192.0.2.7:1", caller: &httplimit.Caller{ID: "vip"}},
		{name: "plan", path: "/ident/x", remote: "192.0.2.7:1", caller: &httplimit.Caller{ID: "user-1", Plan: "gold"}},
		{name: "unknown plan", path: "/ident/x", remote: "192.0.2.7:1", caller: &httplimit.Caller{ID: "user-1", Plan: "tin"}},
		{name: "one list, authenticated", path: "/one/x", remote: "192.0.2.7:1", caller: &httplimit.Caller{ID: "user-1"}},
		{name: "one list, anonymous", path: "/one/x", remote: "192.0.2.7:1"},
		{name: "attrs anonymous all parts", path: "/t/acme/x", remote: "192.0.2.7:1", header: []string{"X-Tenant", "t1"}},
		{name: "attrs anonymous header twice", path: "/t/acme/x", remote: "192.0.2.7:1", header: []string{"X-Tenant", "t1", "X-Tenant", "t2"}},
		{name: "attrs anonymous header absent", path: "/t/acme/x", remote: "192.0.2.7:1"},
		{name: "attrs anonymous long header", path: "/t/acme/x", remote: "192.0.2.7:1", header: []string{"X-Tenant", strings.Repeat("v", 2000)}},
		{name: "attrs escaped path", path: "/t/a%2Fb/x", remote: "192.0.2.7:1", header: []string{"X-Tenant", "t1"}},
		{name: "attrs authenticated claim", path: "/t/acme/x", remote: "192.0.2.7:1", header: []string{"X-Tenant", "t1"},
			caller: &httplimit.Caller{ID: "user-1", Claims: map[string]any{"org": "o1"}}},
		{name: "attrs authenticated number claim", path: "/t/acme/x", remote: "192.0.2.7:1",
			caller: &httplimit.Caller{ID: "user-1", Claims: map[string]any{"org": 42.5}}},
		{name: "attrs override", path: "/t/acme/x", remote: "192.0.2.7:1", caller: &httplimit.Caller{ID: "vip"}},
		{name: "attrs plan", path: "/t/acme/x", remote: "192.0.2.7:1", caller: &httplimit.Caller{ID: "user-1", Plan: "gold"}},
		{name: "shared anonymous", path: "/s/x", remote: "192.0.2.7:1", header: []string{"X-Tenant", "t1"}},
		{name: "shared authenticated", path: "/s/x", remote: "192.0.2.7:1", header: []string{"X-Tenant", "t1"}, caller: &httplimit.Caller{ID: "user-1"}},
		{name: "global", path: "/g/x", remote: "192.0.2.7:1"},
		{name: "global authenticated", path: "/g/x", remote: "192.0.2.7:1", caller: &httplimit.Caller{ID: "user-1"}},
	} {
		r := httptest.NewRequest("GET", "http://example.com"+c.path, nil)
		r.RemoteAddr = c.remote
		for i := 0; i+1 < len(c.header); i += 2 {
			r.Header.Add(c.header[i], c.header[i+1])
		}
		if c.caller != nil {
			r = r.WithContext(httplimit.WithCaller(r.Context(), *c.caller))
		}
		h.ServeHTTP(httptest.NewRecorder(), r)
		fmt.Fprintf(&out, "http   %-36s %s\n", c.name, st.last())
	}
	type byName struct {
		name, policy string
		a            httplimit.Attributes
	}
	for _, c := range []byName{
		{name: "identity", policy: "ident", a: httplimit.Attributes{Identity: "user-1"}},
		{name: "override", policy: "ident", a: httplimit.Attributes{Identity: "vip"}},
		{name: "client ip", policy: "ident", a: httplimit.Attributes{ClientIP: netip.MustParseAddr("192.0.2.7")}},
		{name: "client ip v6", policy: "ident", a: httplimit.Attributes{ClientIP: netip.MustParseAddr("2001:db8:1:2:3:4:5:6")}},
		{name: "attrs values", policy: "attrs", a: httplimit.Attributes{Identity: "user-1", ClientIP: netip.MustParseAddr("192.0.2.7"),
			Values: map[string]string{"header:X-Tenant": "t1", "path:tenant": "acme", "claim:org": "o1"}}},
		{name: "attrs absent", policy: "attrs", a: httplimit.Attributes{ClientIP: netip.MustParseAddr("192.0.2.7")}},
		{name: "global", policy: "global", a: httplimit.Attributes{Identity: "user-1"}},
	} {
		if _, err := lim.Decide(context.Background(), c.policy, c.a, 1); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		fmt.Fprintf(&out, "byname %-36s %s\n", c.name, st.last())
	}
	if _, err := lim.Check(context.Background(), "ident", "user-1", 1); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(&out, "check  %-36s %s\n", "identity", st.last())
	golden(t, "keys.golden", out.String())
}

// settle runs f until one run took less than bound of wall time, so that
// the header values, which count seconds from the decision, are those of
// a response written within bound of it (a stalled machine retries).
func settle(t *testing.T, bound time.Duration, f func() string) string {
	t.Helper()
	for range 20 {
		start := time.Now()
		s := f()
		if time.Since(start) < bound {
			return s
		}
	}
	t.Fatalf("no run finished within %v", bound)
	return ""
}

var goldenHeaders = []string{"Ratelimit-Limit", "Ratelimit-Remaining", "Ratelimit-Reset", "Ratelimit-Policy", "Ratelimit",
	"X-Ratelimit-Limit", "X-Ratelimit-Remaining", "Retry-After", "Cache-Control", "Content-Type"}

func TestGoldenHeaders(t *testing.T) {
	allowed := sluice.Result{Allowed: true, Limit: 10, Remaining: 7, ResetAfter: 30*time.Second + 500*time.Millisecond}
	denied := sluice.Result{Allowed: false, Limit: 10, Remaining: 0, RetryAfter: 4*time.Second + 500*time.Millisecond, ResetAfter: 100*time.Second + 500*time.Millisecond}
	modes := []struct {
		name string
		mode httplimit.HeaderMode
		x    bool
	}{{"both", httplimit.HeadersBoth, false}, {"legacy", httplimit.HeadersLegacy, false}, {"draft", httplimit.HeadersDraft, false},
		{"none", httplimit.HeadersNone, false}, {"both+x", httplimit.HeadersBoth, true}, {"none+x", httplimit.HeadersNone, true}}
	var out strings.Builder
	for _, m := range modes {
		for _, c := range []struct {
			name string
			res  sluice.Result
			pol  httplimit.Policy
		}{
			{"allowed", allowed, httplimit.Policy{Name: "api", Pattern: "/", Cost: 1, Anonymous: []sluice.Rule{{Rate: 10.0 / 60, Burst: 10}}}},
			{"denied", denied, httplimit.Policy{Name: "api", Pattern: "/", Cost: 1, Anonymous: []sluice.Rule{{Rate: 10.0 / 60, Burst: 10}}}},
			{"two rules", allowed, httplimit.Policy{Name: "two", Pattern: "/", Cost: 2, Anonymous: []sluice.Rule{{Rate: 10.0 / 60, Burst: 10}, {Rate: 1000.0 / 86400, Burst: 1000}}}},
			{"cost header", allowed, httplimit.Policy{Name: "tok", Pattern: "/", Cost: 1, CostHeader: "X-Cost", Anonymous: []sluice.Rule{{Rate: 100, Burst: 1000}}}},
			{"shadow denied", denied, httplimit.Policy{Name: "sh", Pattern: "/", Cost: 1, Shadow: true, Anonymous: []sluice.Rule{{Rate: 1, Burst: 10}}}},
		} {
			st := &script{res: c.res}
			lim, err := httplimit.New(httplimit.Options{Store: st, Policies: []httplimit.Policy{c.pol}, Headers: m.mode, XRateLimit: m.x})
			if err != nil {
				t.Fatal(err)
			}
			h := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(200) }))
			got := settle(t, 400*time.Millisecond, func() string {
				w := httptest.NewRecorder()
				r := httptest.NewRequest("GET", "/x", nil)
				r.RemoteAddr = "192.0.2.7:1"
				h.ServeHTTP(w, r)
				var b strings.Builder
				fmt.Fprintf(&b, "%-7s %-14s %d\n", m.name, c.name, w.Code)
				for _, k := range goldenHeaders {
					if v, ok := w.Result().Header[k]; ok {
						fmt.Fprintf(&b, "    %s: %q\n", k, v)
					}
				}
				return b.String()
			})
			out.WriteString(got)
		}
	}
	// The Fields of a by-name decision, as Envoy sends them.
	for _, c := range []struct {
		name string
		res  sluice.Result
	}{{"fields allowed", allowed}, {"fields denied", denied}} {
		st := &script{res: c.res}
		lim, err := httplimit.New(httplimit.Options{Store: st, Policies: []httplimit.Policy{{Name: "api", Cost: 1, Authenticated: []sluice.Rule{{Rate: 10.0 / 60, Burst: 10}}}}})
		if err != nil {
			t.Fatal(err)
		}
		h := lim.Fields("api", "user-1", c.res, time.Millisecond)
		fmt.Fprintf(&out, "%s\n", c.name)
		for _, k := range goldenHeaders {
			if v, ok := h[k]; ok {
				fmt.Fprintf(&out, "    %s: %q\n", k, v)
			}
		}
	}
	golden(t, "headers.golden", out.String())
}

var errDown = errors.New("store down")

// TestGoldenOutcomes: what each kind of decision answers through the
// middleware (status, error code, the access log's outcome) and by name
// (Decide: allowed, outcome, error).
func TestGoldenOutcomes(t *testing.T) {
	base := httplimit.Policy{Pattern: "/", Cost: 1, Anonymous: grules(5), Authenticated: grules(5)}
	pol := func(name string, f func(*httplimit.Policy)) httplimit.Policy {
		p := base
		p.Name = name
		if f != nil {
			f(&p)
		}
		return p
	}
	allowed := sluice.Result{Allowed: true, Limit: 5, Remaining: 4, ResetAfter: time.Second}
	denied := sluice.Result{Limit: 5, RetryAfter: time.Second, ResetAfter: 5 * time.Second}
	localRes := sluice.Result{Allowed: true, Limit: 5, Remaining: 2, ResetAfter: time.Second}
	cases := []struct {
		name string
		p    httplimit.Policy
		res  sluice.Result
		err  error
		fb   bool // the Fallback decides
	}{
		{"allowed", pol("p", nil), allowed, nil, false},
		{"denied", pol("p", nil), denied, nil, false},
		{"shadow denied", pol("p", func(p *httplimit.Policy) { p.Shadow = true }), denied, nil, false},
		{"delayed", pol("p", func(p *httplimit.Policy) { p.MaxDelay = time.Second }), sluice.Result{Allowed: true, Limit: 5, Delay: time.Nanosecond}, nil, false},
		{"cache denied", pol("p", nil), sluice.Result{Limit: 5, RetryAfter: time.Second, DecidedBy: sluice.ByDenialCache}, nil, false},
		{"store failed, open", pol("p", func(p *httplimit.Policy) { p.OnError = httplimit.FailOpen }), sluice.Result{}, errDown, false},
		{"store failed, closed", pol("p", func(p *httplimit.Policy) { p.OnError = httplimit.FailClosed }), sluice.Result{}, errDown, false},
		{"store failed, local", pol("p", func(p *httplimit.Policy) { p.Local = true }), sluice.Result{}, errDown, true},
		{"store failed, local refused", pol("p", func(p *httplimit.Policy) { p.Local = true; p.OnError = httplimit.FailClosed }), sluice.Result{}, errDown, false},
		{"store says open", pol("p", nil), sluice.Result{Allowed: true, DecidedBy: sluice.ByOpen}, nil, false},
		{"invalid input", pol("p", nil), sluice.Result{}, fmt.Errorf("%w: bad", sluice.ErrInvalid), false},
		{"cost exceeds burst", pol("p", nil), sluice.Result{}, fmt.Errorf("%w: 9 > 5", sluice.ErrCostExceedsBurst), false},
	}
	var out strings.Builder
	for _, c := range cases {
		st := &script{res: c.res, err: c.err}
		opts := httplimit.Options{Store: st, Policies: []httplimit.Policy{c.p}, Headers: httplimit.HeadersLegacy}
		opts.Fallback = func(context.Context, string, sluice.Request, error) (sluice.Result, bool) {
			return localRes, c.fb
		}
		lim, err := httplimit.New(opts)
		if err != nil {
			t.Fatal(err)
		}
		h := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(200) }))
		w := httptest.NewRecorder()
		r := httptest.NewRequest("GET", "/x", nil)
		r.RemoteAddr = "192.0.2.7:1"
		var d httplimit.Decision
		r = r.WithContext(httplimit.WithDecision(r.Context(), &d))
		h.ServeHTTP(w, r)
		code := ""
		if i := strings.Index(w.Body.String(), `"error":"`); i >= 0 {
			code = w.Body.String()[i+9:]
			code = code[:strings.IndexByte(code, '"')]
		}
		fmt.Fprintf(&out, "http   %-28s status=%d error=%q outcome=%q decided_by=%q remaining=%q\n", c.name, w.Code, code, d.Outcome, d.DecidedBy,
			w.Result().Header.Get("RateLimit-Remaining"))
		v, err := lim.Decide(context.Background(), "p", httplimit.Attributes{Identity: "user-1"}, 1)
		fmt.Fprintf(&out, "byname %-28s allowed=%v outcome=%q decided_by=%v remaining=%d err=%s fails_closed=%v\n", c.name, v.Allowed, v.Outcome, v.DecidedBy,
			v.Remaining, errClass(err), lim.FailsClosed("p"))
	}
	// A name the limiter does not have; a request no policy matches.
	lim, err := httplimit.New(httplimit.Options{Store: &script{res: allowed}, Policies: []httplimit.Policy{pol("p", func(p *httplimit.Policy) { p.Pattern = "/p/" })}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = lim.Decide(context.Background(), "nope", httplimit.Attributes{Identity: "user-1"}, 1)
	fmt.Fprintf(&out, "byname %-28s err=%s\n", "unknown policy", errClass(err))
	_, err = lim.Check(context.Background(), "p", "", 1)
	fmt.Fprintf(&out, "check  %-28s err=%s\n", "empty key", errClass(err))
	_, err = lim.Decide(context.Background(), "p", httplimit.Attributes{}, 1)
	fmt.Fprintf(&out, "byname %-28s err=%s\n", "no key", errClass(err))
	_, err = lim.Decide(context.Background(), "p", httplimit.Attributes{Identity: "u", Values: map[string]string{"header:X": "1"}}, 1)
	fmt.Fprintf(&out, "byname %-28s err=%s\n", "attribute not in key", errClass(err))
	w := httptest.NewRecorder()
	var d httplimit.Decision
	r := httptest.NewRequest("GET", "/other", nil)
	lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(200) })).ServeHTTP(w, r.WithContext(httplimit.WithDecision(r.Context(), &d)))
	fmt.Fprintf(&out, "http   %-28s status=%d outcome=%q headers=%v\n", "unmatched", w.Code, d.Outcome, slices.Sorted(mapsKeys(w.Result().Header)))
	golden(t, "outcomes.golden", out.String())
}

func mapsKeys(h http.Header) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range h {
			if !yield(k) {
				return
			}
		}
	}
}

// errClass names an error by what it wraps, and its text.
func errClass(err error) string {
	switch {
	case err == nil:
		return "nil"
	case errors.Is(err, httplimit.ErrUnknownPolicy):
		return "ErrUnknownPolicy: " + err.Error()
	case errors.Is(err, sluice.ErrCostExceedsBurst):
		return "ErrCostExceedsBurst: " + err.Error()
	case errors.Is(err, sluice.ErrInvalid):
		return "ErrInvalid: " + err.Error()
	case errors.Is(err, errDown):
		return "store: " + err.Error()
	}
	return "other: " + err.Error()
}
