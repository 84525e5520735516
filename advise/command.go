// Package advise derives rate limits from access logs: it is
// `sluice advise`.
//
// It reads Common, Combined and vhost_combined Log Format and JSON lines
// (ECS-style included; the format is detected per line), from files,
// globs, gzip files or standard input, streaming, in memory that follows
// the callers of the window and the traffic of a reorder window, not the
// size of the log. Lines are counted in time order, whatever order they
// come in (reorder.go), so the same lines in any order give the same
// report. Every request falls in a class: its endpoint (the method and a
// ServeMux pattern of its path, ids grouped into wildcards, then matched
// as the gateway's ServeMux would match the patterns that go into the
// configuration; or the policy of an existing configuration) and whether
// its caller is authenticated (keyed by API key or user) or anonymous
// (keyed by client IP, IPv6 by /64). Per class and key it keeps the key's
// busiest second and minute and how many of its requests were errors or
// 429s, and proposes rate = 2 × the p99 across keys of their busiest
// minute / 60 and a burst from the bucket each key needs at that rate
// (burst.go), within 5 to 10 × rate or up to a minute of it, after setting
// apart the keys it would limit (keys.go). Unless told otherwise, the
// classes are grouped into a handful of policies with a catch-all default
// (group.go). A last pass
// over the same input replays the proposal on the real in-memory store
// with the log's own timestamps and counts what it would have rejected.
//
// docs/advise.md is the user's guide.
package advise

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"
)

// Command runs `sluice advise` with args (the words after "advise") and
// returns the process exit status.
func Command(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) > 0 && (args[0] == "generate" || args[0] == "loggen" || args[0] == "--generate" || args[0] == "-generate") {
		return generateCommand(args[1:], stdout, stderr)
	}
	opts, err := parseFlags(args, stdout, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		if !errors.Is(err, errFlag) { // the flag package named a bad flag itself
			fmt.Fprintln(stderr, "sluice advise:", err)
		}
		return 2
	}
	opts.stdin, opts.stderr = stdin, stderr
	rep, err := Run(opts)
	if err != nil {
		fmt.Fprintln(stderr, "sluice advise:", err)
		return 1
	}
	if opts.JSON {
		err = writeJSON(stdout, rep)
	} else {
		err = writeTable(stdout, rep)
	}
	if err != nil {
		fmt.Fprintln(stderr, "sluice advise:", err)
		return 1
	}
	return 0
}

// maxMinBurst bounds --min-burst: a rate is at least 1/m, and a burst of
// 100,000 refills in 70 days, within the 366 check-config allows.
const maxMinBurst = 100_000

// Options configures a run of the advisor. Command fills it from flags.
type Options struct {
	Inputs      []string      // files, globs, or "-" for standard input
	Config      string        // classes from this configuration's policies
	Window      time.Duration // the last Window of the log; 0 means all of it
	Reorder     time.Duration // lines this far out of order count in their own second
	OutConfig   string        // write the proposed policies here
	Shadow      bool          // with mode: shadow, to observe before enforcing
	ChartDir    string        // write one chart per class here
	ChartFormat string        // png or svg
	JSON        bool
	HTML        string    // write the report as one self-contained HTML file here
	WhatIf      []float64 // replay the proposal scaled by each factor too
	Top         int       // top rejected keys per class
	MaxClasses  int       // endpoint classes before folding into prefixes
	// MaxPolicies groups the classes into at most this many policies, a
	// catch-all default included (group.go); 0 gives every class a
	// policy of its own.
	MaxPolicies int
	MinShare    float64 // with MaxPolicies: patterns with a smaller share of the requests go to the default
	MinBurst    int     // the smallest burst proposed (keys reading); below 1 counts as 1
	MinSamples  int     // classes with fewer per-second samples are flagged
	Fields      map[fieldKind][]string
	// AnonymousUsers are user values that name no one (compared without
	// case); nil means the defaults: - guest anonymous unknown none null nobody.
	AnonymousUsers []string
	// TrustedProxies: an X-Forwarded-For list logged as the client is
	// keyed by its rightmost address outside them, as the gateway keys it;
	// none: by its leftmost.
	TrustedProxies []netip.Prefix
	NoReplay       bool
	Statistic      string // keys (the default when empty) or samples: how the rule is read
	KeepAbusers    bool   // no key is set apart: every caller sizes the proposal
	Progress       string // auto, always or never

	stdin  io.Reader
	stderr io.Writer
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// windowFlag reads durations in Go syntax, and days: 7d, 36h, 90m, 0.
type windowFlag struct{ d *time.Duration }

func (w windowFlag) String() string {
	switch {
	case w.d == nil:
		return ""
	case *w.d > 0 && *w.d%(24*time.Hour) == 0:
		return strconv.FormatInt(int64(*w.d/(24*time.Hour)), 10) + "d"
	}
	return w.d.String()
}

func (w windowFlag) Set(v string) error {
	d, err := parseWindow(v)
	if err == nil {
		*w.d = d
	}
	return err
}

func parseWindow(v string) (time.Duration, error) {
	if v == "0" || v == "all" {
		return 0, nil
	}
	if n, ok := strings.CutSuffix(v, "d"); ok {
		f, err := strconv.ParseFloat(n, 64)
		if err != nil || f < 0 {
			return 0, fmt.Errorf("window %q: want a duration such as 7d, 36h or 0 for the whole log", v)
		}
		return time.Duration(f * float64(24*time.Hour)), nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("window %q: want a duration such as 7d, 36h or 0 for the whole log", v)
	}
	return d, nil
}

const usage = `Usage: sluice advise [flags] LOG...
       sluice advise generate [flags]   (writes a synthetic log; --help for its flags)

Reads access logs (Common, Combined, JSON lines; files, globs, .gz, or - for
standard input), measures per-key request rates per endpoint and caller kind,
proposes rate = 2 x p99 and burst = 5-10 x rate, and replays the proposal.

Flags:
`

// errFlag marks a bad flag that the flag package has already reported.
var errFlag = errors.New("bad flag")

func parseFlags(args []string, stdout, stderr io.Writer) (Options, error) {
	o := Options{Window: 7 * 24 * time.Hour, Reorder: defaultReorder * time.Second}
	fs := flag.NewFlagSet("sluice advise", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {} // printed below: --help on stdout, once
	help := func(w io.Writer) {
		fmt.Fprint(w, usage)
		fs.SetOutput(w)
		fs.PrintDefaults()
		fs.SetOutput(stderr)
	}
	var fields, anon, trusted multiFlag
	fs.StringVar(&o.Config, "config", "", "take the classes from the policies of the sluice configuration `FILE`")
	fs.Var(windowFlag{&o.Window}, "window", "measure the last `DURATION` of the log (7d, 36h; 0 for all of it)")
	fs.DurationVar(&o.Reorder, "reorder-window", o.Reorder, "count a line up to `DURATION` older than the newest line before it in its own second (files further out of order are read again in time order)")
	fs.StringVar(&o.OutConfig, "out-config", "", "write the proposed policies as a sluice configuration to `FILE`")
	fs.BoolVar(&o.Shadow, "shadow", false, "write the policies with mode: shadow (decide and report, never reject)")
	fs.StringVar(&o.ChartDir, "chart", "", "write a chart of each class's distribution into `DIR`")
	fs.StringVar(&o.ChartFormat, "chart-format", "png", "chart format: png or svg")
	fs.BoolVar(&o.JSON, "json", false, "write the report as JSON")
	fs.StringVar(&o.HTML, "html", "", "write the report as one self-contained HTML `FILE` (charts inside, no external resources)")
	whatIf := fs.String("what-if", "", "replay the proposal with rate and burst scaled by each of `FACTORS` too, e.g. 0.5,2 (the default with --html)")
	fs.IntVar(&o.Top, "top", 5, "show the `N` keys hit hardest by the replay, per class")
	fs.IntVar(&o.MaxClasses, "max-classes", 200, "endpoint classes before new paths fold into prefix classes")
	fs.IntVar(&o.MaxPolicies, "max-policies", 10, "group the classes into at most `N` policies, a catch-all \"default\" (match /) included: static assets and rare paths go to it; 0 gives every class its own policy")
	minShare := fs.Float64("min-share", 1, "with --max-policies, a pattern with less than `PERCENT` of the requests goes to the default policy")
	fs.IntVar(&o.MinBurst, "min-burst", 2, "never propose a burst below `N` (with --statistic keys): 2 lets a caller send a request again at once")
	fs.IntVar(&o.MinSamples, "min-samples", 100, "flag classes with fewer (key, second) samples as low on data")
	fs.Var(&fields, "field", "JSON field names for a kind, `KIND=NAME[,NAME]` (kinds: time, method, path, request, ip, user, status); repeatable")
	fs.Var(&trusted, "trusted-proxy", "a proxy `CIDR` (or address) whose X-Forwarded-For entries are believed: a list logged as the client is keyed by its rightmost address outside them, as the gateway does; repeatable (none: the leftmost address)")
	fs.Var(&anon, "anonymous-user", "a user field `VALUE` that means no one, so the caller is keyed by address; repeatable, replaces the defaults ("+strings.Join(defaultAnonymousUsers, " ")+")")
	fs.StringVar(&o.Statistic, "statistic", "keys", "reading of rate = 2 x p99: keys (p99 across keys of each key's busiest minute / 60; burst from the bucket each needs at that rate) or samples (p99 of all (key, second) counts; burst 5-10 x rate by burstiness)")
	fs.BoolVar(&o.KeepAbusers, "keep-abusers", false, "set no key apart: callers with mostly errors or 429s, and outliers, size the proposal too")
	fs.BoolVar(&o.NoReplay, "no-replay", false, "skip the replay of the proposal")
	fs.StringVar(&o.Progress, "progress", "auto", "progress line on standard error: auto (when a terminal), always, never")
	rest := args
	for {
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				help(stdout)
				return o, err
			}
			fmt.Fprintln(stderr, "Run 'sluice advise --help' for usage.")
			return o, fmt.Errorf("%w: %w", errFlag, err)
		}
		rest = fs.Args()
		if len(rest) == 0 {
			break
		}
		o.Inputs = append(o.Inputs, rest[0])
		rest = rest[1:]
	}
	if len(o.Inputs) == 0 {
		help(stderr)
		return o, errors.New("no log given: name files, globs, or - for standard input")
	}
	if !(*minShare >= 0 && *minShare <= 100) { // NaN too
		return o, fmt.Errorf("--min-share %v: want a percentage from 0 to 100", *minShare)
	}
	if o.MinBurst < 0 || o.MinBurst > maxMinBurst {
		return o, fmt.Errorf("--min-burst %d: want 0 to %d", o.MinBurst, maxMinBurst)
	}
	if o.MinSamples < 0 {
		return o, fmt.Errorf("--min-samples %d: want 0 or more", o.MinSamples)
	}
	o.MinShare = *minShare / 100
	if o.MaxPolicies < 0 {
		return o, errors.New("--max-policies must be at least 0 (0: a policy per class)")
	}
	for _, v := range trusted {
		p, err := netip.ParsePrefix(v)
		if err != nil {
			a, aerr := netip.ParseAddr(v)
			if aerr != nil {
				return o, fmt.Errorf("--trusted-proxy %q: want a CIDR such as 10.0.0.0/8 or an address", v)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		o.TrustedProxies = append(o.TrustedProxies, p.Masked())
	}
	if len(anon) > 0 {
		o.AnonymousUsers = anon
	}
	var err error
	if o.Fields, err = parseFieldOverrides(fields); err != nil {
		return o, err
	}
	if o.WhatIf, err = parseWhatIf(*whatIf, o.HTML != ""); err != nil {
		return o, err
	}
	switch o.ChartFormat {
	case "png", "svg":
	default:
		return o, fmt.Errorf("--chart-format %q: want png or svg", o.ChartFormat)
	}
	switch o.Statistic {
	case "keys", "samples":
	default:
		return o, fmt.Errorf("--statistic %q: want keys or samples", o.Statistic)
	}
	switch o.Progress {
	case "auto", "always", "never":
	default:
		return o, fmt.Errorf("--progress %q: want auto, always or never", o.Progress)
	}
	if o.Reorder < time.Second || o.Reorder > maxReorder*time.Second {
		return o, fmt.Errorf("--reorder-window %v: want 1s to %v", o.Reorder, maxReorder*time.Second)
	}
	if o.MaxClasses < 1 || o.Top < 0 {
		return o, errors.New("--max-classes must be at least 1 and --top at least 0")
	}
	return o, nil
}

// openStderr is the file behind w when it is one, for the terminal check.
func openStderr(w io.Writer) *os.File {
	f, _ := w.(*os.File)
	return f
}
