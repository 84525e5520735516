package decide

import "github.com/sluicehq/sluice"

// Outcome is a decision as sluice_decisions_total counts it.
type Outcome uint8

const (
	Allowed      Outcome = iota // the store's bucket allowed
	Denied                      // the store's bucket denied
	ShadowDenied                // a shadow policy would have denied; served
	Delayed                     // allowed after a delay (paced)
	Cancelled                   // paced, but the caller left while held
	FailedOpen                  // the store failed; served (on_error open)
	FailedClosed                // the store failed; refused (on_error closed)
	CacheDenied                 // denied by a remembered denial of the store
	LocalAllowed                // an in-process bucket allowed, the store failing
	LocalDenied                 // an in-process bucket denied, the store failing
	numCounted

	// Allowlisted: the caller is on the allowlist; nothing is counted.
	Allowlisted = numCounted
	// None: nothing was decided (invalid input) or counted.
	None = numCounted + 1
)

var outcomeNames = [...]string{"allowed", "denied", "shadow_denied", "delayed", "cancelled", "failed_open", "failed_closed",
	"cache_denied", "local_allowed", "local_denied", "allowlisted", ""}

// String is the outcome label of sluice_decisions_total ("allowed",
// "shadow_denied", …), "allowlisted", or "" for None.
func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return ""
}

// Counted reports whether sluice_decisions_total counts o.
func (o Outcome) Counted() bool { return o < numCounted }

// OutcomeOf is the outcome a result is counted under: what decided it
// when that was not the store's bucket, else allowed, delayed or denied.
func OutcomeOf(res sluice.Result) Outcome {
	switch res.DecidedBy {
	case sluice.ByOpen:
		return FailedOpen
	case sluice.ByLocal:
		if res.Allowed {
			return LocalAllowed
		}
		return LocalDenied
	case sluice.ByDenialCache:
		if !res.Allowed {
			return CacheDenied
		}
	}
	switch {
	case !res.Allowed:
		return Denied
	case res.Delay > 0:
		return Delayed
	}
	return Allowed
}
