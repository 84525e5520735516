package httplimit

import (
	"context"
	"net/http"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/decide"
)

// AccessRecord is what the limiter did with one request, for an access
// log. Put one in the request's context with WithAccessRecord before the
// Limiter's Handler; it is filled in as the request is decided, and read once the
// handler returns. It names no credential: an authenticated caller appears
// as the identity its Authenticator returned.
type AccessRecord struct {
	// Path is the request's path in the normal form that was matched and
	// passed on (escaped); empty when the request had none (Handler
	// refused it).
	Path string
	// Policy is the name of the policy that matched, or empty.
	Policy string
	// Class is the caller's key class under Policy: anonymous,
	// authenticated, override or plan.
	Class string
	// Identity is the authenticated identity the request was keyed by;
	// empty for an anonymous caller.
	Identity string
	// Outcome is the decision as sluice_decisions_total counts it
	// (allowed, denied, delayed, shadow_denied, local_allowed, …), or
	// allowlisted; empty when no policy decided.
	Outcome string
	// DecidedBy is what decided: store, denial_cache, local or open;
	// empty when nothing asked the store or the store failed.
	DecidedBy string
}

// Decision is the former name of AccessRecord.
//
// Deprecated: "decision" names the core's verdict (decide.Verdict); use
// AccessRecord.
type Decision = AccessRecord

type recordKey struct{}

// WithAccessRecord returns ctx carrying d, for the limiter to fill in.
func WithAccessRecord(ctx context.Context, d *AccessRecord) context.Context {
	return context.WithValue(ctx, recordKey{}, d)
}

// WithDecision is the former name of WithAccessRecord.
//
// Deprecated: use WithAccessRecord.
func WithDecision(ctx context.Context, d *AccessRecord) context.Context {
	return WithAccessRecord(ctx, d)
}

// recordFrom returns the AccessRecord of a request's context, or nil; the
// methods below do nothing on nil.
func recordFrom(ctx context.Context) *AccessRecord {
	d, _ := ctx.Value(recordKey{}).(*AccessRecord)
	return d
}

func (d *AccessRecord) matched(r *http.Request, p *policy) {
	if d == nil {
		return
	}
	d.Path = r.URL.EscapedPath()
	if p != nil {
		d.Policy = p.Name
	}
}

// record records what the core decided: the caller's class and identity,
// and the outcome, unless a held request is counted later (hold).
func (d *AccessRecord) record(v *decide.Verdict, id string) {
	if d == nil {
		return
	}
	if v.Rules != nil {
		d.caller(v.Rules.Class, id)
	}
	switch {
	case v.Outcome == decide.None:
	case v.Outcome == decide.Allowlisted, v.Outcome == decide.FailedOpen, v.Outcome == decide.FailedClosed:
		d.decided(v.Outcome, nil)
	case v.Act == decide.Serve && v.Result.Delay > 0: // recorded by hold
	default:
		d.decided(v.Outcome, &v.Result)
	}
}

func (d *AccessRecord) caller(class decide.Class, id string) {
	if d == nil {
		return
	}
	d.Class, d.Identity = class.String(), id
}

func (d *AccessRecord) decided(o decide.Outcome, res *sluice.Result) {
	if d == nil {
		return
	}
	d.Outcome = o.String()
	if res != nil {
		d.DecidedBy = res.DecidedBy.String()
	}
}
