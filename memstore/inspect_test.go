package memstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

// TestInspectIsWhatTheNextCheckSees: after any history, Inspect's
// standing on each rule is what a check of that rule alone sees next (its
// remaining one more than the check leaves), and reading it a thousand
// times takes nothing: the whole burst still passes afterwards.
func TestInspectIsWhatTheNextCheckSees(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	s := memstore.New(memstore.Options{SweepInterval: -1, Now: func() time.Time { return now }})
	defer s.Close()
	ctx := context.Background()
	rules := []sluice.Rule{{Rate: 1, Burst: 10}, {Rate: 100.0 / 3600, Burst: 100}}
	for range 7 {
		if _, err := s.Check(ctx, sluice.Request{Key: "k", Cost: 1, Rules: rules}); err != nil {
			t.Fatal(err)
		}
	}
	now = now.Add(2500 * time.Millisecond)
	got, err := s.Inspect(ctx, sluice.Request{Key: "k", Rules: rules})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Remaining != 5 || got[1].Remaining != 93 || got[0].Limit != 10 || got[1].Limit != 100 {
		t.Fatalf("Inspect = %+v, want remaining 5 of 10 and 93 of 100", got)
	}
	if got[0].ResetAfter != 4500*time.Millisecond {
		t.Errorf("rule 0 resets after %v, want 4.5s (5.5 of 10 tokens at 1/s)", got[0].ResetAfter)
	}
	for range 1000 {
		if _, err := s.Inspect(ctx, sluice.Request{Key: "k", Rules: rules}); err != nil {
			t.Fatal(err)
		}
	}
	res, err := s.Check(ctx, sluice.Request{Key: "k", Cost: 1, Rules: rules})
	if err != nil {
		t.Fatal(err)
	}
	if res.Rule != 0 || res.Remaining != got[0].Remaining-1 {
		t.Errorf("next check: rule %d remaining %d, want rule 0 remaining %d", res.Rule, res.Remaining, got[0].Remaining-1)
	}
	// Only the refill counts: drain what Inspect reported, then the next
	// check is denied.
	for i := int64(1); i < got[0].Remaining; i++ {
		if res, _ := s.Check(ctx, sluice.Request{Key: "k", Cost: 1, Rules: rules}); !res.Allowed {
			t.Fatalf("check %d denied: Inspect reported %d remaining", i, got[0].Remaining)
		}
	}
	if res, _ := s.Check(ctx, sluice.Request{Key: "k", Cost: 1, Rules: rules}); res.Allowed {
		t.Errorf("a check past what Inspect reported passed")
	}
	after, _ := s.Inspect(ctx, sluice.Request{Key: "k", Rules: rules})
	if after[0].Allowed || after[0].RetryAfter <= 0 {
		t.Errorf("an empty bucket inspects as %+v, want not allowed with a retry time", after[0])
	}
}

// TestInspectCreatesNothing: a key never checked is full, and inspecting
// it stores no state.
func TestInspectCreatesNothing(t *testing.T) {
	s := memstore.New(memstore.Options{SweepInterval: -1})
	defer s.Close()
	rules := []sluice.Rule{{Rate: 1, Burst: 3}}
	got, err := s.Inspect(context.Background(), sluice.Request{Key: "nobody", Rules: rules})
	if err != nil {
		t.Fatal(err)
	}
	if got[0].Remaining != 3 || !got[0].Allowed || got[0].ResetAfter != 0 {
		t.Errorf("a new key inspects as %+v, want a full bucket of 3", got[0])
	}
	if n := s.Len(); n != 0 {
		t.Errorf("Inspect stored %d keys, want none", n)
	}
	if _, err := s.Inspect(context.Background(), sluice.Request{Key: "", Rules: rules}); err == nil {
		t.Error("Inspect of an empty key: no error")
	}
}

// TestInspectEvictedKey: a key evicted at the cap inspects as the check
// that brings it back finds it, never fuller.
func TestInspectEvictedKey(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	s := memstore.New(memstore.Options{Shards: 1, MaxKeys: 8, SweepInterval: -1, Now: func() time.Time { return now }})
	defer s.Close()
	ctx := context.Background()
	rules := []sluice.Rule{{Rate: 0.001, Burst: 5}}
	for range 5 {
		s.Check(ctx, sluice.Request{Key: "spent", Cost: 1, Rules: rules})
	}
	for i := range 64 {
		s.Check(ctx, sluice.Request{Key: string(rune('a' + i)), Cost: 1, Rules: rules})
	}
	got, _ := s.Inspect(ctx, sluice.Request{Key: "spent", Rules: rules})
	res, _ := s.Check(ctx, sluice.Request{Key: "spent", Cost: 0, Rules: rules})
	if got[0].Remaining != res.Remaining {
		t.Errorf("evicted key: Inspect says %d remaining, the next check %d", got[0].Remaining, res.Remaining)
	}
	if got[0].Remaining != 0 {
		t.Errorf("evicted key that spent everything inspects with %d remaining, want 0", got[0].Remaining)
	}
}
