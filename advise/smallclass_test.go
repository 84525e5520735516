package advise

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/loggen"
)

// classWith returns the one class of rep whose match contains match.
func classWith(t *testing.T, rep *Report, match string) ClassReport {
	t.Helper()
	for _, c := range rep.Classes {
		if strings.Contains(c.Match, match) {
			return c
		}
	}
	t.Fatalf("no class matching %q in %+v", match, rep.Classes)
	return ClassReport{}
}

// TestFewHeavyCallersDoNotSetTheRate stands for the three real logs of
// issue #27 (item 3) where three addresses at 5× the normal peak, below
// the outlier rule, raised the proposed rate 5×: a class of 40 callers
// whose busiest minutes are 2 to 6 requests, and three at 30. The rate
// stays within what the ordinary callers need.
func TestFewHeavyCallersDoNotSetTheRate(t *testing.T) {
	t.Parallel()
	var evs []loggen.Event
	normalPeak := 0
	for i := range 40 {
		ip := fmt.Sprintf("10.4.0.%d", i)
		n := 2 + i%5
		normalPeak = max(normalPeak, n)
		for m := range 10 {
			for j := range n {
				evs = append(evs, ev(t0+int64(m*60+j*7+i%5), "GET", "/api/items", ip, ""))
			}
		}
	}
	for i := range 3 {
		ip := fmt.Sprintf("203.0.113.%d", i)
		for m := range 10 {
			for j := range 5 * normalPeak {
				evs = append(evs, ev(t0+int64(m*60+j*2), "GET", "/api/items", ip, ""))
			}
		}
	}
	rep, err := Run(Options{Inputs: []string{writeEvents(t, "heavy3.log", evs)}, MaxClasses: 10, NoReplay: true})
	if err != nil {
		t.Fatal(err)
	}
	c := classWith(t, rep, "/api/items")
	if c.Keys.Normal != 43 {
		t.Fatalf("%d callers sizing the proposal, want the 43 (the three heavy ones are below the outlier rule): %+v", c.Keys.Normal, c.Keys)
	}
	if limit := 2 * float64(normalPeak) / 60; c.Proposal.Rate > limit {
		t.Errorf("three heavy callers set the rate: %s (%v/s), the ordinary callers' rule gives at most %v/s", c.Rate, c.Proposal.Rate, limit)
	}
	if c.Keys.FewCallers {
		t.Errorf("43 callers flagged as few")
	}
}

// TestBruteForcersDoNotSetTheLoginLimit stands for the Joomla site under
// brute force of issue #27 (item 3): ten administrators log in a few
// times a minute at most; two brute-forcers try 40 passwords a minute,
// answered 200 (the login page shows the form again), so no error rule
// sets them apart and, among ten callers, neither does the outlier rule.
// The proposed rate follows the administrators, and the class is flagged
// as sized on few callers.
func TestBruteForcersDoNotSetTheLoginLimit(t *testing.T) {
	t.Parallel()
	var admins []loggen.Event
	for i := range 10 {
		ip := fmt.Sprintf("192.0.2.%d", 10+i)
		for d := range 5 {
			for j := range 1 + i%3 {
				admins = append(admins, ev(t0+int64(d*3600+i*60+j*5), "POST", "/administrator/index.php", ip, ""))
			}
		}
	}
	evs := slices.Clone(admins)
	for i := range 2 {
		ip := fmt.Sprintf("198.51.100.%d", i)
		for m := range 60 {
			for j := range 40 {
				evs = append(evs, ev(t0+int64(m*60+j), "POST", "/administrator/index.php", ip, ""))
			}
		}
	}
	rep, err := Run(Options{Inputs: []string{writeEvents(t, "bruteforce.log", evs)}, MaxClasses: 10})
	if err != nil {
		t.Fatal(err)
	}
	c := classWith(t, rep, "/administrator/")
	if c.Keys.Normal != 12 || c.Keys.SetApart != 0 {
		t.Fatalf("keys %+v: want all 12 sizing the proposal (the brute-forcers are below the rules that set callers apart)", c.Keys)
	}
	if c.Proposal.Rate > 2*3.0/60 {
		t.Errorf("the brute-forcers set the login limit: %s (%v/s); the administrators' busiest minute is 3", c.Rate, c.Proposal.Rate)
	}
	if c.Replay == nil || c.Replay.RejectedKeys != 2 {
		t.Errorf("replay %+v: want the two brute-forcers limited, and no administrator", c.Replay)
	}
	few, err := Run(Options{Inputs: []string{writeEvents(t, "few.log", admins)}, MaxClasses: 10, NoReplay: true})
	if err != nil {
		t.Fatal(err)
	}
	if fc := classWith(t, few, "/administrator/"); !fc.Keys.FewCallers || fc.Keys.Normal != 10 {
		t.Errorf("a class of %d callers not flagged as few: %+v", fc.Keys.Normal, fc.Keys)
	}
}
