package sluice

import (
	"errors"
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
	for in, want := range map[string]string{"10/s": "10/s", "600/m": "10/s", "1/m": "1/m", "10000/d": "10000/d", "0.5/s": "30/m", "0.3/s": "18/m", "1/7s": "0.14285714285714285/s"} {
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
