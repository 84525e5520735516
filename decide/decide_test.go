package decide_test

import (
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/decide"
)

// TestNoHTTP: the decision core links no HTTP server and no JWT library,
// so a front door of another protocol does not either by deciding.
func TestNoHTTP(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/sluicehq/sluice/decide").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		if dep == "net/http" || strings.HasPrefix(dep, "github.com/golang-jwt/") || dep == "github.com/sluicehq/sluice/httplimit" {
			t.Errorf("package decide depends on %s", dep)
		}
	}
}

var errDown = errors.New("store down")

func TestResolve(t *testing.T) {
	allowed := sluice.Result{Allowed: true, Limit: 5, Remaining: 4}
	denied := sluice.Result{Limit: 5, RetryAfter: time.Second}
	for _, c := range []struct {
		name    string
		res     sluice.Result
		err     error
		shadow  bool
		onError decide.OnError
		act     decide.Act
		outcome decide.Outcome
		allowed bool
	}{
		{"allowed", allowed, nil, false, decide.Local, decide.Serve, decide.Allowed, true},
		{"delayed", sluice.Result{Allowed: true, Delay: time.Second}, nil, false, decide.Local, decide.Serve, decide.Delayed, true},
		{"denied", denied, nil, false, decide.Local, decide.Deny, decide.Denied, false},
		{"shadow denied", denied, nil, true, decide.Closed, decide.Pass, decide.ShadowDenied, true},
		{"shadow allowed", allowed, nil, true, decide.Local, decide.Serve, decide.Allowed, true},
		{"cache denied", sluice.Result{DecidedBy: sluice.ByDenialCache}, nil, false, decide.Local, decide.Deny, decide.CacheDenied, false},
		{"local allowed", sluice.Result{Allowed: true, DecidedBy: sluice.ByLocal}, nil, false, decide.Local, decide.Serve, decide.LocalAllowed, true},
		{"store failed, open", sluice.Result{}, errDown, false, decide.Open, decide.Pass, decide.FailedOpen, true},
		{"store failed, local", sluice.Result{}, errDown, false, decide.Local, decide.Pass, decide.FailedOpen, true},
		{"store failed, closed", sluice.Result{}, errDown, false, decide.Closed, decide.FailClosed, decide.FailedClosed, false},
		{"store failed, closed, shadow", sluice.Result{}, errDown, true, decide.Closed, decide.FailClosed, decide.FailedClosed, false},
		{"invalid", sluice.Result{}, fmt.Errorf("%w: x", sluice.ErrInvalid), false, decide.Closed, decide.Invalid, decide.None, false},
		{"cost exceeds burst", sluice.Result{}, sluice.ErrCostExceedsBurst, false, decide.Open, decide.Invalid, decide.None, false},
	} {
		act, outcome, res := decide.Resolve(c.res, c.err, c.shadow, c.onError)
		if act != c.act || outcome != c.outcome || res.Allowed != c.allowed {
			t.Errorf("%s: %v %v allowed=%v, want %v %v allowed=%v", c.name, act, outcome, res.Allowed, c.act, c.outcome, c.allowed)
		}
	}
}

func TestOutcomeNames(t *testing.T) {
	for o, want := range map[decide.Outcome]string{decide.Allowed: "allowed", decide.ShadowDenied: "shadow_denied",
		decide.LocalDenied: "local_denied", decide.Allowlisted: "allowlisted", decide.None: ""} {
		if o.String() != want {
			t.Errorf("%d: %q, want %q", o, o.String(), want)
		}
	}
	if decide.Allowlisted.Counted() || decide.None.Counted() || !decide.LocalDenied.Counted() {
		t.Error("Counted is wrong")
	}
}

func TestParseOnError(t *testing.T) {
	for in, want := range map[string]decide.OnError{"": decide.Local, "local": decide.Local, "open": decide.Open, " Closed ": decide.Closed} {
		if got, err := sluice.ParseOnError(in); err != nil || got != want {
			t.Errorf("ParseOnError(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	if _, err := sluice.ParseOnError("maybe"); !errors.Is(err, sluice.ErrInvalid) {
		t.Errorf("ParseOnError(maybe): %v", err)
	}
	var zero decide.OnError
	if zero != decide.Local || zero.String() != "local" {
		t.Errorf("the zero OnError is %v", zero)
	}
}

func TestClassKeyBytes(t *testing.T) {
	// These bytes are in every store key: changing one loses every bucket.
	got := string([]byte{decide.Anonymous.KeyByte(), decide.Authenticated.KeyByte(), decide.Override.KeyByte(), decide.Plan.KeyByte()})
	if got != "auop" {
		t.Fatalf("class key bytes %q, want auop", got)
	}
}

// A front door asks the store, lets Resolve apply the policy's on_error
// and shadow mode, and switches on the Act.
func ExampleResolve() {
	answers := []struct {
		res sluice.Result
		err error
	}{
		{sluice.Result{Allowed: true, Limit: 10, Remaining: 9}, nil},
		{sluice.Result{Limit: 10, RetryAfter: 2 * time.Second}, nil},
		{sluice.Result{}, errors.New("redis: connection refused")},
	}
	for _, shadow := range []bool{false, true} {
		for _, a := range answers {
			act, outcome, res := decide.Resolve(a.res, a.err, shadow, decide.Closed)
			switch act {
			case decide.Serve, decide.Pass:
				fmt.Printf("shadow=%v: serve (%s), remaining %d\n", shadow, outcome, res.Remaining)
			case decide.Deny:
				fmt.Printf("shadow=%v: 429 (%s), retry after %v\n", shadow, outcome, res.RetryAfter)
			case decide.FailClosed:
				fmt.Printf("shadow=%v: 503 (%s)\n", shadow, outcome)
			}
		}
	}
	// Output:
	// shadow=false: serve (allowed), remaining 9
	// shadow=false: 429 (denied), retry after 2s
	// shadow=false: 503 (failed_closed)
	// shadow=true: serve (allowed), remaining 9
	// shadow=true: serve (shadow_denied), remaining 0
	// shadow=true: 503 (failed_closed)
}

// The RateLimit field values of a rule set are rendered once: the policy
// item of draft 10, and each rule's limit in requests.
func ExampleRenderQuota() {
	f := decide.RenderQuota("payments", []sluice.Rule{{Rate: 10.0 / 60, Burst: 10}, {Rate: 1000.0 / 86400, Burst: 1000}}, 1, "")
	fmt.Println(f.Policy)
	fmt.Println(f.Limit)
	// Output:
	// "payments";q=10;w=60, "payments-1";q=1000;w=86400
	// [10 1000]
}
