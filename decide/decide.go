// Package decide is sluice's decision core without a protocol: every
// front door (the net/http middleware and the gateway's reverse proxy and
// forward auth, the decision API POST /v1/check, Envoy's gRPC rate limit
// service) translates its protocol into one call of a Core and the Verdict
// back, so that a fix to keying, rules, failure policy or headers lands
// everywhere at once.
//
// A Core is built from policies (New, Config). Decide decides by policy
// name for a caller that a front door states (Attributes); DecideFor
// decides for a policy the front door matched itself and a Subject it
// verified (package httplimit matches HTTP requests against
// Policy.Pattern). Either goes policy → caller → key → rules → store →
// result: the allowlist (verified callers only), the caller's class and
// rules (Rules: anonymous, authenticated, a plan's, an override's, a
// runtime override's from Overrides), the store key (Key, or the identity
// rules; the bytes of every key are fixed so that buckets survive an
// upgrade), one store call with its timeout and Fallback, on_error and
// shadow (Resolve), and the count of the typed Outcome (Metrics). The
// Verdict says what to do (Act), with the outcome, the result and the
// rules it was decided with, so that rendering the answer (QuotaFields)
// needs no second lookup.
//
// This package imports no net/http (a test holds it to that), so a front
// door that speaks another protocol links no HTTP server to decide.
package decide

import (
	"errors"

	"github.com/sluicehq/sluice"
)

// OnError is sluice.OnError: what decides when the store fails. Its zero
// value, Local, is the YAML configuration's default.
type OnError = sluice.OnError

// The failure policies.
const (
	Local  = sluice.OnErrorLocal  // an in-process bucket decides; where there is none, as Open
	Open   = sluice.OnErrorOpen   // serve unlimited, counted and logged
	Closed = sluice.OnErrorClosed // refuse: 503, OVER_LIMIT
)

// Act is what a front door does with a Verdict.
type Act uint8

const (
	// Serve: allowed (when Result.Delay > 0, after that delay): serve,
	// with the rate limit fields.
	Serve Act = iota
	// Pass: serve without limiting and without rate limit fields: an
	// allowlisted caller, a shadow denial, a store failure under on_error
	// open.
	Pass
	// Deny: refused: 429, OVER_LIMIT.
	Deny
	// FailClosed: the store failed and on_error is closed: 503.
	FailClosed
	// Invalid: the input cannot be decided (Verdict.Err says why): the
	// cost exceeds a burst, a key is missing, the policy is unknown.
	Invalid
)

var actNames = [...]string{Serve: "serve", Pass: "pass", Deny: "deny", FailClosed: "fail_closed", Invalid: "invalid"}

func (a Act) String() string {
	if int(a) < len(actNames) {
		return actNames[a]
	}
	return "unknown"
}

// Verdict is one decision: what to do, what was counted, what the store
// answered, and the rules it was decided with.
type Verdict struct {
	Act     Act
	Outcome Outcome       // None when nothing was counted
	Result  sluice.Result // Pass: Allowed; FailClosed, Invalid: zero
	// Rules are the rules of the caller's class that were decided with
	// (nil for an allowlisted caller or an unknown policy): the RateLimit
	// fields of the answer come from them and Result.
	Rules *Rules
	// Request is what the store was asked.
	Request sluice.Request
	// Err says why, for FailClosed (the store's error) and Invalid.
	Err error
}

// Allowed reports whether the request may go on: Serve and Pass.
func (v *Verdict) Allowed() bool { return v.Act == Serve || v.Act == Pass }

// Resolve applies a policy's failure policy and shadow mode to the store's
// answer (res, err), after any local fallback has had its say, and returns
// what to do, what to count, and the result to answer with. An input error
// (sluice.ErrInvalid, sluice.ErrCostExceedsBurst) is Invalid whatever
// on_error says; a store error is FailClosed under Closed and Pass
// (failed open) otherwise; a denial under shadow is Pass.
func Resolve(res sluice.Result, err error, shadow bool, onError OnError) (Act, Outcome, sluice.Result) {
	switch {
	case err != nil && IsInputError(err):
		return Invalid, None, res
	case err != nil && onError == Closed:
		return FailClosed, FailedClosed, sluice.Result{}
	case err != nil:
		return Pass, FailedOpen, sluice.Result{Allowed: true, DecidedBy: sluice.ByOpen}
	case !res.Allowed && shadow:
		res.Allowed = true // served
		return Pass, ShadowDenied, res
	case !res.Allowed:
		return Deny, OutcomeOf(res), res
	}
	return Serve, OutcomeOf(res), res
}

// IsInputError reports whether err says the input cannot be decided
// (sluice.ErrInvalid, sluice.ErrCostExceedsBurst) rather than that the
// store failed.
func IsInputError(err error) bool {
	return errors.Is(err, sluice.ErrInvalid) || errors.Is(err, sluice.ErrCostExceedsBurst)
}
