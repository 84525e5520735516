package advise

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/sluicehq/sluice"
	"go.yaml.in/yaml/v3"
)

func writeJSON(w io.Writer, rep *Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// tableWidth is the most columns a line of the text report takes.
const tableWidth = 120

// writeTable writes the report for a terminal, every line within
// tableWidth columns: one row per class with the figures an operator
// decides on (the full distributions are in --json), then the keys the
// replay hit hardest, the keys set apart, and the notes, wrapped.
func writeTable(w io.Writer, rep *Report) error {
	var b bytes.Buffer
	line := fmt.Sprintf("read %s: %d lines, %d malformed", humanBytes(rep.Bytes), rep.Lines, rep.Malformed)
	if rep.OutsideWindow > 0 {
		line += fmt.Sprintf(", %d outside the window", rep.OutsideWindow)
	}
	if rep.Unmatched > 0 {
		line += fmt.Sprintf(", %d matching no policy", rep.Unmatched)
	}
	line += fmt.Sprintf("; %.1f s, %.0f MB/s", rep.MeasureSeconds, rep.MBPerSecond)
	wrap(&b, line, "")
	for _, f := range rep.Files {
		wrap(&b, "  "+f.String(), "    ")
	}
	wrap(&b, fmt.Sprintf("window %s: %s to %s", rep.Window, rep.WindowStart.Format("2006-01-02 15:04:05"), rep.WindowEnd.Format("2006-01-02 15:04:05 MST")), "")
	for _, bad := range rep.MalformedExamples {
		wrap(&b, fmt.Sprintf("malformed %s:%d: %s: %q", bad.File, bad.Line, bad.Reason, clip(bad.Text, 60)), "  ")
	}
	b.WriteString("\nper class: requests, callers, callers set apart; busiest minute and second per key (p99/max);\n")
	b.WriteString("the proposal, and what its replay on this log rejected. Policy names and distributions: --json.\n\n")
	const row = "%-27s %-4s %8s %7s %5s %10s %10s %7s %6s %14s %5s %6s\n" // 120 columns
	fmt.Fprintf(&b, row, "MATCH", "WHO", "REQUESTS", "KEYS", "APART", "MIN p99/mx", "SEC p99/mx", "RATE", "BURST", "REJECTED", "RKEYS", "LEGIT")
	for _, c := range rep.Classes {
		who := "anon"
		if c.Caller == "authenticated" {
			who = "auth"
		}
		match := c.Match
		if c.Policy == defaultPolicy && c.Match == defaultMatch {
			match += " (default)"
		}
		if c.LowData {
			match += " *"
		}
		if c.Keys.FewCallers {
			match += " !"
		}
		rej, rkeys, seen, legit := "-", "-", "-", "-"
		if c.Keys.Keys > 0 {
			seen = fmt.Sprint(c.Keys.Keys) // exact, from the keys' summaries
		} else if c.Replay != nil {
			seen = fmt.Sprintf("~%d", c.Replay.Keys)
		}
		if c.Replay != nil {
			rej = fmt.Sprintf("%d %.1f%%", c.Replay.Rejected, pct(c.Replay.Rejected, c.Replay.Requests))
			rkeys = fmt.Sprint(c.Replay.RejectedKeys)
			legit = fmt.Sprintf("%.1f%%", c.Replay.LegitimateShare)
			if c.Replay.TooStrict {
				legit += "!"
			}
		} else if !c.InConfig {
			rej = "not in config"
		}
		// The minute's p99 is the one the rate is twice (--statistic keys:
		// across the callers' busiest minutes), not the p99 of all (key,
		// minute) samples, which printed 10 beside a rate of 22/m.
		minP99 := c.PerMinute.P99
		if c.Keys.Normal > 0 {
			minP99 = c.Keys.PeakMinuteP99
		}
		fmt.Fprintf(&b, row, clip(match, 27), who, clip(fmt.Sprint(c.PerSecond.Requests), 8), clip(seen, 7), clip(fmt.Sprint(c.Keys.SetApart), 5),
			clip(fmt.Sprintf("%d/%d", minP99, c.PerMinute.Max), 10), clip(fmt.Sprintf("%d/%d", c.PerSecond.P99, c.PerSecond.Max), 10),
			clip(c.Rate, 7), clip(fmt.Sprint(c.Proposal.Burst), 6), clip(rej, 14), clip(rkeys, 5), clip(legit, 6))
	}
	b.WriteString("(MIN p99/mx: the p99 across callers of each one's busiest minute, which RATE is twice, and the busiest minute\n")
	b.WriteString(" (--statistic samples: of all (key, minute) samples); SEC p99/mx: of all (key, second) samples, which RATE is\n")
	b.WriteString(" twice with --statistic samples; * few samples: fewer than --min-samples (key, second) samples;\n")
	b.WriteString(" ! few callers: sized on fewer than 12;\n")
	b.WriteString(" LEGIT: the share of the requests of callers not set apart the replay rejected, ! above 1%)\n")
	hit := false
	for _, c := range rep.Classes {
		if c.Replay == nil || len(c.Replay.Top) == 0 {
			continue
		}
		if !hit {
			b.WriteString("\nkeys hit hardest by the replay\n")
			hit = true
		}
		var parts []string
		for _, k := range c.Replay.Top {
			parts = append(parts, fmt.Sprintf("%s (%d)", clip(k.Key, 40), k.Rejected))
		}
		wrap(&b, fmt.Sprintf("  %s %s: %s", c.Match, c.Caller, strings.Join(parts, ", ")), "      ")
	}
	apart := false
	for _, c := range rep.Classes {
		if len(c.Keys.WouldLimit) == 0 {
			continue
		}
		if !apart {
			b.WriteString("\nkeys set apart as ones the proposal would limit (they do not size it)\n")
			apart = true
		}
		var parts []string
		for _, k := range c.Keys.WouldLimit {
			parts = append(parts, fmt.Sprintf("%s (%s: %d requests, %d errors, %d denied, busiest minute %d)", clip(k.Key, 40), k.Reason, k.Requests, k.Errors, k.Denied, k.PeakMinute))
		}
		more := ""
		if n := c.Keys.SetApart - len(c.Keys.WouldLimit); n > 0 {
			more = fmt.Sprintf(" and %d more", n)
		}
		wrap(&b, fmt.Sprintf("  %s %s: %s%s", c.Match, c.Caller, strings.Join(parts, ", "), more), "      ")
	}
	for _, n := range rep.Notes {
		wrap(&b, "note: "+n, "      ")
	}
	_, err := w.Write(b.Bytes())
	return err
}

// clip shortens s to n columns, with an ellipsis in the middle, so that
// both ends of a long pattern or key stay readable.
func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	head := (n - 1) / 2
	return string(r[:head]) + "…" + string(r[len(r)-(n-1-head):])
}

// wrap writes text in lines of at most tableWidth columns, breaking at
// spaces, continuation lines indented; a word longer than a line is
// clipped.
func wrap(b *bytes.Buffer, text, indent string) {
	width := tableWidth
	prefix := ""
	for {
		avail := width - utf8.RuneCountInString(prefix)
		if utf8.RuneCountInString(text) <= avail {
			b.WriteString(prefix + text + "\n")
			return
		}
		r := []rune(text)
		cut := strings.LastIndexByte(string(r[:avail+1]), ' ')
		var head string
		if cut <= 0 {
			sp := strings.IndexByte(text, ' ')
			if sp < 0 {
				b.WriteString(prefix + clip(text, avail) + "\n")
				return
			}
			head, text = clip(text[:sp], avail), text[sp+1:]
		} else {
			head, text = string(r[:avail+1])[:cut], strings.TrimLeft(text[cut:], " ")
		}
		b.WriteString(prefix + head + "\n")
		if text == "" {
			return
		}
		prefix = indent
	}
}

func pct(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) * 100 / float64(b)
}

// The configuration the advisor writes: sluice serve's shape, policies only.
type configFile struct {
	Policies []configPolicyOut `yaml:"policies"`
}

type configPolicyOut struct {
	Name          string       `yaml:"name"`
	Match         string       `yaml:"match"`
	Anonymous     []configRule `yaml:"anonymous,omitempty"`
	Authenticated []configRule `yaml:"authenticated,omitempty"`
	Mode          string       `yaml:"mode,omitempty"`
}

type configRule struct {
	Rate  string `yaml:"rate"`
	Burst int64  `yaml:"burst"`
}

// buildConfig turns the classes in the configuration into policies, one
// per endpoint, sorted by name.
func buildConfig(rep *Report, mode string) configFile {
	byName := make(map[string]*configPolicyOut)
	var order []string
	for _, c := range rep.Classes {
		if !c.InConfig {
			continue
		}
		p := byName[c.Policy]
		if p == nil {
			p = &configPolicyOut{Name: c.Policy, Match: c.Match, Mode: mode}
			byName[c.Policy] = p
			order = append(order, c.Policy)
		}
		r := []configRule{{Rate: c.Rate, Burst: c.Proposal.Burst}}
		if c.Caller == "authenticated" {
			p.Authenticated = r
		} else {
			p.Anonymous = r
		}
	}
	slices.Sort(order)
	var cf configFile
	for _, n := range order {
		cf.Policies = append(cf.Policies, *byName[n])
	}
	return cf
}

func writeConfig(w io.Writer, rep *Report, mode string) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# Written by sluice advise from %s (%d lines, %d outside the window),\n", strings.Join(rep.Inputs, ", "), rep.Lines, rep.OutsideWindow)
	fmt.Fprintf(&b, "# window %s to %s: per class, rate = 2 x p99 across keys of each key's busiest minute / 60\n# (never one of the three busiest keys'),\n",
		rep.WindowStart.Format("2006-01-02T15:04:05Z"), rep.WindowEnd.Format("2006-01-02T15:04:05Z"))
	b.WriteString("# burst = the p99 of the bucket each key needs at that rate, within 5-10 x rate or up to a minute of it\n# (see docs/advise.md). Review before enforcing; mode: shadow reports without rejecting.\n")
	b.WriteString("# Lines read, per file:\n")
	for _, f := range rep.Files {
		fmt.Fprintf(&b, "#   %s\n", f.String())
	}
	for _, c := range rep.Classes {
		if c.Replay != nil {
			fmt.Fprintf(&b, "# %s %s: the replay rejects %.1f%% of the legitimate requests (callers not set apart)", c.Policy, c.Caller, c.Replay.LegitimateShare)
			if c.Replay.TooStrict {
				fmt.Fprintf(&b, ", more than %g%%: too strict for its heavy callers", maxLegitDenied)
			}
			b.WriteString("\n")
		}
	}
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(buildConfig(rep, mode)); err != nil {
		return err
	}
	if err := enc.Close(); err != nil {
		return err
	}
	_, err := w.Write(b.Bytes())
	return err
}

func writeConfigFile(path string, rep *Report, mode string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := writeConfig(f, rep, mode); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", path, err)
	}
	return f.Close()
}

// readConfig reads back a configuration the advisor wrote, checking every
// rule as sluice reads it and every pattern as ServeMux registers it.
func readConfig(data []byte) (configFile, error) {
	var cf configFile
	if err := yaml.Unmarshal(data, &cf); err != nil {
		return cf, err
	}
	if len(cf.Policies) == 0 {
		return cf, fmt.Errorf("no policies")
	}
	names := make(map[string]bool)
	mux := http.NewServeMux()
	for _, p := range cf.Policies {
		if err := registerPattern(mux, p.Match); err != nil {
			return cf, fmt.Errorf("policy %q: match %q: %w", p.Name, p.Match, err)
		}
		if p.Name == "" || names[p.Name] {
			return cf, fmt.Errorf("policy name %q empty or repeated", p.Name)
		}
		names[p.Name] = true
		if len(p.Anonymous)+len(p.Authenticated) == 0 {
			return cf, fmt.Errorf("policy %q has no rules", p.Name)
		}
		for _, r := range append(slices.Clone(p.Anonymous), p.Authenticated...) {
			if _, err := sluice.NewRule(r.Rate, r.Burst); err != nil {
				return cf, fmt.Errorf("policy %q: %w", p.Name, err)
			}
		}
	}
	return cf, nil
}
