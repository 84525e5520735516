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
	"text/tabwriter"

	"github.com/sluicehq/sluice"
	"go.yaml.in/yaml/v3"
)

func writeJSON(w io.Writer, rep *Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

func writeTable(w io.Writer, rep *Report) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "read %s: %d lines, %d malformed", humanBytes(rep.Bytes), rep.Lines, rep.Malformed)
	if rep.Unmatched > 0 {
		fmt.Fprintf(&b, ", %d matching no policy", rep.Unmatched)
	}
	fmt.Fprintf(&b, "; %.1f s, %.0f MB/s\n", rep.MeasureSeconds, rep.MBPerSecond)
	fmt.Fprintf(&b, "window %s: %s to %s\n", rep.Window, rep.WindowStart.Format("2006-01-02 15:04:05"), rep.WindowEnd.Format("2006-01-02 15:04:05 MST"))
	for _, bad := range rep.MalformedExamples {
		fmt.Fprintf(&b, "malformed %s:%d: %s: %q\n", bad.File, bad.Line, bad.Reason, bad.Text)
	}
	b.WriteString("\nper-key requests per second and per minute, over the (key, second) and (key, minute) pairs with traffic\n\n")
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "POLICY\tMATCH\tCALLER\tREQUESTS\tKEYS\tKEY-SECONDS\tPER SECOND p50/p90/p99/max\tPER MINUTE p50/p90/p99/max\tBURSTY\tRATE\tBURST\tREJECTED\tREJECTED KEYS\t")
	for _, c := range rep.Classes {
		flag := ""
		if c.LowData {
			flag = " (few samples)"
		}
		rej, keys, seen := "-", "-", "-"
		if c.Replay != nil {
			seen = fmt.Sprintf("~%d", c.Replay.Keys)
			rej = fmt.Sprintf("%d (%.2f%%)", c.Replay.Rejected, pct(c.Replay.Rejected, c.Replay.Requests))
			keys = fmt.Sprint(c.Replay.RejectedKeys)
		} else if !c.InConfig {
			rej = "not in config"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%d%s\t%d/%d/%d/%d\t%d/%d/%d/%d\t%.1f (x%d)\t%s\t%d\t%s\t%s\t\n",
			c.Policy, c.Match, c.Caller, c.PerSecond.Requests, seen, c.PerSecond.Samples, flag,
			c.PerSecond.P50, c.PerSecond.P90, c.PerSecond.P99, c.PerSecond.Max,
			c.PerMinute.P50, c.PerMinute.P90, c.PerMinute.P99, c.PerMinute.Max,
			c.Proposal.Burstiness, c.Proposal.Multiplier, c.Rate, c.Proposal.Burst, rej, keys)
	}
	tw.Flush()
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
			parts = append(parts, fmt.Sprintf("%s (%d)", k.Key, k.Rejected))
		}
		fmt.Fprintf(&b, "  %s %s: %s\n", c.Policy, c.Caller, strings.Join(parts, ", "))
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
			parts = append(parts, fmt.Sprintf("%s (%s: %d requests, %d errors, %d denied, busiest minute %d)", k.Key, k.Reason, k.Requests, k.Errors, k.Denied, k.PeakMinute))
		}
		more := ""
		if n := c.Keys.SetApart - len(c.Keys.WouldLimit); n > 0 {
			more = fmt.Sprintf(" and %d more", n)
		}
		fmt.Fprintf(&b, "  %s %s: %s%s\n", c.Policy, c.Caller, strings.Join(parts, ", "), more)
	}
	for _, n := range rep.Notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	_, err := w.Write(b.Bytes())
	return err
}

func pct(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) * 100 / float64(b)
}

// The configuration the advisor writes: the SPEC §4 shape, policies only.
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
	fmt.Fprintf(&b, "# Written by sluice advise from %s (%d lines),\n", strings.Join(rep.Inputs, ", "), rep.Lines)
	fmt.Fprintf(&b, "# window %s to %s: per class, rate = 2 x p99 across keys of each key's busiest minute / 60,\n",
		rep.WindowStart.Format("2006-01-02T15:04:05Z"), rep.WindowEnd.Format("2006-01-02T15:04:05Z"))
	b.WriteString("# burst = the keys' busiest seconds within 5-10 x rate (see docs/advise.md). Review before enforcing;\n# mode: shadow reports without rejecting.\n")
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
