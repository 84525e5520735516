package sluice_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// TestZeroLimiterAnswers: like a zero rate.Limiter, a zero sluice.Limiter
// (no Store, no Key, no Rules) answers false or an error and never panics.
func TestZeroLimiterAnswers(t *testing.T) {
	ctx := context.Background()
	rule, err := sluice.NewRule("10/s", 5)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range []sluice.Limiter{{}, {Key: "k", Rules: []sluice.Rule{rule}}} {
		noPanic(t, "Allow", func() {
			if l.Allow() {
				t.Error("Allow without a Store: true, want false")
			}
		})
		noPanic(t, "AllowN", func() {
			if ok, err := l.AllowN(ctx, 1); ok || !errors.Is(err, sluice.ErrInvalid) {
				t.Errorf("AllowN without a Store = %v, %v; want false and ErrInvalid", ok, err)
			}
		})
		noPanic(t, "Wait", func() {
			if err := l.Wait(ctx); !errors.Is(err, sluice.ErrInvalid) {
				t.Errorf("Wait without a Store = %v, want ErrInvalid", err)
			}
		})
		noPanic(t, "WaitN", func() {
			if err := l.WaitN(ctx, 2); !errors.Is(err, sluice.ErrInvalid) {
				t.Errorf("WaitN without a Store = %v, want ErrInvalid", err)
			}
		})
	}
}

// TestBucketMathWithoutBuckets: the exported bucket math given no rules, or
// fewer buckets than rules, answers (a denial, or a missing bucket counted
// full) instead of indexing past the end.
func TestBucketMathWithoutBuckets(t *testing.T) {
	rule, err := sluice.NewRule("10/s", 5)
	if err != nil {
		t.Fatal(err)
	}
	one, two := []sluice.Rule{rule}, []sluice.Rule{rule, rule}
	const now = int64(1_000_000)
	for _, c := range []struct {
		name    string
		buckets []sluice.Bucket
		rules   []sluice.Rule
	}{
		{"no rules", nil, nil},
		{"no buckets", nil, one},
		{"one bucket for two rules", []sluice.Bucket{sluice.FullBucket(rule, now)}, two},
	} {
		noPanic(t, "Decide "+c.name, func() {
			if res := sluice.Decide(c.buckets, c.rules, now, 1, 0); res != (sluice.Result{}) {
				t.Errorf("Decide %s = %+v, want the zero Result (denied)", c.name, res)
			}
		})
		noPanic(t, "AdjustBuckets "+c.name, func() {
			if res := sluice.AdjustBuckets(c.buckets, c.rules, now, 1); res != (sluice.Result{}) {
				t.Errorf("AdjustBuckets %s = %+v, want the zero Result", c.name, res)
			}
		})
		noPanic(t, "ExpiryAfter "+c.name, func() {
			if got := sluice.ExpiryAfter(c.buckets, c.rules, now, time.Second); got != time.Second {
				t.Errorf("ExpiryAfter %s = %v, want the margin alone (missing buckets are full)", c.name, got)
			}
		})
		noPanic(t, "InspectBuckets "+c.name, func() {
			got := sluice.InspectBuckets(c.buckets, c.rules, now)
			if len(got) != len(c.rules) {
				t.Fatalf("InspectBuckets %s: %d results, want %d", c.name, len(got), len(c.rules))
			}
			for i, res := range got {
				if !res.Allowed || res.Remaining != rule.Burst || res.ResetAfter != 0 || res.Rule != i {
					t.Errorf("InspectBuckets %s [%d] = %+v, want a full bucket", c.name, i, res)
				}
			}
		})
	}
}

// TestZeroValuesOfTypes: the zero (and out-of-range) values of the root
// package's types answer every exported method without a panic.
func TestZeroValuesOfTypes(t *testing.T) {
	var r sluice.Rule
	noPanic(t, "Rule", func() {
		if err := r.Validate(); !errors.Is(err, sluice.ErrInvalid) {
			t.Errorf("zero Rule Validate = %v, want ErrInvalid", err)
		}
		_, _ = r.String(), r.RefillTime()
		r.Window(time.Unix(0, 0))
		sluice.FullBucket(r, 0)
		sluice.Decide(make([]sluice.Bucket, 1), []sluice.Rule{r}, 0, 1, 0)
	})
	noPanic(t, "Period and DecidedBy", func() {
		_, _ = sluice.Period(200).String(), sluice.Period(200).Nominal()
		_ = sluice.DecidedBy(200).String()
	})
	noPanic(t, "validation of zero input", func() {
		if err := sluice.ValidateRequest(sluice.Request{}); !errors.Is(err, sluice.ErrInvalid) {
			t.Errorf("ValidateRequest(Request{}) = %v, want ErrInvalid", err)
		}
		if err := sluice.ValidateAdjust("", nil); !errors.Is(err, sluice.ErrInvalid) {
			t.Errorf("ValidateAdjust zero = %v, want ErrInvalid", err)
		}
	})
}

func noPanic(t *testing.T, what string, f func()) {
	t.Helper()
	defer func() {
		if p := recover(); p != nil {
			t.Errorf("%s panics: %v", what, p)
		}
	}()
	f()
}
