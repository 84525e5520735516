package sluice

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestParseRate(t *testing.T) {
	good := map[string]float64{
		"10/s": 10, "600/m": 10, "1000/h": 1000.0 / 3600, "10000/d": 10000.0 / 86400,
		"0.5/s": 0.5, " 5 / second ": 5, "100/10s": 10, "90/1m30s": 1, "2/min": 2.0 / 60,
		"1/sec": 1, "60/minute": 1, "3600/hour": 1, "86400/day": 1, "5/500ms": 10, "1/.5s": 2,
	}
	for in, want := range good {
		got, err := ParseRate(in)
		if err != nil || got != want {
			t.Errorf("ParseRate(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "10", "10/x", "0/s", "-1/s", "abc/s", "NaN/s", "Inf/s", "1/-1s", "10/0s", "1e400/s",
		"10/ms", "10/S", "10/M", "10/Sec", "10/seconds", "10/hr", "10/", "10/+1s", "10/0"} {
		_, err := ParseRate(in)
		// Every error states the whole grammar.
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "want COUNT/UNIT") || !strings.Contains(err.Error(), rateUnitGrammar) {
			t.Errorf("ParseRate(%q) = %v; want an ErrInvalid that says what is valid", in, err)
		}
	}
}

func TestFormatRateReadsBack(t *testing.T) {
	for in, want := range map[string]string{"10/s": "10/s", "600/m": "10/s", "1/m": "1/m", "10000/d": "10000/d", "0.5/s": "30/m", "0.3/s": "18/m", "1/7s": "1/7s", "62/m": "62/m", "125/m": "125/m", "20.46/m": "20.46/m", "3/7s": "3/7s", "1/86400s": "1/d", "0.001/s": "3.6/h", "1/8784h": "1/8784h", "1/100000s": "1/100000s"} {
		r, err := ParseRate(in)
		if err != nil {
			t.Fatal(err)
		}
		got := FormatRate(r)
		if got != want {
			t.Errorf("FormatRate(%s) = %q, want %q", in, got, want)
		}
		if back, err := ParseRate(got); err != nil || back != r {
			t.Errorf("ParseRate(FormatRate(%s)) = %v, %v; want %v", in, back, err, r)
		}
	}
}

// TestFormatRateEveryProposal writes every rate the advisor can propose
// (a whole number per minute from its busiest-minute rule, per second from
// --statistic samples, per hour and per day for slow classes, and those
// times the what-if factors) and reads it back: a whole count in the
// smallest unit that makes it whole, never a float, and exactly the rate.
func TestFormatRateEveryProposal(t *testing.T) {
	units := []struct {
		name    string
		seconds float64
		max     int
	}{{"s", 1, 100000}, {"m", 60, 100000}, {"h", 3600, 200000}, {"d", 86400, 200000}}
	for ui, u := range units {
		for n := 1; n <= u.max; n++ {
			r := float64(n) / u.seconds
			want := strconv.Itoa(n) + "/" + u.name
			// A smaller unit that makes the count whole comes first: 120/m is 2/s.
			for _, v := range units[:ui] {
				if m := float64(n) * v.seconds / u.seconds; m == math.Trunc(m) {
					want = strconv.FormatFloat(m, 'f', -1, 64) + "/" + v.name
					break
				}
			}
			got := FormatRate(r)
			if got != want {
				t.Fatalf("FormatRate(%d/%s) = %q, want %q", n, u.name, got, want)
			}
			if back, err := ParseRate(got); err != nil || back != r {
				t.Fatalf("ParseRate(%q) = %v, %v; want exactly %v (%d/%s)", got, back, err, r, n, u.name)
			}
		}
	}
	// The what-if replays scale a proposal (a whole n/m) by a factor; the
	// rate written is the whole or short decimal one meant, within noise.
	for n := 1; n <= 6000; n++ {
		for _, f := range []float64{0.5, 2, 0.25, 0.1, 3, 10} {
			r := float64(n) / 60 * f
			got := FormatRate(r)
			count, _, _ := strings.Cut(got, "/")
			if len(count) > 12 || strings.ContainsAny(count, "eE") {
				t.Fatalf("FormatRate(%d/m × %v) = %q, want a count a person writes", n, f, got)
			}
			back, err := ParseRate(got)
			if err != nil || math.Abs(back-r) > 1e-9*r {
				t.Fatalf("ParseRate(FormatRate(%d/m × %v)) = %v, %v; want %v", n, f, back, err, r)
			}
		}
	}
}

func TestNewRule(t *testing.T) {
	r, err := NewRule("20/s", 100)
	if err != nil || r != (Rule{Rate: 20, Burst: 100}) {
		t.Fatalf("NewRule = %v, %v", r, err)
	}
	if r.RefillTime() != 5*time.Second || r.String() != "20/s burst 100" {
		t.Fatalf("RefillTime %v, String %q", r.RefillTime(), r.String())
	}
	if _, err := NewRule("20/s", 0); !errors.Is(err, ErrInvalid) {
		t.Fatalf("burst 0: %v", err)
	}
}
