package sluice

import (
	"context"
	"errors"
	"time"
)

// ErrNotInspectable reports a store that cannot read a key's buckets
// without changing them: it does not implement Inspector.
var ErrNotInspectable = errors.New("sluice: the store cannot report usage without consuming")

// Inspector is a Store that can report a key's standing on every rule
// without taking a token or recording anything: for dashboards, billing
// and the admin API. memstore and redisstore implement it.
type Inspector interface {
	// Inspect returns one Result per rule, in the order of req.Rules: the
	// standing of req.Key's bucket of that rule now, as a check of one token
	// against that rule alone would see it (Rule is the index, Limit the
	// burst, Remaining the whole tokens left, ResetAfter the time until
	// the bucket is full, and, when no whole token is left, Allowed false
	// and RetryAfter the time until one is). It changes no state. The
	// error wraps ErrInvalid for bad input, or is the store's own failure.
	// It reads the request's Key, Rules and Algorithm, nothing else.
	Inspect(ctx context.Context, req Request) ([]Result, error)
}

// InspectBuckets returns the standing of buckets under rules at now, in
// Unix microseconds, one Result per rule as Inspector.Inspect reports it,
// without changing buckets: the one definition every store's Inspect
// shares. A rule with no bucket (buckets shorter than rules) is reported
// full, as a key with no state is.
func InspectBuckets(buckets []Bucket, rules []Rule, now int64) []Result {
	out := make([]Result, len(rules))
	for i, r := range rules {
		b := FullBucket(r, now)
		if i < len(buckets) {
			b = buckets[i]
		}
		tokens := refill(b, r, now)
		res := Result{Allowed: tokens+tolerance >= 1, Rule: i, Limit: r.Burst, Remaining: remaining(tokens)}
		if !res.Allowed {
			res.RetryAfter = time.Duration(micros((1-tokens)/r.Rate)) * time.Microsecond
		}
		res.ResetAfter = time.Duration(micros((float64(r.Burst)-tokens)/r.Rate)) * time.Microsecond
		out[i] = res
	}
	return out
}
