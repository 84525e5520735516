package advise

import (
	"compress/gzip"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/term"

	"github.com/sluicehq/sluice/internal/loggen"
)

const generateUsage = `Usage: sluice advise generate [flags] > access.log

Write a synthetic access log, deterministic from --seed, to try
'sluice advise' on: ordinary users and anonymous IPs with realistic daily
cycles, a few abusive clients, in the chosen format. It stops after --size
bytes (100MB by default) or --lines lines.

It writes to standard output, or to -o FILE (compressed when FILE ends in
.gz). When standard output is a terminal and neither --size nor --lines is
given, it refuses: redirect it, use -o, or say how much you want.

Flags:
`

// generateCommand is `sluice advise generate`: a synthetic log for demos.
func generateCommand(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sluice advise generate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o loggen.Options
	var size, format, out, start string
	var lines int64
	fs.Uint64Var(&o.Seed, "seed", 1, "random seed: the same seed writes the same log")
	fs.StringVar(&size, "size", "100MB", "stop after this much output (KB, MB, GB; 0 for no limit)")
	fs.Int64Var(&lines, "lines", 0, "stop after this many lines (0 for no limit)")
	fs.StringVar(&format, "format", "combined", "clf, combined, json, jsonalt or mixed")
	fs.Float64Var(&o.Rate, "rate", 2000, "mean requests per second of ordinary callers")
	fs.IntVar(&o.Users, "users", 5000, "authenticated callers")
	fs.IntVar(&o.IPs, "ips", 20000, "anonymous callers")
	fs.IntVar(&o.Abusers, "abusers", 3, "abusive clients (-1 for none)")
	fs.StringVar(&start, "start", "2026-01-05T00:00:00Z", "time of the first line, RFC 3339")
	fs.StringVar(&out, "o", "-", "output file; a name ending in .gz is compressed")
	fs.Usage = func() {} // printed below: --help on stdout, once
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			fmt.Fprint(stdout, generateUsage)
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return 0
		}
		fmt.Fprintln(stderr, "Run 'sluice advise generate --help' for usage.")
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "sluice advise generate: unexpected argument %q; run 'sluice advise generate --help' for usage.\n", fs.Arg(0))
		return 2
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if out == "-" && !set["size"] && !set["lines"] {
		if f, ok := stdout.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
			fmt.Fprintln(stderr, "sluice advise generate: not writing 100MB of log to a terminal; redirect it (> access.log), name a file (-o access.log.gz), or give --lines N or --size N")
			return 2
		}
	}
	fail := func(err error) int {
		fmt.Fprintln(stderr, "sluice advise generate:", err)
		return 1
	}
	f, ok := loggen.ParseFormat(format)
	if !ok {
		return fail(fmt.Errorf("format %q: want clf, combined, json, jsonalt or mixed", format))
	}
	o.Format = f
	t, err := time.Parse(time.RFC3339, start)
	if err != nil {
		return fail(fmt.Errorf("start %q: %w", start, err))
	}
	o.Start = t
	maxBytes, err := parseSize(size)
	if err != nil {
		return fail(err)
	}
	if maxBytes <= 0 && lines <= 0 {
		return fail(fmt.Errorf("give --size or --lines: the log would never end"))
	}
	switch {
	case !(o.Rate >= 0.001 && o.Rate <= 1e7): // NaN too: it hung, writing nothing
		return fail(fmt.Errorf("--rate %v: want the ordinary callers' requests a second, from 0.001 to 10000000", o.Rate))
	case o.Users < 0 || o.IPs < 0 || o.Users+o.IPs == 0:
		return fail(fmt.Errorf("--users %d, --ips %d: want 0 or more of each, and a caller at least", o.Users, o.IPs))
	case o.Abusers < -1:
		return fail(fmt.Errorf("--abusers %d: want 0 or more (-1 for none)", o.Abusers))
	case lines < 0:
		return fail(fmt.Errorf("--lines %d: want 0 (no limit) or more", lines))
	case t.Year() > 9000:
		return fail(fmt.Errorf("--start %s: want a year before 9000 (the advisor reads times up to the year 9999)", start))
	}
	w := stdout
	var closers []io.Closer
	if out != "-" {
		file, err := os.Create(out)
		if err != nil {
			return fail(err)
		}
		w = file
		closers = append(closers, file)
		if strings.HasSuffix(out, ".gz") {
			zw := gzip.NewWriter(file)
			w = zw
			closers = append([]io.Closer{zw}, closers...)
		}
	}
	st, err := loggen.New(o).Write(w, maxBytes, lines)
	for _, c := range closers {
		if cerr := c.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		return fail(err)
	}
	fmt.Fprintf(stderr, "wrote %d lines, %s\n", st.Lines, humanBytes(st.Bytes))
	return 0
}

// parseSize reads 100MB, 2GB, 512KB or a number of bytes (powers of 10).
func parseSize(s string) (int64, error) {
	u := strings.ToUpper(strings.TrimSpace(s))
	mult := int64(1)
	for _, x := range []struct {
		suffix string
		m      int64
	}{{"GIB", 1 << 30}, {"MIB", 1 << 20}, {"KIB", 1 << 10}, {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3}, {"G", 1e9}, {"M", 1e6}, {"K", 1e3}, {"B", 1}} {
		if v, ok := strings.CutSuffix(u, x.suffix); ok {
			u, mult = v, x.m
			break
		}
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(u), 64)
	if err != nil || f < 0 {
		return 0, fmt.Errorf("size %q: want a number of bytes such as 100MB or 2GB", s)
	}
	return int64(f * float64(mult)), nil
}
