package httplimit

import (
	"context"
	"net/http"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/decide"
)

// Decision is what the limiter did with one request, for an access log. Put
// one in the request's context with WithDecision before the Limiter's
// Handler; it is filled in as the request is decided, and read once the
// handler returns. It names no credential: an authenticated caller appears
// as the identity its Authenticator returned.
type Decision struct {
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

type decisionKey struct{}

// WithDecision returns ctx carrying d, for the limiter to fill in.
func WithDecision(ctx context.Context, d *Decision) context.Context {
	return context.WithValue(ctx, decisionKey{}, d)
}

// decisionFrom returns the Decision of a request's context, or nil; the
// methods below do nothing on nil.
func decisionFrom(ctx context.Context) *Decision {
	d, _ := ctx.Value(decisionKey{}).(*Decision)
	return d
}

func (d *Decision) matched(r *http.Request, p *policy) {
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
func (d *Decision) record(v *decide.Verdict, id string) {
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

func (d *Decision) caller(class decide.Class, id string) {
	if d == nil {
		return
	}
	d.Class, d.Identity = class.String(), id
}

func (d *Decision) decided(o decide.Outcome, res *sluice.Result) {
	if d == nil {
		return
	}
	d.Outcome = o.String()
	if res != nil {
		d.DecidedBy = res.DecidedBy.String()
	}
}
