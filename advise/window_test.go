package advise

import (
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/loggen"
)

// longLogEvents stands for the 9-day WordPress log of issue #27: a log
// longer than the window. Steady callers send every day, busier on the
// first two days (outside a 7-day window) than after; occasional callers
// come on day 0 and again on day 5 only, so that their first request is
// before the window's start and their others inside it.
func longLogEvents() []loggen.Event {
	var evs []loggen.Event
	for i := range 40 {
		ip := fmt.Sprintf("10.2.0.%d", i)
		for d := range 9 {
			n := 2 + i%7 + d%3
			if d < 2 {
				n *= 4
			}
			sec := t0 + int64(d*86400+(i*97)%86000)
			for j := range n {
				evs = append(evs, ev(sec+int64(j%50), "GET", "/blog/"+fmt.Sprint(j), ip, ""))
			}
			// and a few more later the same day
			for j := range 3 {
				evs = append(evs, ev(sec+3600+int64(j*400), "GET", "/blog/a", ip, ""))
			}
		}
	}
	for i := range 25 {
		ip := fmt.Sprintf("10.3.0.%d", i)
		for _, d := range []int{0, 5} {
			sec := t0 + int64(d*86400+7200+i*300)
			for j := range 5 + i%4 {
				evs = append(evs, ev(sec+int64(j), "GET", "/blog/b", ip, ""))
			}
		}
	}
	return evs
}

// windowRecompute is an independent reading of the documented rule on the
// events inside [start, end): callers, requests per caller, and the rate
// (2 × the busiest minute of the documented caller rank, per second).
func windowRecompute(evs []loggen.Event, start, end int64) (callers int, requests map[string]uint32, rate float64) {
	requests = map[string]uint32{}
	perMin := map[string]map[int64]uint32{}
	for _, e := range evs {
		sec := e.Time / 1e6
		if sec < start || sec >= end {
			continue
		}
		requests[e.IP]++
		if perMin[e.IP] == nil {
			perMin[e.IP] = map[int64]uint32{}
		}
		perMin[e.IP][sec/60]++
	}
	var peaks []uint32
	for _, ms := range perMin {
		var top uint32
		for _, n := range ms {
			top = max(top, n)
		}
		peaks = append(peaks, top)
	}
	slices.Sort(peaks)
	n := len(peaks)
	rank := rankOf(n)
	return n, requests, 2 * float64(peaks[rank-1]) / 60
}

// TestWindowPerCaller: on a log longer than the window, the callers
// counted, each caller's requests and the proposed rate are those of the
// window the report states, with the classes from the paths and with
// them from a configuration (issue #27, item 2).
func TestWindowPerCaller(t *testing.T) {
	t.Parallel()
	evs := longLogEvents()
	path := writeEvents(t, "long.log", evs)
	cfg := filepath.Join(t.TempDir(), "sluice.yaml")
	for _, window := range []time.Duration{7 * 24 * time.Hour, 48 * time.Hour} {
		for _, withConfig := range []bool{false, true} {
			o := Options{Inputs: []string{path}, Window: window, MaxClasses: 10, Top: 100, NoReplay: true, MaxPolicies: 1}
			if withConfig {
				o.Config = cfg
			} else {
				o.OutConfig = cfg
			}
			rep, err := Run(o)
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Classes) != 1 {
				t.Fatalf("window %v: %d classes, want the default alone: %+v", window, len(rep.Classes), rep.Classes)
			}
			c := rep.Classes[0]
			callers, requests, rate := windowRecompute(evs, rep.WindowStart.Unix(), rep.WindowEnd.Unix())
			if callers < 40 {
				t.Fatalf("window %v: only %d callers in the window: the test lost its point", window, callers)
			}
			if c.Keys.Keys != callers || c.Proposal.Rate != rate {
				t.Errorf("window %v (config %v, from %v): %d callers, rate %v/s; recomputed %d callers, rate %v/s", window, withConfig, rep.WindowStart, c.Keys.Keys, c.Proposal.Rate, callers, rate)
			}
			if len(c.Tail) < 10 {
				t.Fatalf("tail of %d keys", len(c.Tail))
			}
			for _, k := range c.Tail {
				if k.Requests != requests[k.Key] {
					t.Errorf("window %v (config %v): %s shown with %d requests, %d in the window", window, withConfig, k.Key, k.Requests, requests[k.Key])
				}
			}
		}
	}
}
