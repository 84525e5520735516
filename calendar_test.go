package sluice

import (
	"errors"
	"testing"
	"time"
)

func zone(t *testing.T, name string) *time.Location {
	t.Helper()
	z, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return z
}

func quota(t *testing.T, n int64, p Period, z *time.Location) Rule {
	t.Helper()
	r, err := NewQuota(n, p, z)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// Periods are calendar periods of the zone: February 2027 has 28 days, the
// days of a daylight-saving change 23 or 25 hours, weeks begin on Monday.
func TestWindow(t *testing.T) {
	berlin, newYork := zone(t, "Europe/Berlin"), zone(t, "America/New_York")
	for _, c := range []struct {
		name       string
		r          Rule
		at         time.Time
		start, end time.Time
		length     time.Duration
	}{
		{"February 2027, UTC", quota(t, 1, Month, nil), time.Date(2027, 2, 14, 12, 0, 0, 0, time.UTC),
			time.Date(2027, 2, 1, 0, 0, 0, 0, time.UTC), time.Date(2027, 3, 1, 0, 0, 0, 0, time.UTC), 28 * 24 * time.Hour},
		{"March 2027 in Berlin (loses an hour)", quota(t, 1, Month, berlin), time.Date(2027, 3, 31, 23, 59, 59, 0, berlin),
			time.Date(2027, 3, 1, 0, 0, 0, 0, berlin), time.Date(2027, 4, 1, 0, 0, 0, 0, berlin), 31*24*time.Hour - time.Hour},
		{"spring forward in Berlin", quota(t, 1, Day, berlin), time.Date(2027, 3, 28, 12, 0, 0, 0, berlin),
			time.Date(2027, 3, 28, 0, 0, 0, 0, berlin), time.Date(2027, 3, 29, 0, 0, 0, 0, berlin), 23 * time.Hour},
		{"fall back in Berlin", quota(t, 1, Day, berlin), time.Date(2027, 10, 31, 2, 30, 0, 0, berlin),
			time.Date(2027, 10, 31, 0, 0, 0, 0, berlin), time.Date(2027, 11, 1, 0, 0, 0, 0, berlin), 25 * time.Hour},
		{"fall back in New York", quota(t, 1, Day, newYork), time.Date(2027, 11, 7, 23, 0, 0, 0, newYork),
			time.Date(2027, 11, 7, 0, 0, 0, 0, newYork), time.Date(2027, 11, 8, 0, 0, 0, 0, newYork), 25 * time.Hour},
		{"a Sunday ends its ISO week", quota(t, 1, Week, nil), time.Date(2027, 2, 28, 23, 0, 0, 0, time.UTC),
			time.Date(2027, 2, 22, 0, 0, 0, 0, time.UTC), time.Date(2027, 3, 1, 0, 0, 0, 0, time.UTC), 7 * 24 * time.Hour},
		{"a Monday begins one", quota(t, 1, Week, nil), time.Date(2027, 3, 1, 0, 0, 0, 0, time.UTC),
			time.Date(2027, 3, 1, 0, 0, 0, 0, time.UTC), time.Date(2027, 3, 8, 0, 0, 0, 0, time.UTC), 7 * 24 * time.Hour},
	} {
		start, end := c.r.Window(c.at)
		if !start.Equal(c.start) || !end.Equal(c.end) || end.Sub(start) != c.length {
			t.Errorf("%s: Window(%v) = %v .. %v (%v); want %v .. %v (%v)", c.name, c.at, start, end, end.Sub(start), c.start, c.end, c.length)
		}
	}
}

// A monthly quota in Berlin is spent in February 2027 and whole again at
// midnight of 1 March in Berlin, not a microsecond before: denied until
// then with RetryAfter the time to that midnight, ResetAfter the same while
// anything is used.
func TestMonthlyQuotaResetsAtTheBoundary(t *testing.T) {
	berlin := zone(t, "Europe/Berlin")
	rules := []Rule{quota(t, 3, Month, berlin)}
	boundary := time.Date(2027, 3, 1, 0, 0, 0, 0, berlin).UnixMicro()
	b := []Bucket{FullBucket(rules[0], 0)}
	start := time.Date(2027, 2, 1, 0, 0, 0, 0, berlin).UnixMicro()
	for i, at := range []int64{start, start + 1, boundary - 1e6} {
		res := Decide(b, rules, at, 1, 0)
		if !res.Allowed || res.Remaining != int64(2-i) || res.ResetAfter != time.Duration(boundary-at)*time.Microsecond {
			t.Fatalf("use %d: %+v; want allowed, %d left, reset at the boundary", i, res, 2-i)
		}
	}
	res := Decide(b, rules, boundary-1, 1, time.Hour)
	if res.Allowed || res.Delay != 0 || res.RetryAfter != time.Microsecond || res.ResetAfter != time.Microsecond {
		t.Fatalf("a µs before the boundary: %+v; want denied (no reservation across a period), retry and reset in 1µs", res)
	}
	res = Decide(b, rules, boundary, 3, 0)
	if !res.Allowed || res.Remaining != 0 {
		t.Fatalf("at the boundary: %+v; want the whole quota of March", res)
	}
	if end := time.Date(2027, 4, 1, 0, 0, 0, 0, berlin).UnixMicro(); b[0].Last != end {
		t.Fatalf("period end %v; want midnight of 1 April in Berlin", time.UnixMicro(b[0].Last))
	}
	if res := Decide(b, rules, boundary, 0, 0); res.ResetAfter != time.Duration(31*24-1)*time.Hour {
		t.Fatalf("ResetAfter %v; want 31 days less the hour Berlin loses in March", res.ResetAfter)
	}
}

// Across the autumn change in New York, a daily quota's day is 25 hours.
func TestDailyQuotaAcrossDaylightSaving(t *testing.T) {
	ny := zone(t, "America/New_York")
	rules := []Rule{quota(t, 1, Day, ny)}
	b := []Bucket{FullBucket(rules[0], 0)}
	morning := time.Date(2027, 11, 7, 0, 30, 0, 0, ny)
	if res := Decide(b, rules, morning.UnixMicro(), 1, 0); !res.Allowed || res.ResetAfter != 24*time.Hour+30*time.Minute {
		t.Fatalf("%+v; want allowed, reset in 24h30m (a 25-hour day)", res)
	}
	// 24 hours later it is 23:30 of the same day in New York.
	if res := Decide(b, rules, morning.Add(24*time.Hour).UnixMicro(), 1, 0); res.Allowed || res.RetryAfter != 30*time.Minute {
		t.Fatalf("%+v; want denied for 30 minutes", res)
	}
	if res := Decide(b, rules, morning.Add(24*time.Hour+30*time.Minute).UnixMicro(), 1, 0); !res.Allowed {
		t.Fatalf("%+v; want the new day's quota", res)
	}
}

// A check is decided all or nothing across a per-second bucket and a
// quota: a denial by either takes nothing from the other.
func TestQuotaAllOrNothing(t *testing.T) {
	rules := []Rule{{Rate: 1, Burst: 2}, quota(t, 5, Day, nil)}
	now := time.Date(2027, 2, 28, 12, 0, 0, 0, time.UTC).UnixMicro()
	b := []Bucket{FullBucket(rules[0], now), FullBucket(rules[1], now)}
	Decide(b, rules, now, 2, 0) // the bucket empty, 3 left of the quota
	res := Decide(b, rules, now, 1, 0)
	if res.Allowed || res.Rule != 0 || b[1].Tokens != 3 {
		t.Fatalf("denied by the bucket: %+v, quota left %v; want rule 0 and the quota untouched at 3", res, b[1].Tokens)
	}
	now += 10e6 // the bucket is full again
	if res := Decide(b, rules, now, 2, 0); !res.Allowed {
		t.Fatalf("%+v", res)
	}
	now += 10e6
	res = Decide(b, rules, now, 2, 0) // 1 left of the quota
	if res.Allowed || res.Rule != 1 || b[0].Tokens != 2 {
		t.Fatalf("denied by the quota: %+v, bucket %v; want rule 1 and the bucket untouched at 2", res, b[0].Tokens)
	}
	if want := time.Date(2027, 3, 1, 0, 0, 0, 0, time.UTC).UnixMicro() - now; res.RetryAfter != time.Duration(want)*time.Microsecond {
		t.Fatalf("RetryAfter %v; want the time to midnight", res.RetryAfter)
	}
	// A reservation may wait for the bucket, never for a quota.
	if res := Decide(b, rules, now, 1, time.Hour); !res.Allowed || res.Delay != 0 {
		t.Fatalf("%+v; want allowed at once", res)
	}
	if res := Decide(b, rules, now, 1, time.Hour); res.Allowed {
		t.Fatalf("%+v; want denied: the quota is spent, the bucket alone would wait", res)
	}
}

// Adjust charges and refunds a quota; debt ends with its period.
func TestAdjustQuota(t *testing.T) {
	rules := []Rule{quota(t, 10, Day, nil)}
	now := time.Date(2027, 2, 28, 12, 0, 0, 0, time.UTC).UnixMicro()
	b := []Bucket{FullBucket(rules[0], now)}
	if res := AdjustBuckets(b, rules, now, 15); res.Allowed || b[0].Tokens != -5 {
		t.Fatalf("charge: %+v %v", res, b[0])
	}
	if res := AdjustBuckets(b, rules, now, -7); !res.Allowed || res.Remaining != 2 {
		t.Fatalf("refund: %+v", res)
	}
	if res := AdjustBuckets(b, rules, now, -100); res.Remaining != 10 || res.ResetAfter != 0 {
		t.Fatalf("a refund stops at the quota: %+v", res)
	}
	AdjustBuckets(b, rules, now, 50)
	midnight := time.Date(2027, 3, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	if res := Decide(b, rules, midnight, 10, 0); !res.Allowed {
		t.Fatalf("the next day: %+v; want its whole quota", res)
	}
}

// A clock that steps back never opens a new period, and a key with no
// state has the whole quota.
func TestQuotaClockBehind(t *testing.T) {
	rules := []Rule{quota(t, 2, Day, nil)}
	now := time.Date(2027, 3, 1, 0, 0, 1, 0, time.UTC).UnixMicro()
	b := []Bucket{FullBucket(rules[0], now)}
	Decide(b, rules, now, 2, 0)
	if res := Decide(b, rules, now-2e6, 1, 0); res.Allowed {
		t.Fatalf("clock back across midnight: %+v; want still spent", res)
	}
}

func TestQuotaValidation(t *testing.T) {
	q := quota(t, 5, Week, nil)
	if err := ValidateRequest(Request{Key: "k", Cost: 6, Rules: []Rule{q}}); !errors.Is(err, ErrCostExceedsBurst) {
		t.Errorf("cost above the quota: %v; want ErrCostExceedsBurst", err)
	}
	if err := ValidateRequest(Request{Key: "k", Cost: 5, Rules: []Rule{q}}); err != nil {
		t.Errorf("cost of the whole quota: %v", err)
	}
	for _, r := range []Rule{
		{Burst: 5, Period: Week},                       // no rate
		{Rate: 1, Burst: 5, Period: Month},             // a rate of its own
		{Rate: q.Rate, Burst: 5, Period: 9},            // no such period
		{Rate: 0, Burst: 0, Period: Day},               // no quota
		{Rate: 1e16 / 86400, Burst: 1e16, Period: Day}, // above MaxBurst
	} {
		if err := r.Validate(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: %v; want ErrInvalid", r, err)
		}
	}
	if _, err := NewQuota(MaxBurst, Month, nil); err != nil {
		t.Errorf("MaxBurst a month: %v", err)
	}
	for s, want := range map[string]Period{"100000/month": Month, " 7 / week ": Week, "1/day": Day} {
		if _, p, err := ParseQuota(s); err != nil || p != want {
			t.Errorf("ParseQuota(%q) = %v, %v; want %v", s, p, err, want)
		}
	}
	for _, s := range []string{"100000", "0/day", "1.5/day", "10/d", "10/Month", "10/fortnight", "-1/week"} {
		if _, _, err := ParseQuota(s); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseQuota(%q): %v; want ErrInvalid", s, err)
		}
	}
	if got := quota(t, 100, Month, zone(t, "Europe/Berlin")).String(); got != "100/month quota in Europe/Berlin" {
		t.Errorf("String = %q", got)
	}
}
