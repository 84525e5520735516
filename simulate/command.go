// Package simulate is `sluice simulate`: it runs traffic scenarios through
// every rate limiting algorithm of package algo, with the real stores and
// a simulated clock, and measures what sets them apart: how
// much each admits in the worst second and the worst window (the fixed
// window's double burst at an edge), how far each is from an exact
// sliding log (the sliding counter's approximation), the memory a key's
// state takes (the sliding log's cost) and the cost of a check.
//
// Scenarios: steady (Poisson at 1.5 × the rate), bursty (bursts over a
// trickle), boundary (twice the burst on each side of a window edge),
// many-keys (Zipf-popular clients) and replay (an access log's times and
// client keys). Every algorithm is given the same rule and the same
// requests, one at a time in time order, on an in-memory store whose
// clock is the requests' time; with --redis the same requests also go
// through the Redis scripts in client-clock mode. The requests and the
// decisions follow from --seed alone; bytes and nanoseconds are
// measurements of this machine.
package simulate

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
)

const usage = `Usage: sluice simulate [flags]

Runs traffic scenarios through every rate limiting algorithm (token bucket,
fixed window, sliding log, sliding window counter, leaky bucket) with the
real stores and a simulated clock, and reports per algorithm:

  admitted      requests let through (delayed: held first, leaky bucket)
  worst 1s      most requests one key got through in any 1 s, and the bound
  worst W       the same for any window W = burst/rate, and the bound
  vs exact      admitted compared with an exact sliding log on the same
                traffic, and the share of requests decided differently
  bytes/key     state per key: measured heap in process, MEMORY USAGE in Redis
  ns/check      wall time of one check (on Redis, mostly the round trip),
                and in parentheses the script's own time in Redis

Every algorithm reads the rule the same way: a window W = burst/rate with a
limit of burst per window; the leaky bucket queues burst and drains at rate.
Requests and decisions are deterministic from --seed.

Scenarios: steady, bursty, boundary, many-keys, replay (needs --log), all.

Flags:
`

// Scenario is one scenario's run: its traffic and every algorithm's result.
type Scenario struct {
	Name     string        `json:"name"`
	About    string        `json:"about"`
	Rule     string        `json:"rule"`
	Window   time.Duration `json:"-"`
	WindowS  float64       `json:"window_seconds"`
	Requests int           `json:"requests"`
	Keys     int           `json:"keys"`
	Seconds  float64       `json:"seconds"`
	Results  []*Result     `json:"results"`
}

// Report is the whole output of a run, as --json writes it.
type Report struct {
	Command   string      `json:"command"`
	Seed      uint64      `json:"seed"`
	Scenarios []*Scenario `json:"scenarios"`
}

type options struct {
	scenario   string
	rate       string
	burst      int64
	duration   time.Duration
	keys       int
	seed       uint64
	logFile    string
	redisAddr  string
	chart      string
	jsonOut    bool
	algorithms string
}

// Command runs `sluice simulate` with args (the words after "simulate")
// and returns the process exit status: 0, 1 when the run fails, 2 for
// bad flags.
func Command(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	var o options
	fs := flag.NewFlagSet("sluice simulate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.scenario, "scenario", "all", "steady, bursty, boundary, many-keys, replay or all (comma-separated)")
	fs.StringVar(&o.rate, "rate", "10/s", "the rule's rate, as a policy writes it (10/s, 600/m, ...)")
	fs.Int64Var(&o.burst, "burst", 100, "the rule's burst (the limit per window)")
	fs.DurationVar(&o.duration, "duration", time.Minute, "simulated time of each synthetic scenario")
	fs.IntVar(&o.keys, "keys", 1000, "clients in the many-keys scenario")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the synthetic traffic")
	fs.StringVar(&o.logFile, "log", "", "access log to replay (Common Log Format or JSON lines; - for standard input)")
	fs.StringVar(&o.redisAddr, "redis", "", "also run the Redis scripts on this server (host:port or redis:// URL), client-clock mode")
	fs.StringVar(&o.chart, "chart", "", "write a PNG of admitted requests over time per algorithm (with several scenarios, one file each: NAME-SCENARIO.png)")
	fs.BoolVar(&o.jsonOut, "json", false, "write the report as JSON")
	fs.StringVar(&o.algorithms, "algorithms", strings.Join(algo.Names(), ","), "algorithms to run (comma-separated)")
	fs.Usage = func() {} // printed below: --help on stdout, once
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, usage)
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return 0
		}
		fmt.Fprintln(stderr, "Run 'sluice simulate --help' for usage.")
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "sluice simulate: unexpected argument %q; see sluice simulate --help\n", fs.Arg(0))
		return 2
	}
	rep, err := run(o, args, stdin, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "sluice simulate:", err)
		if errors.Is(err, errUsage) {
			return 2
		}
		return 1
	}
	if o.jsonOut {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			fmt.Fprintln(stderr, "sluice simulate:", err)
			return 1
		}
		return 0
	}
	writeText(stdout, rep)
	return 0
}

var errUsage = errors.New("usage")

// maxSyntheticRequests bounds the rule's rate × the duration of a
// synthetic scenario, whose requests (a multiple of it) are all held in
// memory: 2,000,000 is a few hundred MB.
const maxSyntheticRequests = 2_000_000

func usageErr(format string, a ...any) error {
	return fmt.Errorf("%w: %s", errUsage, fmt.Sprintf(format, a...))
}

func run(o options, args []string, stdin io.Reader, stderr io.Writer) (*Report, error) {
	rate, err := sluice.ParseRate(o.rate)
	if err != nil {
		return nil, usageErr("--rate: %v", err)
	}
	rule := sluice.Rule{Rate: rate, Burst: o.burst}
	if err := rule.Validate(); err != nil {
		return nil, usageErr("--burst: %v", err)
	}
	if o.duration <= 0 {
		return nil, usageErr("--duration %v: want a positive duration such as 60s", o.duration)
	}
	if n := rate * o.duration.Seconds(); n > maxSyntheticRequests {
		// Each request is held in memory (about 120 bytes, and the
		// decisions of every algorithm): --rate 1e9/s ran without end.
		return nil, usageErr("--rate %s for --duration %v is %.0f requests a scenario: want at most %d (lower one of them)", o.rate, o.duration, n, maxSyntheticRequests)
	}
	if o.keys < 2 {
		return nil, usageErr("--keys %d: want 2 or more", o.keys)
	}
	names, err := algorithmList(o.algorithms)
	if err != nil {
		return nil, err
	}
	scenarios, err := scenarioList(o)
	if err != nil {
		return nil, err
	}
	var client *redis.Client
	if o.redisAddr != "" {
		client, err = redisClient(o.redisAddr)
		if err != nil {
			return nil, err
		}
		defer client.Close()
		if err := client.Ping(context.Background()).Err(); err != nil {
			return nil, fmt.Errorf("--redis %s: %w", o.redisAddr, err)
		}
	}

	rep := &Report{Command: "sluice simulate " + strings.Join(args, " "), Seed: o.seed}
	p := params{rule: rule, duration: o.duration.Microseconds(), keys: o.keys, seed: o.seed}
	for _, name := range scenarios {
		var tr traffic
		if name == "replay" {
			tr, err = replayTraffic(o.logFile, stdin, stderr)
			if err != nil {
				return nil, err
			}
		} else {
			tr = generate(name, p)
		}
		sc, err := simulate(tr, rule, names, client)
		if err != nil {
			return nil, err
		}
		rep.Scenarios = append(rep.Scenarios, sc)
		if o.chart != "" {
			file := o.chart
			if len(scenarios) > 1 {
				ext := filepath.Ext(file)
				file = strings.TrimSuffix(file, ext) + "-" + name + ext
			}
			if err := saveChart(file, sc, tr, rule); err != nil {
				return nil, fmt.Errorf("--chart %s: %w", file, err)
			}
		}
	}
	return rep, nil
}

func algorithmList(s string) ([]string, error) {
	var names []string
	for n := range strings.SplitSeq(s, ",") {
		n = strings.TrimSpace(n)
		if !slices.Contains(algo.Names(), n) {
			return nil, usageErr("--algorithms: %q: want some of %s", n, strings.Join(algo.Names(), ", "))
		}
		if slices.Contains(names, n) {
			continue // named twice: run once
		}
		names = append(names, n)
	}
	return names, nil
}

func scenarioList(o options) ([]string, error) {
	var list []string
	for n := range strings.SplitSeq(o.scenario, ",") {
		switch n = strings.TrimSpace(n); n {
		case "all":
			list = append(list, scenarioNames...)
			if o.logFile != "" {
				list = append(list, "replay")
			}
		case "replay":
			if o.logFile == "" {
				return nil, usageErr("--scenario replay needs --log FILE (or --log - for standard input)")
			}
			list = append(list, n)
		case "steady", "bursty", "boundary", "many-keys":
			list = append(list, n)
		default:
			return nil, usageErr("--scenario %q: want steady, bursty, boundary, many-keys, replay or all", n)
		}
	}
	return list, nil
}

func redisClient(addr string) (*redis.Client, error) {
	if strings.Contains(addr, "://") {
		opt, err := redis.ParseURL(addr)
		if err != nil {
			return nil, usageErr("--redis %s: %v", addr, err)
		}
		return redis.NewClient(opt), nil
	}
	return redis.NewClient(&redis.Options{Addr: addr}), nil
}

func replayTraffic(file string, stdin io.Reader, stderr io.Writer) (traffic, error) {
	r := stdin
	if file != "-" {
		f, err := os.Open(file)
		if err != nil {
			return traffic{}, fmt.Errorf("--log: %w", err)
		}
		defer f.Close()
		r = f
	}
	tr, bad, err := readLog(r)
	if err != nil {
		return traffic{}, fmt.Errorf("--log %s: %w", file, err)
	}
	if bad > 0 {
		fmt.Fprintf(stderr, "sluice simulate: %s: skipped %d lines without a time and a client key\n", file, bad)
	}
	return tr, nil
}

// simulate runs tr through every algorithm, in memory and on Redis when a
// client is given, and measures the results against the exact log.
func simulate(tr traffic, rule sluice.Rule, names []string, client *redis.Client) (*Scenario, error) {
	w := algo.Window(rule)
	sc := &Scenario{Name: tr.name, About: tr.about, Rule: rule.String(), Window: w, WindowS: w.Seconds(),
		Requests: len(tr.events), Keys: len(tr.keys)}
	if len(tr.events) == 0 {
		return sc, nil
	}
	first, last := tr.events[0].at, tr.events[len(tr.events)-1].at
	sc.Seconds = float64(last-first) / 1e6
	ru := &runner{rule: rule, tr: tr, first: first, bin: chartBin(last - first), redis: client,
		tag: strconv.FormatInt(time.Now().UnixNano(), 36)}
	exact, err := ru.memory(algo.SlidingLog)
	if err != nil {
		return nil, err
	}
	for _, name := range names {
		res := exact
		if name != algo.SlidingLog {
			if res, err = ru.memory(name); err != nil {
				return nil, err
			}
		}
		ru.measure(res, exact)
		sc.Results = append(sc.Results, res)
		if client == nil {
			continue
		}
		rr, err := ru.onRedis(context.Background(), name)
		if err != nil {
			return nil, err
		}
		ru.measure(rr, exact)
		agree := 0
		for i := range rr.decisions {
			if rr.decisions[i] == res.decisions[i] && rr.delays[i] == res.delays[i] {
				agree++
			}
		}
		rr.AgreesWithMemory = &agree
		sc.Results = append(sc.Results, rr)
	}
	return sc, nil
}

// chartBin is the chart's time step: at most 120 points over the run, at
// least 100 ms, a round number of milliseconds.
func chartBin(span int64) int64 {
	for _, b := range []int64{100_000, 200_000, 500_000, 1_000_000, 2_000_000, 5_000_000, 10_000_000, 30_000_000, 60_000_000} {
		if span/b <= 120 {
			return b
		}
	}
	return max(60_000_000, span/120)
}

func saveChart(file string, sc *Scenario, tr traffic, rule sluice.Rule) error {
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	bin := chartBin(tr.events[len(tr.events)-1].at - tr.events[0].at)
	if err := writeChart(f, sc, rule, float64(bin)/1e6); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func writeText(w io.Writer, rep *Report) {
	for i, sc := range rep.Scenarios {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "scenario %s: %s\n", sc.Name, sc.About)
		fmt.Fprintf(w, "  %d requests from %d %s over %.1f s; rule %s: window W = %v, limit %s per window\n\n",
			sc.Requests, sc.Keys, plural(sc.Keys, "key", "keys"), sc.Seconds, sc.Rule, sc.Window, strconv.FormatInt(burstOf(sc), 10))
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "algorithm\tbackend\tadmitted\tdelayed\tworst 1s\t(bound)\tworst W\t(bound)\tvs exact\tdiffer\tbytes/key\tns/check\t(in server)\t")
		for _, r := range sc.Results {
			agree := ""
			if r.AgreesWithMemory != nil && *r.AgreesWithMemory != sc.Requests {
				agree = fmt.Sprintf("  DISAGREES with memory on %d", sc.Requests-*r.AgreesWithMemory)
			}
			server := "-"
			if r.ServerNsPerCheck > 0 {
				server = fmt.Sprintf("(%.0f)", r.ServerNsPerCheck)
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\t%d\t%s\t%+.2f%%\t%.2f%%\t%.0f\t%.0f\t%s\t%s\n",
				r.Algorithm, r.Backend, r.Admitted, r.Delayed, r.Worst1s, boundText(r.Bound1s), r.WorstWindow, boundText(r.BoundWindow),
				r.VsExactPct, r.DifferPct, r.BytesPerKey, r.NsPerCheck, server, agree)
		}
		tw.Flush()
	}
}

func burstOf(sc *Scenario) int64 {
	_, b, _ := strings.Cut(sc.Rule, " burst ")
	n, _ := strconv.ParseInt(b, 10, 64)
	return n
}

func boundText(b int) string {
	if b < 0 {
		return "(-)"
	}
	return "(≤" + strconv.Itoa(b) + ")"
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
