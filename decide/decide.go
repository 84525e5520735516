// Package decide is sluice's decision core without a protocol: the types
// and steps that every front door (the net/http middleware and the
// gateway's reverse proxy and forward auth, the decision API POST
// /v1/check, Envoy's gRPC rate limit service) shares, so that a front door
// only translates its protocol into a decision and the Verdict back.
//
// What lives here: the failure policy (OnError, one type for the module),
// the caller's key class (Class), the rule set a caller is checked
// against with the RateLimit field values that depend only on its rules
// (Rules, QuotaFields), the step that applies on_error and shadow to what
// the store answered (Resolve), the typed Outcome as
// sluice_decisions_total counts it with its Metrics, and the Verdict that
// says what to do with a decision (Act), with the outcome, the result and
// the rules it was decided with, so that rendering the answer needs no
// second lookup.
//
// Package httplimit builds on it: its Limiter matches, identifies and keys
// a caller and calls the store, and its Verdict method returns a Verdict of
// this package for callers that decide by policy name. This package
// imports no net/http (a test holds it to that), so a front door that
// speaks another protocol links no HTTP server to decide.
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
