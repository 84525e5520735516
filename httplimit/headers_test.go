package httplimit

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/http/httputil"
	"net/textproto"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/internal/testkit/fakeclock"
	"github.com/sluicehq/sluice/memstore"
)

// The tests of this file read the headers with a Structured Field Values
// parser that sluice did not write (github.com/dunglas/httpsfv), as a
// client of draft 10 would.

// quotaItem is one member of RateLimit-Policy.
type quotaItem struct {
	name     string
	q, w     int64
	burst    int64  // sluice-burst, or q when absent
	unit     string // sluice-unit, or "requests"
	hasBurst bool
}

// limitItem is one member of RateLimit.
type limitItem struct {
	name string
	r, t int64
}

// oneField returns the only field line of name in h, failing when there
// are several: an upstream's value joined with sluice's.
func oneField(t *testing.T, h http.Header, name string) (string, bool) {
	t.Helper()
	v := h.Values(name)
	switch len(v) {
	case 0:
		return "", false
	case 1:
		return v[0], true
	}
	t.Fatalf("%s sent %d times: %q", name, len(v), v)
	return "", false
}

func sfInt(t *testing.T, field string, p *httpsfv.Params, key string) (int64, bool) {
	t.Helper()
	v, ok := p.Get(key)
	if !ok {
		return 0, false
	}
	n, isInt := v.(int64)
	if !isInt {
		t.Fatalf("%s: parameter %s = %#v, want an Integer", field, key, v)
	}
	return n, true
}

// policyItems parses RateLimit-Policy as draft 10 defines it.
func policyItems(t *testing.T, h http.Header) []quotaItem {
	t.Helper()
	v, ok := oneField(t, h, "RateLimit-Policy")
	if !ok {
		return nil
	}
	list, err := httpsfv.UnmarshalList([]string{v})
	if err != nil || len(list) == 0 {
		t.Fatalf("RateLimit-Policy %q: not a non-empty structured-field List: %v", v, err)
	}
	var items []quotaItem
	for _, m := range list {
		it, ok := m.(httpsfv.Item)
		if !ok {
			t.Fatalf("RateLimit-Policy %q: a member is not an Item", v)
		}
		name, ok := it.Value.(string)
		if !ok {
			t.Fatalf("RateLimit-Policy %q: item value %#v, want a String", v, it.Value)
		}
		qi := quotaItem{name: name, unit: "requests"}
		var hasQ, hasW bool
		qi.q, hasQ = sfInt(t, v, it.Params, "q")
		qi.w, hasW = sfInt(t, v, it.Params, "w")
		if !hasQ || qi.q < 0 || !hasW || qi.w < 1 {
			t.Fatalf("RateLimit-Policy %q: item %q wants q ≥ 0 and w ≥ 1", v, name)
		}
		qi.burst, qi.hasBurst = sfInt(t, v, it.Params, "sluice-burst")
		if !qi.hasBurst {
			qi.burst = qi.q
		}
		if u, ok := it.Params.Get("sluice-unit"); ok {
			qi.unit = u.(string)
		}
		if _, ok := it.Params.Get("qu"); ok {
			t.Fatalf("RateLimit-Policy %q: qu sent; sluice counts in requests or says sluice-unit", v)
		}
		items = append(items, qi)
	}
	return items
}

// limitItems parses RateLimit as draft 10 defines it.
func limitItems(t *testing.T, h http.Header) []limitItem {
	t.Helper()
	v, ok := oneField(t, h, "RateLimit")
	if !ok {
		return nil
	}
	list, err := httpsfv.UnmarshalList([]string{v})
	if err != nil || len(list) == 0 {
		t.Fatalf("RateLimit %q: not a non-empty structured-field List: %v", v, err)
	}
	var items []limitItem
	for _, m := range list {
		it, ok := m.(httpsfv.Item)
		if !ok {
			t.Fatalf("RateLimit %q: a member is not an Item", v)
		}
		name, ok := it.Value.(string)
		if !ok {
			t.Fatalf("RateLimit %q: item value %#v, want a String", v, it.Value)
		}
		li := limitItem{name: name}
		var hasR, hasT bool
		li.r, hasR = sfInt(t, v, it.Params, "r")
		li.t, hasT = sfInt(t, v, it.Params, "t")
		if !hasR || li.r < 0 || !hasT || li.t < 0 {
			t.Fatalf("RateLimit %q: want r ≥ 0 and t ≥ 0", v)
		}
		items = append(items, li)
	}
	return items
}

// intField parses a header that holds one non-negative Integer (the
// legacy fields, Retry-After as delay-seconds); -1 when absent.
func intField(t *testing.T, h http.Header, name string) int64 {
	t.Helper()
	v, ok := oneField(t, h, name)
	if !ok {
		return -1
	}
	it, err := httpsfv.UnmarshalItem([]string{v})
	n, isInt := it.Value.(int64)
	if err != nil || !isInt || n < 0 || len(it.Params.Names()) > 0 {
		t.Fatalf("%s %q: want a non-negative Integer", name, v)
	}
	return n
}

// checkSF asserts that every rate limit header of h parses, that RateLimit
// names an item of RateLimit-Policy, and that the legacy fields say what
// RateLimit says. It returns the parsed draft fields.
func checkSF(t *testing.T, h http.Header) ([]quotaItem, []limitItem) {
	t.Helper()
	pol, lim := policyItems(t, h), limitItems(t, h)
	for _, li := range lim {
		if !slices.ContainsFunc(pol, func(q quotaItem) bool { return q.name == li.name }) {
			t.Fatalf("RateLimit reports %q, which RateLimit-Policy %q does not list", li.name, h.Get("RateLimit-Policy"))
		}
	}
	limit, rem, reset := intField(t, h, "RateLimit-Limit"), intField(t, h, "RateLimit-Remaining"), intField(t, h, "RateLimit-Reset")
	if len(lim) == 1 && rem >= 0 && (rem != lim[0].r || reset != lim[0].t) {
		t.Fatalf("RateLimit-Remaining %d, -Reset %d, but RateLimit %q", rem, reset, h.Get("RateLimit"))
	}
	if len(lim) == 1 && limit >= 0 {
		i := slices.IndexFunc(pol, func(q quotaItem) bool { return q.name == lim[0].name })
		if pol[i].burst != limit {
			t.Fatalf("RateLimit-Limit %d, but the burst of %q is %d", limit, lim[0].name, pol[i].burst)
		}
	}
	intField(t, h, "Retry-After")
	intField(t, h, "X-RateLimit-Limit")
	intField(t, h, "X-RateLimit-Remaining")
	intField(t, h, "X-RateLimit-Reset")
	return pol, lim
}

// checkPolicyItem asserts that RateLimit-Policy states the rule of item
// name: q/w within 1% of rate and the burst.
func checkPolicyItem(t *testing.T, h http.Header, name string, burst int64, rate float64) {
	t.Helper()
	pol, _ := checkSF(t, h)
	i := slices.IndexFunc(pol, func(q quotaItem) bool { return q.name == name })
	if i < 0 {
		t.Fatalf("RateLimit-Policy %q has no item %q", h.Get("RateLimit-Policy"), name)
	}
	checkQuota(t, pol[i], rate, burst)
}

func checkQuota(t *testing.T, qi quotaItem, rate float64, burst int64) {
	t.Helper()
	if got := float64(qi.q) / float64(qi.w); math.Abs(got-rate) > 0.01*rate || got > rate*(1+1e-9) {
		t.Errorf("item %q: q=%d;w=%d is %v a second, want %v within 1%% and not above", qi.name, qi.q, qi.w, got, rate)
	}
	if qi.burst != burst {
		t.Errorf("item %q: burst %d, want %d", qi.name, qi.burst, burst)
	}
	if qi.hasBurst && qi.burst == qi.q {
		t.Errorf("item %q: sluice-burst=%d repeats q", qi.name, qi.burst)
	}
}

var (
	tableRates  = []float64{0.5, 0.7, 1, 1.3, 2.5, 3, 7, 9.99, 10, 33.3, 60, 99, 100, 333, 999, 1000, 5000, 1e6, 1.0 / 60, 1000.0 / 3600, 10000.0 / 86400, 1.0 / 86400}
	tableBursts = []int64{1, 2, 3, 10, 99, 100, 1000, 9999, 10000}
	tableCosts  = []int64{1, 2, 5, 7}
)

// TestQuotaWindowTable checks q/w against the rate, through the headers
// of a real response, for every rule of the table and every cost that
// fits its burst. With a cost above 1, numbers are in requests: rate and
// burst divided by the cost.
func TestQuotaWindowTable(t *testing.T) {
	store := memstore.New(memstore.Options{SweepInterval: -1})
	t.Cleanup(func() { store.Close() })
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
	var checked, skipped int
	defer func() {
		if checked < 10*skipped {
			t.Errorf("%d rules checked, %d refused: the table is mostly rules sluice refuses", checked, skipped)
		}
	}()
	for _, rate := range tableRates {
		for _, burst := range tableBursts {
			for _, cost := range tableCosts {
				if cost > burst || rule(rate, burst)[0].Validate() != nil {
					continue // can never pass, or outside the bounds on rules
				}
				name := fmt.Sprintf("r%v-b%d-c%d", rate, burst, cost)
				l, err := New(Options{Store: store, Policies: []Policy{{Name: name, Pattern: "/", Cost: cost, Anonymous: rule(rate, burst)}}})
				if errors.Is(err, sluice.ErrInvalid) {
					skipped++ // a rule sluice refuses (a bucket that takes years to refill, say)
					continue
				}
				if err != nil {
					t.Fatal(err)
				}
				checked++
				rec := httptest.NewRecorder()
				l.Handler(ok).ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
				pol, _ := checkSF(t, rec.Header())
				if len(pol) != 1 || pol[0].name != name || pol[0].unit != "requests" {
					t.Fatalf("%s: RateLimit-Policy %q", name, rec.Header().Get("RateLimit-Policy"))
				}
				checkQuota(t, pol[0], rate/float64(cost), burst/cost)
				if want := strconv.FormatInt(burst/cost, 10); rec.Header().Get("RateLimit-Limit") != want {
					t.Errorf("%s: RateLimit-Limit %s, want %s requests", name, rec.Header().Get("RateLimit-Limit"), want)
				}
			}
		}
	}
}

// TestQuotaWindowExtremes: rates a structured field cannot state exactly
// still give valid Integers.
func TestQuotaWindowExtremes(t *testing.T) {
	for _, tc := range []struct {
		rate  float64
		burst int64
	}{{1e-12, 1}, {1e-9, 1 << 40}, {1e18, 1}, {math.MaxFloat64, 1}, {3e-7, 7}} {
		q, w := decide.QuotaWindow(tc.rate, tc.burst)
		if q < 1 || q > decide.MaxSFInteger || w < 1 || w > decide.MaxSFInteger {
			t.Errorf("decide.QuotaWindow(%v, %d) = %d, %d: want Integers from 1 to %d", tc.rate, tc.burst, q, w, int64(decide.MaxSFInteger))
		}
	}
	// A burst beyond a structured-field Integer is stated as the largest.
	store := memstore.New(memstore.Options{SweepInterval: -1})
	t.Cleanup(func() { store.Close() })
	for _, r := range []sluice.Rule{{Rate: 1e12, Burst: 1 << 62}, {Rate: 1e9, Burst: 1e16}} {
		l, err := New(Options{Store: store, Policies: []Policy{{Name: "huge", Pattern: "/", Cost: 1, Anonymous: []sluice.Rule{r}}}})
		if errors.Is(err, sluice.ErrInvalid) {
			continue // beyond what sluice accepts at all
		}
		if err != nil {
			t.Fatal(err)
		}
		rec := httptest.NewRecorder()
		l.Handler(http.NotFoundHandler()).ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
		checkSF(t, rec.Header())
	}
	// Where they can, the preferred window is the refill time.
	for _, tc := range []struct {
		rate        float64
		burst, q, w int64
	}{{10, 100, 100, 10}, {1.0 / 3600, 3, 3, 10800}, {100, 1, 100, 1}, {0.5, 1, 1, 2}, {3, 10, 9, 3}} {
		if q, w := decide.QuotaWindow(tc.rate, tc.burst); q != tc.q || w != tc.w {
			t.Errorf("decide.QuotaWindow(%v, %d) = q=%d;w=%d, want q=%d;w=%d", tc.rate, tc.burst, q, w, tc.q, tc.w)
		}
	}
}

// TestPolicyStable: a policy of two rules is two items with stable names;
// RateLimit-Policy is the same on every response of a caller class,
// allowed or denied, and RateLimit reports one of its items.
func TestPolicyStable(t *testing.T) {
	multi := []sluice.Rule{{Rate: 10, Burst: 2}, {Rate: 0.5, Burst: 15}}
	vip := []sluice.Rule{{Rate: 100, Burst: 3}, {Rate: 1000.0 / 3600, Burst: 1000}}
	e := newEnv(t, Options{Policies: []Policy{{Name: "multi", Pattern: "/", Cost: 1, Anonymous: multi, Authenticated: rule(5, 5), Overrides: []Override{{Identity: "vip", Rules: vip}}}},
		Authenticators: []Authenticator{func(r *http.Request) (Caller, bool) {
			return Caller{ID: r.Header.Get("X-User")}, r.Header.Get("X-User") != ""
		}}}, nil)
	want := `"multi";q=10;w=1;sluice-burst=2, "multi-1";q=15;w=30`
	reported := map[string]int{}
	statuses := map[int]int{}
	for i := range 60 {
		r := e.do("GET", "/")
		statuses[r.status]++
		if got := r.header.Get("RateLimit-Policy"); got != want {
			t.Fatalf("response %d (%d): RateLimit-Policy %q, want %q", i, r.status, got, want)
		}
		pol, lim := checkSF(t, r.header)
		checkQuota(t, pol[0], 10, 2)
		checkQuota(t, pol[1], 0.5, 15)
		reported[lim[0].name]++
		e.clock.Advance(150 * time.Millisecond)
	}
	if statuses[200] == 0 || statuses[429] == 0 || reported["multi"] == 0 || reported["multi-1"] == 0 {
		t.Fatalf("statuses %v, items reported %v: want both statuses and both items", statuses, reported)
	}
	// Another caller class has its own, equally stable, items; so has an
	// identity with an override.
	for i := range 8 {
		if got := e.do("GET", "/", "X-User", "u1").header.Get("RateLimit-Policy"); got != `"multi";q=5;w=1` {
			t.Fatalf("authenticated response %d: RateLimit-Policy %q", i, got)
		}
		if got := e.do("GET", "/", "X-User", "vip").header.Get("RateLimit-Policy"); got != `"multi";q=100;w=1;sluice-burst=3, "multi-1";q=1000;w=3600` {
			t.Fatalf("override response %d: RateLimit-Policy %q", i, got)
		}
	}
}

// check429 asserts what every 429 must say: t, RateLimit-Reset and
// Retry-After are one number, and the problem's violated policy is the
// item RateLimit reports.
func check429(t *testing.T, r response) int64 {
	t.Helper()
	if r.status != http.StatusTooManyRequests {
		t.Fatalf("status %d, want 429", r.status)
	}
	_, lim := checkSF(t, r.header)
	ra, reset := intField(t, r.header, "Retry-After"), intField(t, r.header, "RateLimit-Reset")
	if ra < 1 || len(lim) != 1 || lim[0].t != ra || reset != ra {
		t.Fatalf("429: Retry-After %d, RateLimit-Reset %d, RateLimit %q: want one number ≥ 1", ra, reset, r.header.Get("RateLimit"))
	}
	if lim[0].r != 0 && r.header.Get("RateLimit-Policy") != "" && !strings.Contains(r.header.Get("RateLimit-Policy"), "sluice-unit") {
		t.Fatalf("429 with r=%d requests remaining", lim[0].r)
	}
	if strings.HasPrefix(r.header.Get("Content-Type"), "application/problem+json") {
		var p problemBody
		if err := json.Unmarshal([]byte(r.body), &p); err != nil || len(p.ViolatedPolicies) != 1 || p.ViolatedPolicies[0] != lim[0].name || p.RetryAfterSeconds != ra {
			t.Fatalf("problem %s: want violated-policies [%q] and retry_after_seconds %d", r.body, lim[0].name, ra)
		}
	} else {
		var b errorBody
		if err := json.Unmarshal([]byte(r.body), &b); err != nil || b.RetryAfterSeconds != ra {
			t.Fatalf("body %s: want retry_after_seconds %d", r.body, ra)
		}
	}
	return ra
}

// Test429Agree: on every 429, t == RateLimit-Reset == Retry-After, for one
// rule, two rules (the slow one denying), and a cost above 1; and the
// number is the time until the request would pass, not until full.
func Test429Agree(t *testing.T) {
	for _, tc := range []struct {
		name  string
		rules []sluice.Rule
		cost  int64
		step  time.Duration // fake time between requests
		after int64         // Retry-After of the first 429, within 1%
	}{
		{"one rule", rule(1, 10), 1, 0, 1},
		{"slow", rule(0.25, 10), 1, 0, 4},
		{"two rules", []sluice.Rule{{Rate: 10, Burst: 2}, {Rate: 0.5, Burst: 15}}, 1, 150 * time.Millisecond, 0},
		{"daily", []sluice.Rule{{Rate: 10, Burst: 5}, {Rate: 10.0 / 86400, Burst: 10}}, 1, 200 * time.Millisecond, 8640},
		{"cost 5", rule(2, 20), 5, 0, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, Options{Policies: []Policy{{Name: "api", Pattern: "/", Cost: tc.cost, Anonymous: tc.rules}}}, nil)
			var denied []int64
			for i := range 40 {
				accept := "application/json"
				if i%2 == 1 {
					accept = "application/problem+json"
				}
				r := e.do("GET", "/", "Accept", accept)
				e.clock.Advance(tc.step)
				if r.status == http.StatusOK {
					checkSF(t, r.header)
					continue
				}
				denied = append(denied, check429(t, r))
			}
			if len(denied) == 0 {
				t.Fatal("no 429")
			}
			if tc.after > 0 && (denied[0] > tc.after || float64(denied[0]) < 0.99*float64(tc.after)) {
				t.Errorf("first 429: Retry-After %d, want %d (within 1%%)", denied[0], tc.after)
			}
		})
	}
}

// TestPacedT: a request held by max_delay reports t as it stands when the
// response is written, not as it stood before the wait.
func TestPacedT(t *testing.T) {
	e := newEnv(t, Options{Policies: []Policy{{Name: "paced", Pattern: "/", Cost: 1, Anonymous: rule(1, 1), MaxDelay: 5 * time.Second}}}, nil)
	if r := e.do("GET", "/"); r.status != 200 {
		t.Fatal(r.status)
	}
	// The store's clock stands still: the second request reserves the
	// token of the next second, is held 1 s (a real timer), and its
	// bucket is full 2 s after the decision.
	start := time.Now()
	r := e.do("GET", "/")
	held := time.Since(start)
	if r.status != 200 || held < time.Second {
		t.Fatalf("status %d after %v, want 200 after at least 1 s", r.status, held)
	}
	_, lim := checkSF(t, r.header)
	if max := ceilSeconds(2*time.Second - time.Second); lim[0].t > max {
		t.Fatalf("t=%d after a wait of %v, want at most %d (computed after the wait)", lim[0].t, held, max)
	}
}

// TestUpstreamHeadersReplaced: an upstream's own rate limit headers, legacy
// and draft, do not reach the client beside sluice's: sluice's replace
// them, through httputil.ReverseProxy and from a handler alike.
func TestUpstreamHeadersReplaced(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("RateLimit-Limit", "1000")
		h.Set("RateLimit-Remaining", "999")
		h.Set("RateLimit-Reset", "1")
		h.Set("RateLimit-Policy", `"up";q=1000;w=1`)
		h.Set("RateLimit", `"up";r=999;t=1`)
		h.Set("X-RateLimit-Limit", "1000")
		h.Set("X-Upstream", "yes")
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, "from upstream")
	}))
	t.Cleanup(upstream.Close)
	u, _ := url.Parse(upstream.URL)
	proxy := httputil.NewSingleHostReverseProxy(u)
	// A handler that adds to what the middleware might have set early.
	adder := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Add("RateLimit-Limit", "1000")
		w.Header().Add("RateLimit", `"up";r=999;t=1`)
		w.Write([]byte("added"))
	})
	pol := []Policy{{Name: "api", Pattern: "/", Cost: 1, Anonymous: rule(1, 10)}}
	for _, tc := range []struct {
		name    string
		mode    HeaderMode
		x       bool
		next    http.Handler
		legacy  string // RateLimit-Limit the client must see ("" absent)
		draft   bool
		xLimit  string
		through bool // the upstream's headers pass untouched
	}{
		{"proxy both", HeadersBoth, false, proxy, "10", true, "1000", false},
		{"proxy legacy", HeadersLegacy, false, proxy, "10", false, "1000", false},
		{"proxy draft", HeadersDraft, false, proxy, "", true, "1000", false},
		{"proxy x", HeadersBoth, true, proxy, "10", true, "10", false},
		{"proxy none", HeadersNone, false, proxy, "1000", true, "1000", true},
		{"handler both", HeadersBoth, false, adder, "10", true, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, Options{Headers: tc.mode, XRateLimit: tc.x, Policies: pol}, tc.next)
			r := e.do("GET", "/x")
			if r.status != 200 {
				t.Fatalf("status %d", r.status)
			}
			if got := r.header.Get("RateLimit-Limit"); got != tc.legacy {
				t.Errorf("RateLimit-Limit %q, want %q", got, tc.legacy)
			}
			if got := r.header.Get("X-RateLimit-Limit"); got != tc.xLimit {
				t.Errorf("X-RateLimit-Limit %q, want %q", got, tc.xLimit)
			}
			if tc.through {
				if r.header.Get("RateLimit") != `"up";r=999;t=1` {
					t.Errorf("mode none: the upstream's RateLimit %q did not pass", r.header.Get("RateLimit"))
				}
				return
			}
			_, lim := checkSF(t, r.header)
			if tc.draft != (len(lim) == 1) || (tc.draft && lim[0].name != "api") {
				t.Errorf("RateLimit %q, want sluice's only (draft %v)", r.header.Get("RateLimit"), tc.draft)
			}
			if !tc.draft && (r.header.Get("RateLimit-Policy") != "" || r.header.Get("RateLimit") != "") {
				t.Errorf("draft fields %q %q in mode %s", r.header.Get("RateLimit-Policy"), r.header.Get("RateLimit"), tc.name)
			}
			if tc.next == proxy && r.header.Get("X-Upstream") != "yes" {
				t.Error("the upstream's other headers were lost")
			}
		})
	}
}

// TestAcceptTable: problem+json only when the client prefers it.
func TestAcceptTable(t *testing.T) {
	for _, tc := range []struct {
		accept  string
		problem bool
	}{
		{"", false},
		{"application/json", false},
		{"application/problem+json", true},
		{"application/json, application/problem+json;q=0.1", false},
		{"application/json;q=0.5, application/problem+json", true},
		{"application/problem+json;q=0", false},
		{"application/problem+json;q=0, application/json;q=0", false},
		{"application/problem+json;q=0.1", true}, // the only acceptable type
		{"*/*", false},
		{"*/*;q=0.1, application/problem+json", true},
		{"application/*;q=0.2, application/problem+json;q=0.3", true},
		{"application/*, application/problem+json;q=0.3", false},
		{"application/problem+json;q=0.3, application/*;q=0.3", false},
		{"text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8", false},
		{"APPLICATION/PROBLEM+JSON", true},
		{`application/problem+json;foo="a,b";q=0.9, application/json;q=0.5`, true},
		{"application/problem+json;q=garbage, application/json;q=0.5", true},
		{"application/problem+json;q=1.5, application/json", false},
		{"application/json;charset=utf-8, application/problem+json;q=0.9", false},
	} {
		if got := acceptsProblem([]string{tc.accept}); got != tc.problem {
			t.Errorf("Accept %q: problem+json %v, want %v", tc.accept, got, tc.problem)
		}
	}
	// Several Accept lines are one list.
	if !acceptsProblem([]string{"application/json;q=0.1", "application/problem+json"}) {
		t.Error("two Accept lines: problem+json not chosen")
	}
	e := newEnv(t, Options{Policies: []Policy{{Name: "api", Pattern: "/", Cost: 1, Anonymous: rule(1, 1)}}}, nil)
	e.do("GET", "/")
	if r := e.do("GET", "/", "Accept", "application/json, application/problem+json;q=0.1"); r.header.Get("Content-Type") != "application/json" {
		t.Errorf("Content-Type %q, want application/json", r.header.Get("Content-Type"))
	}
}

// TestRetryAfterJitter: with jitter, the 429s of one moment spread over
// the jitter, and t, RateLimit-Reset and Retry-After still agree.
func TestRetryAfterJitter(t *testing.T) {
	e := newEnv(t, Options{RetryAfterJitter: 5 * time.Second, Policies: []Policy{{Name: "api", Pattern: "/", Cost: 1, Anonymous: rule(1, 1)}}}, nil)
	e.do("GET", "/")
	seen := map[int64]bool{}
	for range 60 {
		ra := check429(t, e.do("GET", "/"))
		if ra < 1 || ra > 1+5 {
			t.Fatalf("Retry-After %d with a 1 s wait and 5 s of jitter", ra)
		}
		seen[ra] = true
	}
	if len(seen) < 3 {
		t.Fatalf("60 denials gave Retry-After values %v: want them spread", seen)
	}
	// A wait that saturated the Duration does not wrap around with jitter.
	if got := e.lim.retrySeconds(sluice.Result{RetryAfter: math.MaxInt64}, 0); got < int64(math.MaxInt64/time.Second) {
		t.Fatalf("saturated wait with jitter: Retry-After %d", got)
	}
	if _, err := New(Options{Store: e.store, RetryAfterJitter: -time.Second}); err == nil {
		t.Error("a negative jitter was accepted")
	}
}

// TestXRateLimit: the X-RateLimit names carry the same numbers, the reset
// as a Unix time.
func TestXRateLimit(t *testing.T) {
	e := newEnv(t, Options{XRateLimit: true, Headers: HeadersNone, Policies: []Policy{{Name: "api", Pattern: "/", Cost: 1, Anonymous: rule(1, 3)}}}, nil)
	for i := range 5 {
		before := time.Now().Unix()
		r := e.do("GET", "/")
		after := time.Now().Unix()
		checkSF(t, r.header)
		if r.header.Get("RateLimit-Limit") != "" || r.header.Get("RateLimit") != "" {
			t.Fatal("headers: none sent RateLimit fields")
		}
		limit, rem, reset := intField(t, r.header, "X-RateLimit-Limit"), intField(t, r.header, "X-RateLimit-Remaining"), intField(t, r.header, "X-RateLimit-Reset")
		wantRem := max(0, int64(2-i))
		delay := int64(i + 1) // until full: one second per token taken
		if r.status == 429 {
			delay = intField(t, r.header, "Retry-After")
		}
		if limit != 3 || rem != wantRem || reset < before+delay-1 || reset > after+delay+1 {
			t.Errorf("request %d (%d): X-RateLimit %d/%d reset %d, want 3/%d and about %d", i, r.status, limit, rem, reset, wantRem, before+delay)
		}
	}
}

// TestDenyBody: a body of one's own, with the retry time filled in; a
// client that prefers problem+json still gets the draft's problem.
func TestDenyBody(t *testing.T) {
	body := &DenyBody{ContentType: "text/html; charset=utf-8", Body: []byte("<p>Slow down: retry in {{retry_after}} s ({{retry_after}})</p>")}
	e := newEnv(t, Options{DenyBody: body, Policies: []Policy{{Name: "api", Pattern: "/", Cost: 1, Anonymous: rule(0.5, 1)}}}, nil)
	e.do("GET", "/")
	r := e.do("GET", "/", "Accept", "text/html")
	if r.status != 429 || r.header.Get("Content-Type") != "text/html; charset=utf-8" || r.body != "<p>Slow down: retry in 2 s (2)</p>" {
		t.Fatalf("%d %q %q", r.status, r.header.Get("Content-Type"), r.body)
	}
	if r.header.Get("Cache-Control") != "no-store" || r.header.Get("X-Content-Type-Options") != "nosniff" {
		t.Fatalf("custom 429 headers %v", r.header)
	}
	if r := e.do("GET", "/", "Accept", "application/problem+json"); r.header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("problem+json client got %q", r.header.Get("Content-Type"))
	}
	if r := e.do("GET", "/", "Accept", "text/html;q=0.5, application/problem+json"); r.header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("client preferring problem+json got %q", r.header.Get("Content-Type"))
	}
	for _, bad := range []*DenyBody{{Body: []byte("x")}, {ContentType: "text/plain\r\nX-Evil: 1"}} {
		if _, err := New(Options{Store: e.store, DenyBody: bad}); err == nil {
			t.Errorf("DenyBody %+v accepted", bad)
		}
	}
}

// TestTokenUnit: a policy charged after the fact counts in tokens and
// says so; one of a fixed cost counts in requests.
func TestTokenUnit(t *testing.T) {
	e := newEnv(t, Options{Policies: []Policy{
		{Name: "ai", Pattern: "/ai", Cost: 1, CostHeader: "X-Cost", Anonymous: rule(10, 100)},
		{Name: "bulk", Pattern: "/bulk", Cost: 5, Anonymous: rule(10, 100)},
	}}, nil)
	pol, lim := checkSF(t, e.do("GET", "/ai").header)
	if pol[0].unit != "tokens" || lim[0].r != 99 {
		t.Errorf("ai: unit %q r=%d, want tokens and 99", pol[0].unit, lim[0].r)
	}
	checkQuota(t, pol[0], 10, 100)
	r := e.do("GET", "/bulk")
	pol, lim = checkSF(t, r.header)
	if pol[0].unit != "requests" || lim[0].r != 19 || r.header.Get("RateLimit-Remaining") != "19" {
		t.Errorf("bulk: unit %q r=%d, want requests and 19 (95 tokens at 5 a request)", pol[0].unit, lim[0].r)
	}
	checkQuota(t, pol[0], 2, 20)
}

// TestHeadersWithoutWrite: a handler that writes nothing, or only flushes,
// still sends the headers, computed then.
func TestHeadersWithoutWrite(t *testing.T) {
	for name, next := range map[string]http.Handler{
		"nothing": http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}),
		"flush":   http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { http.NewResponseController(w).Flush() }),
		"readfrom": http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(w, strings.NewReader("copied"))
		}),
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, Options{Policies: []Policy{{Name: "api", Pattern: "/", Cost: 1, Anonymous: rule(1, 5)}}}, next)
			r := e.do("GET", "/")
			if _, lim := checkSF(t, r.header); len(lim) != 1 || lim[0].r != 4 {
				t.Fatalf("RateLimit %q", r.header.Get("RateLimit"))
			}
		})
	}
}

// TestWriterKeepsInterfaces: behind the middleware a handler can still
// hijack the connection (a WebSocket upgrade), send 1xx responses before
// the final one, and flush; the rate limit headers go on the final
// response only.
func TestWriterKeepsInterfaces(t *testing.T) {
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/upgrade":
			hj, ok := w.(http.Hijacker)
			if !ok {
				http.Error(w, "no hijacker", 500)
				return
			}
			conn, buf, err := hj.Hijack()
			if err != nil {
				return
			}
			defer conn.Close()
			buf.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: test\r\nConnection: Upgrade\r\n\r\nhello")
			buf.Flush()
		case "/early":
			w.Header().Set("Link", "</style.css>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
			w.Header().Del("Link")
			if _, ok := w.(http.Flusher); !ok {
				t.Error("no Flusher")
			}
			w.WriteHeader(http.StatusAccepted)
		}
	})
	e := newEnv(t, Options{Policies: []Policy{{Name: "api", Pattern: "/", Cost: 1, Anonymous: rule(1, 5)}}}, next)
	conn, err := net.Dial("tcp", e.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET /upgrade HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: test\r\n\r\n")
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, _ := io.ReadAll(conn)
	if !strings.HasPrefix(string(got), "HTTP/1.1 101 ") || !strings.HasSuffix(string(got), "hello") {
		t.Fatalf("upgrade answered %q", got)
	}
	var early []int
	req, _ := http.NewRequest("GET", e.srv.URL+"/early", nil)
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
		Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
			early = append(early, code)
			if h.Get("RateLimit") != "" {
				t.Errorf("1xx response with RateLimit %q", h.Get("RateLimit"))
			}
			return nil
		},
	}))
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted || len(early) != 1 || early[0] != 103 {
		t.Fatalf("status %d, 1xx %v", resp.StatusCode, early)
	}
	if _, lim := checkSF(t, resp.Header); len(lim) != 1 || lim[0].r != 3 {
		t.Fatalf("final response RateLimit %q, want r=3", resp.Header.Get("RateLimit"))
	}
}

// FuzzQuotaItem: any rule and cost a policy accepts gives a RateLimit-Policy
// that parses, with q/w within 1% of the rate in requests whenever that is
// representable in structured-field Integers.
func FuzzQuotaItem(f *testing.F) {
	f.Add(100.0, int64(1), int64(1))
	f.Add(0.5, int64(10000), int64(7))
	f.Add(1e-7, int64(3), int64(1))
	f.Fuzz(func(t *testing.T, rate float64, burst, cost int64) {
		if !(rate > 0) || math.IsInf(rate, 0) || burst < 1 || cost < 1 || cost > burst {
			return
		}
		qh := decide.RenderQuota("fuzz", []sluice.Rule{{Rate: rate, Burst: burst}, {Rate: rate * 2, Burst: burst}}, cost, "")
		h := http.Header{"Ratelimit-Policy": {qh.Policy}}
		pol := policyItems(t, h)
		if len(pol) != 2 || pol[0].name != "fuzz" || pol[1].name != "fuzz-1" {
			t.Fatalf("items %+v", pol)
		}
		perReq := rate / float64(cost)
		if perReq*100 < decide.MaxSFInteger && perReq > 100.0/decide.MaxSFInteger {
			checkQuota(t, pol[0], perReq, burst/cost)
		}
	})
}

// TestHeadersUnderConcurrency: many connections at once, some paced, some
// denied: every response's fields parse, RateLimit-Policy never changes,
// and every 429 agrees with itself.
func TestHeadersUnderConcurrency(t *testing.T) {
	multi := []sluice.Rule{{Rate: 50, Burst: 10}, {Rate: 5, Burst: 40}}
	e := newEnv(t, Options{RetryAfterJitter: time.Second, XRateLimit: true, Policies: []Policy{
		{Name: "multi", Pattern: "/m", Cost: 1, Anonymous: multi},
		{Name: "paced", Pattern: "/p", Cost: 2, Anonymous: rule(100, 10), MaxDelay: 50 * time.Millisecond},
	}}, nil)
	type got struct {
		r    response
		path string
	}
	out := make(chan got, 400)
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 20 {
				path := "/m"
				if (i+j)%3 == 0 {
					path = "/p"
				}
				out <- got{e.do("GET", path, "Accept", "application/problem+json"), path}
				if j%5 == 0 {
					e.clock.Advance(20 * time.Millisecond)
				}
			}
		}()
	}
	wg.Wait()
	close(out)
	policies := map[string]string{}
	var denied int
	for g := range out {
		if p, ok := policies[g.path]; ok && p != g.r.header.Get("RateLimit-Policy") {
			t.Fatalf("%s: RateLimit-Policy %q then %q", g.path, p, g.r.header.Get("RateLimit-Policy"))
		}
		policies[g.path] = g.r.header.Get("RateLimit-Policy")
		switch g.r.status {
		case http.StatusOK:
			checkSF(t, g.r.header)
		case http.StatusTooManyRequests:
			denied++
			check429(t, g.r)
		default:
			t.Fatalf("status %d", g.r.status)
		}
	}
	if denied == 0 {
		t.Fatal("no 429 under load")
	}
	if policies["/m"] != `"multi";q=50;w=1;sluice-burst=10, "multi-1";q=40;w=8` || policies["/p"] != `"paced";q=50;w=1;sluice-burst=5` {
		t.Fatalf("policies %q", policies)
	}
}

// TestUpstreamTrailersDropped: an upstream that sends RateLimit fields as
// trailers (which draft 10 forbids) cannot contradict sluice's header;
// its other trailers pass.
func TestUpstreamTrailersDropped(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "RateLimit, X-Checksum, RateLimit-Remaining")
		io.WriteString(w, "body")
		w.Header().Set("RateLimit", `"up";r=999;t=1`)
		w.Header().Set("RateLimit-Remaining", "999")
		w.Header().Set("X-Checksum", "abc")
	}))
	t.Cleanup(upstream.Close)
	u, _ := url.Parse(upstream.URL)
	e := newEnv(t, Options{Policies: []Policy{{Name: "api", Pattern: "/", Cost: 1, Anonymous: rule(1, 10)}}}, httputil.NewSingleHostReverseProxy(u))
	resp, err := e.srv.Client().Get(e.srv.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if _, lim := checkSF(t, resp.Header); len(lim) != 1 || lim[0].name != "api" {
		t.Fatalf("RateLimit %q", resp.Header.Get("RateLimit"))
	}
	if resp.Trailer.Get("RateLimit") != "" || resp.Trailer.Get("RateLimit-Remaining") != "" || resp.Trailer.Get("X-Checksum") != "abc" {
		t.Fatalf("trailers %v: want X-Checksum only", resp.Trailer)
	}
}

// TestPacingAtQuotaNeverDenied: a client that reads RateLimit-Policy and
// paces itself at q per w seconds is never denied, whatever the burst,
// because q/w never exceeds the rate (in requests).
func TestPacingAtQuotaNeverDenied(t *testing.T) {
	for _, rate := range []float64{0.5, 0.7, 1.3, 3, 9.99, 33.3, 100, 999} {
		for _, burst := range []int64{1, 3, 10} {
			for _, cost := range []int64{1, 3} {
				if cost > burst {
					continue
				}
				clk := fakeclock.New(time.Unix(1_800_000_000, 0))
				store := memstore.New(memstore.Options{Now: clk.Now, SweepInterval: -1})
				l, err := New(Options{Store: store, Policies: []Policy{{Name: "p", Pattern: "/", Cost: cost, Anonymous: rule(rate, burst)}}})
				if err != nil {
					t.Fatal(err)
				}
				h := l.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
				var interval time.Duration
				for i := range 300 {
					rec := httptest.NewRecorder()
					h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
					if rec.Code != http.StatusOK {
						t.Fatalf("%v/s burst %d cost %d: request %d paced at %v denied (RateLimit-Policy %q)", rate, burst, cost, i, interval, rec.Header().Get("RateLimit-Policy"))
					}
					if i == 0 {
						pol, _ := checkSF(t, rec.Header())
						// w/q seconds, rounded up to the microsecond: never faster.
						interval = time.Duration(math.Ceil(float64(pol[0].w)/float64(pol[0].q)*1e6)) * time.Microsecond
					}
					clk.Advance(interval)
				}
				store.Close()
			}
		}
	}
}
