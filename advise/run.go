package advise

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"golang.org/x/term"
)

// Report is the outcome of a run, as --json writes it.
type Report struct {
	Inputs    []string `json:"inputs"`
	Bytes     int64    `json:"bytes"` // read from the inputs in the first pass (compressed size for gzip)
	Lines     int64    `json:"lines"`
	Malformed int64    `json:"malformed"`
	// OutsideWindow are the requests parsed but older than the window's
	// start, so in no class; Files accounts for every line, per input.
	OutsideWindow     int64           `json:"outside_window"`
	Files             []FileLines     `json:"files"`
	MalformedExamples []MalformedLine `json:"malformed_examples,omitempty"`
	Unmatched         int64           `json:"unmatched,omitempty"` // with --config: requests no policy matches
	// Refused are the requests sluice's own access log says the gateway
	// refused: they count toward their callers' denied share only.
	Refused        int64         `json:"refused_by_sluice,omitempty"`
	Order          Order         `json:"order"`
	Window         string        `json:"window"`
	WindowStart    time.Time     `json:"window_start"`
	WindowEnd      time.Time     `json:"window_end"`
	Classes        []ClassReport `json:"classes"`
	Notes          []string      `json:"notes,omitempty"`
	MeasureSeconds float64       `json:"measure_seconds"` // every measuring pass: the first, a re-read in time order, the routes
	MBPerSecond    float64       `json:"mb_per_second"`   // of the first pass
	ReplaySeconds  float64       `json:"replay_seconds,omitempty"`
}

// FileLines accounts for every line read from one input: Lines =
// Parsed + Malformed, and Parsed = OutsideWindow + the requests in the
// window. Late are the requests of the window that came too far out of
// order to be counted in their own second (Order.Late, for this file).
type FileLines struct {
	File          string `json:"file"`
	Lines         int64  `json:"lines"`
	Parsed        int64  `json:"parsed"`
	Malformed     int64  `json:"malformed"`
	OutsideWindow int64  `json:"outside_window"`
	Late          int64  `json:"late"`

	hours map[int64]int64 // parsed requests by Unix hour
}

// count adds the lines of b, by hour, to the accounts of its file.
func (f *FileLines) count(b *batch) {
	f.Lines += b.lines
	f.Malformed += b.malformed
	f.Parsed += int64(len(b.recs))
	if f.hours == nil {
		f.hours = make(map[int64]int64)
	}
	h, n := int64(0), int64(0)
	for i := range b.recs {
		s := floorSec(b.recs[i].time)
		hour := s / 3600
		if s < 0 && s%3600 != 0 {
			hour--
		}
		if hour != h && n > 0 {
			f.hours[h] += n
			n = 0
		}
		h = hour
		n++
	}
	if n > 0 {
		f.hours[h] += n
	}
}

// String is the accounting of f on one line, as the table and the
// configuration's comments write it.
func (f FileLines) String() string {
	return fmt.Sprintf("%s: %d lines: %d parsed (%d outside the window, %d in it, %d of them late), %d malformed",
		f.File, f.Lines, f.Parsed, f.OutsideWindow, f.Parsed-f.OutsideWindow, f.Late, f.Malformed)
}

// settle counts the requests of each file before start (a whole hour;
// 0 for no window) and the late ones, and their total in rep.
func settle(rep *Report, start int64, late []int64) {
	rep.OutsideWindow = 0
	for i := range rep.Files {
		f := &rep.Files[i]
		f.OutsideWindow, f.Late = 0, 0
		if start > 0 {
			for h, n := range f.hours {
				if h*3600 < start {
					f.OutsideWindow += n
				}
			}
		}
		if i < len(late) {
			f.Late = late[i]
		}
		rep.OutsideWindow += f.OutsideWindow
	}
}

// ClassReport is the measurement, proposal and replay of one class.
type ClassReport struct {
	Policy    string       `json:"policy"`
	Match     string       `json:"match"`
	Caller    string       `json:"caller"` // anonymous or authenticated
	PerSecond Dist         `json:"per_second"`
	PerMinute Dist         `json:"per_minute"`
	Proposal  Proposal     `json:"proposal"`
	Rate      string       `json:"rate"` // the proposed rate as the configuration writes it
	LowData   bool         `json:"low_data,omitempty"`
	InConfig  bool         `json:"in_config"`
	Replay    *ReplayStats `json:"replay,omitempty"`
	// Histogram is the per-second distribution: each count with its
	// number of (key, second) samples, by increasing count.
	Histogram []Bin `json:"per_second_histogram"`
	// PeakMinutes is the distribution the keys reading sizes the rate
	// on: each busiest-minute count with how many of the callers that
	// size the proposal (KeyStats.Normal) had it, by increasing count.
	// The charts draw it (chartOf).
	PeakMinutes []Bin `json:"peak_minute_histogram,omitempty"`
	// Keys is the per-key view: how many callers, which size the
	// proposal, and those set apart as ones it would limit.
	Keys KeyStats `json:"keys"`
	// Tail are the busiest keys of the class (tail.go).
	Tail []TailKey `json:"tail,omitempty"`

	class int32
	apart map[string]bool // every key set apart
}

// maxLegitDenied is the share of legitimate requests (those of callers not
// set apart), in percent, above which a class's replay flags its proposal
// as too strict (ReplayStats.TooStrict).
const maxLegitDenied = 1.0

// Order is how out of order the input was, and what the advisor did
// about it (see reorder.go). It describes the input, not the traffic: the
// same lines in another order give the same report but this.
type Order struct {
	// ReorderSeconds is the reorder window of the final measurement: a
	// line at most this much older than the newest line before it is
	// counted in its own second.
	ReorderSeconds int64 `json:"reorder_window_seconds"`
	// MaxLagSeconds is the most a line came behind the newest line
	// before it, as the inputs were given.
	MaxLagSeconds int64 `json:"max_lag_seconds"`
	// Segments is how many stretches the files were cut into where a line
	// came more than 15 minutes behind (rotated files concatenated newest
	// first).
	Segments int `json:"segments,omitempty"`
	// Reread is set when the files were measured a second time, their
	// segments oldest first, with a window sized from the first reading.
	Reread bool `json:"reread,omitempty"`
	// Merged is how many segments were read at once, their lines merged
	// by time, because their times overlap (files of two servers).
	Merged int `json:"merged,omitempty"`
	// Late is the number of lines the final window could not absorb;
	// each was counted in the oldest second still open.
	Late int64 `json:"late"`
}

// ReplayStats is what the proposal would have done to the class.
type ReplayStats struct {
	Requests     int64 `json:"requests"`
	Keys         int64 `json:"keys"` // distinct callers, estimated within about 2%
	Rejected     int64 `json:"rejected"`
	RejectedKeys int   `json:"rejected_keys"`
	// Legitimate are the requests of the callers not set apart, and
	// LegitimateRejected those of them the proposal rejected;
	// LegitimateShare is the second over the first, in percent.
	Legitimate         int64   `json:"legitimate_requests"`
	LegitimateRejected int64   `json:"legitimate_rejected"`
	LegitimateShare    float64 `json:"legitimate_rejected_percent"`
	// TooStrict is set when LegitimateShare is above maxLegitDenied.
	TooStrict bool       `json:"too_strict,omitempty"`
	Top       []KeyCount `json:"top,omitempty"`
	WhatIf    []WhatIf   `json:"what_if,omitempty"` // the proposal scaled, replayed too (whatif.go)
}

// Run reads the logs of o, proposes limits and replays them, and writes
// the configuration and charts o asks for.
func Run(o Options) (*Report, error) {
	if o.stderr == nil {
		o.stderr = io.Discard
	}
	if o.stdin == nil {
		o.stdin = os.Stdin
	}
	srcs, err := expandInputs(o.Inputs)
	if err != nil {
		return nil, err
	}
	if err := outputsApartFromInputs(srcs, map[string]string{"--out-config": o.OutConfig, "--html": o.HTML}); err != nil {
		return nil, err
	}
	rep := &Report{Window: "all"}
	if o.Window > 0 {
		rep.Window = o.Window.String()
		if o.Window%(24*time.Hour) == 0 {
			rep.Window = strconv.FormatInt(int64(o.Window/(24*time.Hour)), 10) + "d"
		}
	}
	names := make([]string, len(srcs))
	var total int64
	for i, s := range srcs {
		names[i] = s.name
		srcs[i].file = i
		total += s.size
	}
	rep.Inputs = names
	rep.Files = make([]FileLines, len(names))
	for i, n := range names {
		rep.Files[i].File = n
	}

	cls := &classes{max: o.MaxClasses}
	var matcher *policyMatcher
	var policies []configPolicy
	if o.Config != "" {
		if policies, err = readPolicies(o.Config); err != nil {
			return nil, err
		}
		if matcher, err = newPolicyMatcher(policies); err != nil {
			return nil, fmt.Errorf("%s: %w", o.Config, err)
		}
		for _, p := range policies {
			cls.endpoints = append(cls.endpoints, p.Name)
			cls.matches = append(cls.matches, p.Match)
		}
	} else {
		cls.patterns = make(map[string]int32)
	}
	newWork := func() func(*batch) {
		w := &lineWorker{p: newParser(o.Fields), names: names, group: o.MaxPolicies > 0}
		if o.AnonymousUsers != nil {
			w.p.setAnonymous(o.AnonymousUsers)
		}
		w.p.trusted = o.TrustedProxies
		if matcher != nil {
			w.m, _ = newPolicyMatcher(policies)
		}
		return w.do
	}

	var spool *os.File
	if slices.Contains(names, "-") {
		if spool, err = os.CreateTemp("", "sluice-advise-*.log"); err != nil {
			return nil, fmt.Errorf("spooling standard input for the replay: %w", err)
		}
		defer os.Remove(spool.Name())
		defer spool.Close()
	}

	// Pass 1: measure.
	prog := &progress{}
	show := showProgress(o)
	reorderWindow := int64(o.Reorder / time.Second)
	if reorderWindow <= 0 {
		reorderWindow = defaultReorder
	}
	// Without --config this pass finds the patterns; the routes pass below
	// measures per key.
	m := newMeasurer(cls, int64(o.Window/time.Second), reorderWindow, o.Config != "")
	m.seg = &segmenter{} // standard input too: it is read again from its spool
	t0 := time.Now()
	stopBar := startBar(show, o.stderr, "measuring", prog, total)
	pl := &pipeline{sources: srcs, stdin: o.stdin, spool: spool, newWork: newWork, prog: prog}
	err = pl.run(func(b *batch) error {
		rep.Lines += b.lines
		rep.Malformed += b.malformed
		for _, bad := range b.bad {
			if len(rep.MalformedExamples) < maxBadKept {
				rep.MalformedExamples = append(rep.MalformedExamples, bad)
			}
		}
		prog.lines.Add(b.lines)
		rep.Files[b.file].count(b)
		m.batch(b)
		return nil
	})
	stopBar()
	if err != nil {
		return nil, err
	}
	rep.Notes = append(rep.Notes, pl.warnings...)
	rep.Bytes = prog.bytes.Load()
	rep.MeasureSeconds = time.Since(t0).Seconds()
	if rep.MeasureSeconds > 0 {
		rep.MBPerSecond = float64(rep.Bytes) / 1e6 / rep.MeasureSeconds
	}
	m.ro.flush()
	rep.Order = Order{ReorderSeconds: reorderWindow, Late: m.ro.late}
	lateBy := m.ro.lateBy
	replaySrcs := srcs
	if m.seg != nil {
		rep.Order.MaxLagSeconds = m.seg.maxLag
		rep.Order.Segments = len(m.seg.segs)
	}
	// runPass reads srcs again (standard input from its spool) into fn,
	// with a progress line of its own: the bytes and lines read against
	// the inputs' size.
	runPass := func(what string, srcs []source, fn func(b *batch)) error {
		p := &progress{}
		stopBar := startBar(show, o.stderr, what, p, passSize(srcs, spool))
		defer stopBar()
		pl := &pipeline{sources: srcs, stdin: spool, newWork: newWork, prog: p, fields: o.Fields}
		return pl.run(func(b *batch) error {
			fn(b)
			p.lines.Add(b.lines)
			return nil
		})
	}
	// remeasure reads srcs again into a fresh measurer of cls that counts
	// from the window's start, now known (a pass read the newest line).
	remeasure := func(what string, srcs []source, cls *classes, reorder int64, perKey bool, start int64) (*measurer, error) {
		m := newMeasurer(cls, int64(o.Window/time.Second), reorder, perKey)
		m.fixed, m.start = true, start
		if spool != nil {
			if _, err := spool.Seek(0, io.SeekStart); err != nil {
				return nil, err
			}
		}
		t := time.Now()
		if err := runPass(what, srcs, m.batch); err != nil {
			return nil, err
		}
		m.ro.flush()
		rep.MeasureSeconds += time.Since(t).Seconds()
		return m, nil
	}
	if m.ro.late > 0 && m.seg != nil {
		// Too far out of order for the window: read the segments again,
		// oldest first, with a window that absorbs them. Standard input
		// is read again from its spool.
		if groups, w, ok := m.seg.plan(); ok {
			planned := make([]source, len(groups))
			for i, g := range groups {
				parts := make([]source, len(g))
				for j, sg := range g {
					parts[j] = srcs[sg.file]
					if parts[j].name == "-" {
						parts[j].name = spool.Name()
					}
					parts[j].start, parts[j].end = sg.start, sg.end
				}
				planned[i] = parts[0]
				if len(parts) > 1 {
					planned[i] = source{name: "merged", file: parts[0].file, end: -1, parts: parts}
					rep.Order.Merged += len(parts)
				}
			}
			cls = freshClasses(cls, o.Config != "")
			m2, err := remeasure("measuring again, in time order", planned, cls, w, o.Config != "", m.windowStart())
			if err != nil {
				return nil, err
			}
			m, replaySrcs, reorderWindow = m2, planned, w
			rep.Order.Reread, rep.Order.ReorderSeconds, rep.Order.Late = true, w, m2.ro.late
			lateBy = m2.ro.lateBy
		}
	}
	if m.perKey && !m.fixed && m.minSec < m.windowStart() {
		// The log is longer than the window: a key's summary may have
		// begun before the window's start was known. Count again from it.
		cls = freshClasses(cls, true)
		m2, err := remeasure("measuring the window", replaySrcs, cls, reorderWindow, true, m.windowStart())
		if err != nil {
			return nil, err
		}
		m = m2
	}
	if rep.Order.Late > 0 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("%d lines came more than %d s behind the newest line before them: each was counted in the oldest second still open (widen --reorder-window, or give files rather than standard input)", rep.Order.Late, rep.Order.ReorderSeconds))
	}
	rep.Unmatched = m.unmatched
	if m.requests == 0 {
		return rep, fmt.Errorf("no request could be read from %s (%d lines, %d malformed)", strings.Join(names, ", "), rep.Lines, rep.Malformed)
	}
	start := m.windowStart()
	settle(rep, start, lateBy)
	if rep.OutsideWindow > 0 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("%d requests were older than the %s window and are in no class (per file: --json's files); widen --window to count them", rep.OutsideWindow, rep.Window))
	}
	rep.WindowStart = time.Unix(max(start, m.minSec), 0).UTC()
	rep.WindowEnd = time.Unix(m.maxSec+1, 0).UTC()
	conflictNotes := len(rep.Notes)
	proposeClasses(rep, m, cls, o.Config != "", policies, o)

	if o.Config == "" {
		// Measure again with the routes the configuration will have, as
		// the gateway's ServeMux matches them, so that what --out-config
		// writes governs exactly the requests it was sized on: advising
		// again with it as --config gives the same classes and numbers.
		policies = routes(rep)
		var groupNotes []string
		if o.MaxPolicies > 0 {
			policies, groupNotes = groupRoutes(rep, o.MaxPolicies, o.MinShare)
		}
		if len(policies) > 0 {
			if matcher, err = newPolicyMatcher(policies); err != nil {
				return nil, fmt.Errorf("the proposed routes: %w", err)
			}
			cls = freshClasses(&classes{endpoints: policyNamesOf(policies), matches: matchesOf(policies)}, true)
			m3, err := remeasure("measuring the proposed routes", replaySrcs, cls, reorderWindow, true, start)
			if err != nil {
				return nil, err
			}
			m = m3
			if o.MaxPolicies > 0 {
				rep.Notes = append(rep.Notes[:conflictNotes], groupNotes...)
			} else {
				rep.Notes = rep.Notes[:conflictNotes+countConflicts(rep.Notes[conflictNotes:])]
			}
			rep.Classes = nil
			proposeClasses(rep, m, cls, true, policies, o)
			if n := defaultNote(rep, policies, o.MinShare); n != "" {
				rep.Notes = append(rep.Notes, n)
			}
			rep.Unmatched = m.unmatched
		}
	}
	if o.Statistic != "samples" && m.perKey {
		// The bursts, from each key's need at its class's rate (burst.go).
		rates := make([]float64, 2*len(cls.endpoints))
		for _, c := range rep.Classes {
			if c.Proposal.Basis == "keys" && int(c.class) < len(rates) {
				rates[c.class] = c.Proposal.Rate
			}
		}
		if spool != nil {
			if _, err := spool.Seek(0, io.SeekStart); err != nil {
				return nil, err
			}
		}
		bp := newBurstPass(m, cls, start, reorderWindow, rates)
		t4 := time.Now()
		err := runPass("measuring the bursts", replaySrcs, bp.batch)
		bp.finish()
		if err != nil {
			return nil, err
		}
		rep.MeasureSeconds += time.Since(t4).Seconds()
		reburst(rep, m, o)
	}
	if rep.Refused = m.refused; rep.Refused > 0 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("%d requests were refused by sluice (its access log says so): they count toward their callers' share of denials, not in the distributions, the proposal or the replay", rep.Refused))
	}
	if n := m.unsummarized(); n > 0 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("more than %d distinct (class, caller) pairs: %d requests of the callers past that count in the distributions and the replay, but not in the per-key proposal", maxKeySums, n))
	}

	// Pass 2: replay.
	if !o.NoReplay {
		rules := make([][]sluice.Rule, 2*len(cls.endpoints))
		for _, c := range rep.Classes {
			if c.InConfig {
				rules[c.class] = []sluice.Rule{{Rate: c.Proposal.Rate, Burst: c.Proposal.Burst}}
			}
		}
		rp := newReplayer(cls, start, reorderWindow, rules)
		for _, c := range rep.Classes {
			if int(c.class) < len(rp.apart) {
				rp.apart[c.class] = c.apart
			}
		}
		defer rp.store.Close()
		rp.addVariants(o.WhatIf)
		defer rp.closeVariants()
		if spool != nil {
			if _, err := spool.Seek(0, io.SeekStart); err != nil {
				return nil, err
			}
		}
		t1 := time.Now()
		err := runPass("replaying", replaySrcs, rp.batch)
		rp.finish()
		if err != nil {
			return nil, err
		}
		rep.ReplaySeconds = time.Since(t1).Seconds()
		for i := range rep.Classes {
			c := &rep.Classes[i]
			if !c.InConfig {
				continue
			}
			c.Replay = &ReplayStats{
				Requests:     rp.requests[c.class],
				Keys:         rp.keys[c.class].count(),
				Rejected:     rp.rejected[c.class],
				RejectedKeys: len(rp.byKey[c.class]),
				Top:          rp.top(int(c.class), o.Top),
				WhatIf:       rp.whatIfs(c.class),

				Legitimate:         rp.legit[c.class],
				LegitimateRejected: rp.legitRejected[c.class],
			}
			c.Replay.LegitimateShare = pct(c.Replay.LegitimateRejected, c.Replay.Legitimate)
			if c.Replay.TooStrict = c.Replay.LegitimateShare > maxLegitDenied; c.Replay.TooStrict {
				rep.Notes = append(rep.Notes, fmt.Sprintf("%s %s: the proposal would refuse %.1f%% of the requests of the callers not set apart (%d of %d), more than %g%%: heavy legitimate callers would be denied; see the what-ifs, or give them a plan of their own", c.Match, c.Caller, c.Replay.LegitimateShare, c.Replay.LegitimateRejected, c.Replay.Legitimate, maxLegitDenied))
			}
		}
	}

	if o.OutConfig != "" {
		mode := ""
		if o.Shadow {
			mode = "shadow"
		}
		if err := writeConfigFile(o.OutConfig, rep, mode); err != nil {
			return rep, err
		}
	}
	if o.ChartDir != "" {
		if err := writeCharts(o.ChartDir, o.ChartFormat, rep); err != nil {
			return rep, err
		}
	}
	if o.HTML != "" {
		if err := writeHTMLFile(o.HTML, rep, o); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

// proposeClasses fills rep.Classes from what m measured: a proposal per
// class, the patterns that can go in the configuration, sorted busiest
// first. fromConfig: the endpoints are the policies.
func proposeClasses(rep *Report, m *measurer, cls *classes, fromConfig bool, policies []configPolicy, o Options) {
	secH, minH := m.result()
	keysOf := m.classKeys(len(secH))
	cls.frozen = true
	names2 := policyNames(cls, fromConfig)
	for c := range secH {
		ps := summarize(&secH[c])
		if ps.Samples == 0 {
			continue
		}
		ep := c / 2
		cr := ClassReport{
			Policy:    names2[ep],
			Match:     cls.matches[ep],
			Caller:    "anonymous",
			PerSecond: ps,
			PerMinute: summarize(&minH[c]),
			LowData:   ps.Samples < uint64(o.MinSamples),
			class:     int32(c),
			Histogram: secH[c].bins(),
		}
		if c%2 == 1 {
			cr.Caller = "authenticated"
		}
		normal, limited := keysOf[c], []LimitedKey(nil)
		if !o.KeepAbusers {
			normal, limited = setApart(keysOf[c])
		}
		if o.Statistic == "samples" {
			cr.Proposal = propose(cr.PerSecond, cr.PerMinute)
			cr.Keys.Normal = len(normal)
		} else {
			cr.Proposal, cr.Keys = proposeByKeys(normal, int64(o.MinBurst))
			staticFloor(&cr.Proposal, cr.Match)
			cr.PeakMinutes, cr.Keys.AboveRate = peakMinutes(normal, cr.Proposal.Rate)
		}
		cr.Keys.Keys, cr.Keys.SetApart = len(keysOf[c]), len(limited)
		if len(limited) > 0 {
			cr.apart = make(map[string]bool, len(limited))
			for _, k := range limited {
				cr.apart[k.Key] = true
			}
		}
		cr.Tail = tailKeys(keysOf[c], limited, max(o.Top, 10))
		cr.Keys.WouldLimit = limited[:min(len(limited), max(o.Top, 10))]
		cr.Rate = sluice.FormatRate(cr.Proposal.Rate)
		rep.Classes = append(rep.Classes, cr)
	}
	checkPatterns(rep, fromConfig)
	for i := range rep.Classes {
		if c := &rep.Classes[i]; m.perKey && c.InConfig && c.Proposal.Rate == 0 {
			c.InConfig = false
			rep.Notes = append(rep.Notes, fmt.Sprintf("%s %s callers are all set apart as abusive: no rule proposed", c.Match, c.Caller))
		}
	}
	if fromConfig {
		seen := make(map[string]bool)
		for _, c := range rep.Classes {
			seen[c.Policy] = true
		}
		for _, p := range policies {
			if !seen[p.Name] {
				rep.Notes = append(rep.Notes, fmt.Sprintf("policy %s (%s) has no traffic in the window: left out of the configuration", p.Name, p.Match))
			}
		}
	}
	slices.SortStableFunc(rep.Classes, func(a, b ClassReport) int {
		if a.PerSecond.Requests != b.PerSecond.Requests {
			if a.PerSecond.Requests > b.PerSecond.Requests {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Policy+a.Caller, b.Policy+b.Caller)
	})

}

// routes are the policies the configuration will have: the endpoints of
// the classes that go in it, sorted by name as the configuration is.
func routes(rep *Report) []configPolicy {
	seen := make(map[string]bool)
	var out []configPolicy
	for _, c := range rep.Classes {
		if c.InConfig && !seen[c.Policy] {
			seen[c.Policy] = true
			out = append(out, configPolicy{Name: c.Policy, Match: c.Match})
		}
	}
	slices.SortFunc(out, func(a, b configPolicy) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func policyNamesOf(ps []configPolicy) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.Name
	}
	return out
}

func matchesOf(ps []configPolicy) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.Match
	}
	return out
}

// countConflicts is how many of notes, from the front, are about patterns
// left out for a conflict.
func countConflicts(notes []string) int {
	n := 0
	for n < len(notes) && strings.Contains(notes[n], "is left out of the configuration") {
		n++
	}
	return n
}

// freshClasses returns cls as it was before any record was read: the
// configuration's policies, or no pattern yet.
func freshClasses(cls *classes, fromConfig bool) *classes {
	if fromConfig {
		return &classes{max: cls.max, endpoints: cls.endpoints, matches: cls.matches}
	}
	return &classes{max: cls.max, patterns: make(map[string]int32)}
}

// policyNames names the endpoints: the configuration's policy names, or
// names made from the patterns (GET /products/{id} → get-products-id).
func policyNames(cls *classes, fromConfig bool) []string {
	if fromConfig {
		return cls.endpoints
	}
	seen := make(map[string]bool)
	out := make([]string, len(cls.endpoints))
	for i, p := range cls.endpoints {
		var b strings.Builder
		method, path, _ := strings.Cut(p, " ")
		b.WriteString(strings.ToLower(method))
		for seg := range strings.SplitSeq(path, "/") {
			seg = strings.Trim(seg, "{}$")
			if seg == "" {
				continue
			}
			b.WriteByte('-')
			for _, r := range strings.ToLower(seg) {
				if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
					b.WriteRune(r)
				} else {
					b.WriteByte('-')
				}
			}
		}
		name := b.String()
		if name == strings.ToLower(method) {
			name += "-root"
			if !strings.HasSuffix(path, "{$}") {
				name += "-all"
			}
		}
		if strings.HasSuffix(path, "/") && !strings.HasSuffix(path, "{$}") && path != "/" {
			name += "-prefix"
		}
		base := name
		for n := 2; seen[name]; n++ {
			name = base + "-" + strconv.Itoa(n)
		}
		seen[name] = true
		out[i] = name
	}
	return out
}

// checkPatterns marks the classes whose pattern can go into the
// configuration: each endpoint's pattern must register in a ServeMux
// beside those of busier endpoints (two patterns conflict when each
// matches a path the other does not and neither is more specific).
func checkPatterns(rep *Report, fromConfig bool) {
	matches, _ := busiestMatches(rep)
	ok := make(map[string]bool)
	mux := http.NewServeMux()
	for _, m := range matches {
		if fromConfig {
			ok[m] = true
			continue
		}
		if err := registerPattern(mux, m); err != nil {
			rep.Notes = append(rep.Notes, fmt.Sprintf("%s is left out of the configuration: %v", m, firstLine(err)))
			continue
		}
		ok[m] = true
	}
	for i := range rep.Classes {
		rep.Classes[i].InConfig = ok[rep.Classes[i].Match]
	}
}

// busiestMatches returns the patterns of rep's classes, busiest first
// (ties by pattern), and the requests of each.
func busiestMatches(rep *Report) ([]string, map[string]uint64) {
	traffic := make(map[string]uint64)
	for _, c := range rep.Classes {
		traffic[c.Match] += c.PerSecond.Requests
	}
	matches := make([]string, 0, len(traffic))
	for m := range traffic {
		matches = append(matches, m)
	}
	slices.SortFunc(matches, func(a, b string) int {
		if traffic[a] != traffic[b] {
			if traffic[a] > traffic[b] {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	return matches, traffic
}

// firstLine is the first line of a ServeMux error, without the places
// where the patterns were registered (always the advisor's own code).
func firstLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	for {
		i := strings.Index(s, " (registered at ")
		if i < 0 {
			break
		}
		j := strings.IndexByte(s[i:], ')')
		if j < 0 {
			break
		}
		s = s[:i] + s[i+j+1:]
	}
	return strings.TrimSuffix(s, ":")
}

func showProgress(o Options) bool {
	switch o.Progress {
	case "always":
		return true
	case "never":
		return false
	}
	f := openStderr(o.stderr)
	return f != nil && term.IsTerminal(int(f.Fd()))
}

// startBar draws a progress line on w until the returned func is called.
func startBar(show bool, w io.Writer, what string, p *progress, total int64) func() {
	if !show {
		return func() {}
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	t0 := time.Now()
	draw := func() {
		n := p.bytes.Load()
		el := time.Since(t0).Seconds()
		line := fmt.Sprintf("\r%s %s", what, humanBytes(n))
		if total > 0 {
			pct := min(100, float64(n)*100/float64(total))
			const width = 24
			fill := int(pct / 100 * width)
			line += fmt.Sprintf(" / %s [%s%s] %3.0f%%", humanBytes(total), strings.Repeat("=", fill), strings.Repeat(" ", width-fill), pct)
		}
		line += fmt.Sprintf("  %s lines", humanCount(p.lines.Load()))
		if el > 0 {
			line += fmt.Sprintf("  %.0f MB/s", float64(n)/1e6/el)
		}
		fmt.Fprint(w, line+"\x1b[K")
	}
	go func() {
		defer close(finished)
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				draw()
				fmt.Fprintln(w)
				return
			case <-t.C:
				draw()
			}
		}
	}()
	return func() { close(done); <-finished }
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

func humanCount(n int64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.2fG", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.2fM", float64(n)/1e6)
	case n >= 1e4:
		return fmt.Sprintf("%.1fk", float64(n)/1e3)
	}
	return strconv.FormatInt(n, 10)
}

// passSize is what a pass over srcs reads, in bytes, for its progress
// line: each file's size, or of the spool of standard input, less what a
// segment skips (of a plain file; a gzip file is counted whole).
func passSize(srcs []source, spool *os.File) int64 {
	var n int64
	for _, s := range srcs {
		if len(s.parts) > 0 {
			n += passSize(s.parts, spool)
			continue
		}
		f := spool
		if s.name != "-" && (spool == nil || s.name != spool.Name()) {
			var err error
			if f, err = os.Open(s.name); err != nil {
				continue
			}
			defer f.Close()
		}
		st, err := f.Stat()
		if err != nil {
			continue
		}
		size := st.Size()
		if !isGzip(f) {
			if s.end >= 0 {
				size = min(size, s.end)
			}
			size -= min(size, s.start)
		}
		n += size
	}
	return n
}

// outputsApartFromInputs refuses an output file that is one of the logs
// read (by path or, through a link, by file): it was overwritten with the
// configuration or the HTML report once the logs were read.
func outputsApartFromInputs(srcs []source, outputs map[string]string) error {
	for flag, out := range outputs {
		if out == "" {
			continue
		}
		ost, oerr := os.Stat(out)
		for _, src := range srcs {
			if src.name == "-" {
				continue
			}
			same := filepath.Clean(src.name) == filepath.Clean(out)
			if !same && oerr == nil {
				if ist, err := os.Stat(src.name); err == nil {
					same = os.SameFile(ist, ost)
				}
			}
			if same {
				return fmt.Errorf("%s %s is also a log to read: give the output another name", flag, out)
			}
		}
	}
	return nil
}
