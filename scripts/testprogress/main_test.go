package main

import (
	"strings"
	"testing"
	"time"
)

// The output a person sees: a passing test is quiet, a failing one shows
// all it printed, a panic's output is printed with its package's FAIL,
// and the closing line counts top-level tests.
func TestWhatIsPrinted(t *testing.T) {
	var out strings.Builder
	r := &run{out: &out, started: map[string]time.Time{}, current: map[string]string{}, output: map[string][]string{}}
	for _, e := range []event{
		{Action: "start", Package: "p"},
		{Action: "run", Package: "p", Test: "TestA"},
		{Action: "output", Package: "p", Test: "TestA", Output: "quiet line\n"},
		{Action: "pass", Package: "p", Test: "TestA"},
		{Action: "run", Package: "p", Test: "TestB"},
		{Action: "output", Package: "p", Test: "TestB/sub", Output: "why B failed\n"},
		{Action: "fail", Package: "p", Test: "TestB/sub"},
		{Action: "fail", Package: "p", Test: "TestB"},
		{Action: "run", Package: "p", Test: "TestC"},
		{Action: "output", Package: "p", Test: "TestC", Output: "panic: C\n"},
		{Action: "output", Package: "p", Output: "FAIL\tp\t0.1s\n"},
		{Action: "fail", Package: "p"},
		{Action: "build-output", Output: "q.go:1: undefined: x\n"},
		{Action: "build-fail"},
	} {
		r.handle(e)
	}
	got := out.String()
	for _, want := range []string{"why B failed", "panic: C", "FAIL\tp", "undefined: x"} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "quiet line") {
		t.Errorf("a passing test's output was printed:\n%s", got)
	}
	if !r.failed || r.counts != [3]int{1, 1, 0} {
		t.Errorf("failed %v, counts %v; want true and [1 1 0]", r.failed, r.counts)
	}
}
