package httplimit

import (
	"context"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/decide"
)

// Overrides are rules of single identities that change while the Limiter
// runs (the gateway's admin API sets them): decide.Overrides, which
// documents them. The zero value holds none and is ready to use.
type Overrides = decide.Overrides

// Usage is an identity's standing under one policy.
type Usage = decide.Usage

// ValidateRules reports whether rules may be an override of the named
// policy: decide.Core.ValidateRules.
func (l *Limiter) ValidateRules(policyName string, rules []sluice.Rule) error {
	return l.core.ValidateRules(policyName, rules)
}

// Usage reports the standing of an authenticated caller on every rule of
// the named policy, taking nothing: decide.Core.Usage.
func (l *Limiter) Usage(ctx context.Context, policyName string, caller Caller) (Usage, error) {
	return l.core.Usage(ctx, policyName, caller)
}

// Reset fills every bucket of identity under the named policy:
// decide.Core.Reset.
func (l *Limiter) Reset(ctx context.Context, policyName, identity string) error {
	return l.core.Reset(ctx, policyName, identity)
}
