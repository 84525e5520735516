package httplimit

import (
	"net/http"
	"sync"
	"testing"
)

// recordDecisions is an outer middleware that puts a Decision in each
// request's context and keeps it once the request is served.
type recordDecisions struct {
	mu  sync.Mutex
	got []Decision
}

func (rd *recordDecisions) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var d AccessRecord
		next.ServeHTTP(w, r.WithContext(WithAccessRecord(r.Context(), &d)))
		rd.mu.Lock()
		rd.got = append(rd.got, d)
		rd.mu.Unlock()
	})
}

func (rd *recordDecisions) last() Decision {
	rd.mu.Lock()
	defer rd.mu.Unlock()
	return rd.got[len(rd.got)-1]
}

// TestDecisionRecorded: the Decision in a request's context says what the
// limiter did, for each kind of outcome, and names no credential.
func TestDecisionRecorded(t *testing.T) {
	byHeader := func(r *http.Request) (Caller, bool) {
		id := r.Header.Get("X-User")
		return Caller{ID: id}, id != ""
	}
	rd := &recordDecisions{}
	e := newEnv(t, Options{
		Policies: []Policy{
			{Name: "p", Pattern: "GET /p/", Cost: 1, Anonymous: rule(0.001, 1), Overrides: []Override{{Identity: "vip", Rules: rule(0.001, 5)}}},
			{Name: "s", Pattern: "GET /s/", Cost: 1, Anonymous: rule(0.001, 1), Shadow: true},
		},
		Authenticators: []Authenticator{byHeader},
		Allowlist:      Allowlist{Identities: []string{"ops"}},
	}, nil, rd.wrap)
	cases := []struct {
		path, user string
		want       Decision
	}{
		{"/p/1", "", Decision{Path: "/p/1", Policy: "p", Class: "anonymous", Outcome: "allowed", DecidedBy: "store"}},
		{"/p/1", "", Decision{Path: "/p/1", Policy: "p", Class: "anonymous", Outcome: "denied", DecidedBy: "store"}},
		{"/p/./2", "bob", Decision{Path: "/p/2", Policy: "p", Class: "authenticated", Identity: "bob", Outcome: "allowed", DecidedBy: "store"}},
		{"/p/2", "vip", Decision{Path: "/p/2", Policy: "p", Class: "override", Identity: "vip", Outcome: "allowed", DecidedBy: "store"}},
		{"/p/2", "ops", Decision{Path: "/p/2", Policy: "p", Outcome: "allowlisted"}},
		{"/s/1", "", Decision{Path: "/s/1", Policy: "s", Class: "anonymous", Outcome: "allowed", DecidedBy: "store"}},
		{"/s/1", "", Decision{Path: "/s/1", Policy: "s", Class: "anonymous", Outcome: "shadow_denied", DecidedBy: "store"}},
		{"/other", "", Decision{Path: "/other"}},
	}
	for _, c := range cases {
		if c.user != "" {
			e.do("GET", c.path, "X-User", c.user)
		} else {
			e.do("GET", c.path)
		}
		if got := rd.last(); got != c.want {
			t.Errorf("GET %s as %q: %+v, want %+v", c.path, c.user, got, c.want)
		}
	}

	failing := &recordDecisions{}
	f := newEnv(t, Options{Store: failingStore{}, Policies: []Policy{
		{Name: "open", Pattern: "GET /open/", Cost: 1, Anonymous: rule(1, 1)},
		{Name: "closed", Pattern: "GET /closed/", Cost: 1, Anonymous: rule(1, 1), OnError: FailClosed},
	}}, nil, failing.wrap)
	f.do("GET", "/open/1")
	if got := failing.last(); got.Outcome != "failed_open" || got.DecidedBy != "" {
		t.Errorf("a failed store, open: %+v", got)
	}
	if r := f.do("GET", "/closed/1"); r.status != http.StatusServiceUnavailable || failing.last().Outcome != "failed_closed" {
		t.Errorf("a failed store, closed: %d %+v", r.status, failing.last())
	}
}
