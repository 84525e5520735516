package advise

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/loggen"
)

// abuseEvents writes ordinary callers of GET /products/{id} over ten
// minutes: 300 IPs, each a few requests a minute with an occasional burst
// of 2 to 4 in one second. With abusers set, it adds a flood (20/s for 5
// minutes, all answered 200), a scanner (2/s of 404s), a broken client
// (1/s of 500s) and a caller already throttled upstream (1/s, a third 429).
func abuseEvents(abusers bool) []loggen.Event {
	rng := rand.New(rand.NewPCG(7, 7))
	var evs []loggen.Event
	for i := range 300 {
		ip := fmt.Sprintf("10.1.%d.%d", i/200, i%200)
		perMinute := 1 + rng.IntN(6)
		for m := range 10 {
			for range perMinute {
				sec := t0 + int64(m*60+rng.IntN(60))
				n := 1
				if rng.IntN(10) == 0 {
					n = 2 + rng.IntN(3)
				}
				for range n {
					evs = append(evs, ev(sec, "GET", fmt.Sprintf("/products/%d", rng.IntN(1000)), ip, ""))
				}
			}
		}
	}
	if !abusers {
		return evs
	}
	for s := range int64(300) {
		for range 20 {
			evs = append(evs, ev(t0+60+s, "GET", "/products/1", "203.0.113.66", ""))
		}
		for k := range 2 {
			e := ev(t0+s, "GET", fmt.Sprintf("/products/%d", 5000+2*s+int64(k)), "198.51.100.7", "")
			e.Status = 404
			evs = append(evs, e)
		}
		e := ev(t0+s, "GET", "/products/2", "192.0.2.50", "")
		e.Status = 500
		evs = append(evs, e)
		e = ev(t0+s, "GET", "/products/3", "192.0.2.77", "")
		if s%3 == 0 {
			e.Status = 429
		}
		evs = append(evs, e)
	}
	return evs
}

// TestAbusersDoNotSetTheLimit: the proposal on a log with a flood, a
// scanner, a broken client and a throttled caller among ordinary callers
// is the proposal on the ordinary callers alone, and the four are listed
// as keys it would limit, each with its reason.
func TestAbusersDoNotSetTheLimit(t *testing.T) {
	clean, err := Run(Options{Inputs: []string{writeEvents(t, "clean.log", abuseEvents(false))}, MaxClasses: 10, Top: 5, MinBurst: 2})
	if err != nil {
		t.Fatal(err)
	}
	dirty, err := Run(Options{Inputs: []string{writeEvents(t, "dirty.log", abuseEvents(true))}, MaxClasses: 10, Top: 20, MinBurst: 2})
	if err != nil {
		t.Fatal(err)
	}
	c := findClass(t, clean, "GET /products/{id}", "anonymous")
	d := findClass(t, dirty, "GET /products/{id}", "anonymous")
	if c.Proposal != d.Proposal || c.Rate != d.Rate {
		t.Errorf("with abusers: %s burst %d %+v; without: %s burst %d %+v", d.Rate, d.Proposal.Burst, d.Keys, c.Rate, c.Proposal.Burst, c.Keys)
	}
	if d.Keys.Keys != 304 || d.Keys.Normal != 300 || d.Keys.SetApart != 4 || c.Keys.SetApart != 0 {
		t.Errorf("keys %+v (clean %+v), want 304 keys, 300 normal, 4 set apart", d.Keys, c.Keys)
	}
	want := map[string]string{"203.0.113.66": reasonOutlier, "198.51.100.7": reasonErrors, "192.0.2.50": reasonErrors, "192.0.2.77": reasonDenied}
	for _, k := range d.Keys.WouldLimit {
		if want[k.Key] != k.Reason {
			t.Errorf("%s set apart for %s, want %q", k.Key, k.Reason, want[k.Key])
		}
		delete(want, k.Key)
	}
	if len(want) > 0 {
		t.Errorf("not set apart: %v", want)
	}
	if !slices.IsSortedFunc(d.Keys.WouldLimit, func(a, b LimitedKey) int { return int(b.Requests) - int(a.Requests) }) {
		t.Errorf("would-limit list not by requests: %+v", d.Keys.WouldLimit)
	}
	// by the documented definition, on the ordinary callers alone: the rate
	// from their busiest minutes, the burst from their needs at it
	byKey := map[string][]int64{}
	for _, e := range abuseEvents(false) {
		byKey[e.IP] = append(byKey[e.IP], e.Time)
	}
	rate, burst, window := proposalByDefinition(byKey, 2)
	if d.Proposal.Rate != rate || d.Proposal.Burst != burst || d.Proposal.BurstWindow != window {
		t.Errorf("proposed %v/s burst %d (%s); by the definition %v/s burst %d (%s)", d.Proposal.Rate, d.Proposal.Burst, d.Proposal.BurstWindow, rate, burst, window)
	}
	// the replay rejects the abusers, and at most 1% of the ordinary keys
	// (the p99 of their needs sizes the burst)
	rejected := map[string]bool{}
	for _, k := range d.Replay.Top {
		rejected[k.Key] = true
	}
	for _, k := range []string{"203.0.113.66", "198.51.100.7", "192.0.2.50", "192.0.2.77"} {
		if !rejected[k] {
			t.Errorf("the replay did not reject abuser %s: rejected %+v", k, d.Replay.Top)
		}
	}
	if d.Replay.RejectedKeys > 4+len(byKey)/100 || c.Replay.RejectedKeys > len(byKey)/100 {
		t.Errorf("the replay rejected %d keys (%d without the abusers), want the 4 abusers and at most %d of the %d ordinary keys", d.Replay.RejectedKeys, c.Replay.RejectedKeys, len(byKey)/100, len(byKey))
	}
	if len(d.Replay.Top) < 4 || d.Replay.Top[3].Key[:3] == "10." {
		t.Errorf("the keys hit hardest %+v: want the abusers first", d.Replay.Top)
	}
	// with --keep-abusers the flood sizes the rate
	k, err := Run(Options{Inputs: []string{writeEvents(t, "dirty3.log", abuseEvents(true))}, MaxClasses: 10, KeepAbusers: true, NoReplay: true})
	if err != nil {
		t.Fatal(err)
	}
	if kc := findClass(t, k, "GET /products/{id}", "anonymous"); kc.Keys.SetApart != 0 || kc.Keys.Normal != 304 || kc.Proposal.Rate <= d.Proposal.Rate {
		t.Errorf("--keep-abusers: %s %+v, want every key sizing a higher rate than %s", kc.Rate, kc.Keys, d.Rate)
	}
	// the seed's reading, for contrast: there the flood sets the rate
	s, err := Run(Options{Inputs: []string{writeEvents(t, "dirty2.log", abuseEvents(true))}, MaxClasses: 10, Statistic: "samples", NoReplay: true})
	if err != nil {
		t.Fatal(err)
	}
	if sp := findClass(t, s, "GET /products/{id}", "anonymous").Proposal; sp.Rate < 40 {
		t.Errorf("samples reading: rate %v; the flood's 20/s second was expected to set it", sp.Rate)
	}
}

// TestManyKeysBounded: past maxKeySums (lowered here), new callers share
// one summary that sizes nothing, and the report says how many requests
// that left out of the per-key proposal; the distributions still count
// every request.
func TestManyKeysBounded(t *testing.T) {
	old := maxKeySums
	maxKeySums = 100
	defer func() { maxKeySums = old }()
	var evs []loggen.Event
	for i := range 1000 { // forged addresses, one request each
		evs = append(evs, ev(t0+int64(i%50), "GET", "/x", fmt.Sprintf("10.9.%d.%d", i/250, i%250), ""))
	}
	rep, err := Run(Options{Inputs: []string{writeEvents(t, "many.log", evs)}, MaxClasses: 10})
	if err != nil {
		t.Fatal(err)
	}
	c := findClass(t, rep, "GET /x", "anonymous")
	if c.PerSecond.Requests != 1000 || c.Keys.Keys != 100 {
		t.Errorf("requests %d, keys summarized %d; want 1000 and 100", c.PerSecond.Requests, c.Keys.Keys)
	}
	if !slices.ContainsFunc(rep.Notes, func(n string) bool { return strings.Contains(n, "900 requests of the callers past that") }) {
		t.Errorf("notes %q", rep.Notes)
	}
}
