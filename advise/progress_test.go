package advise

import (
	"bytes"
	"regexp"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/loggen"
)

// TestProgressEveryPass: every pass's progress line counts what it reads.
// Its last drawing (when the pass ends) shows all the bytes of the inputs
// at 100% and all their lines; before, "measuring the proposed routes"
// and "measuring the bursts" drew counters no reader advanced, and stayed
// at 0 B for their whole run (issue #27, item 9).
func TestProgressEveryPass(t *testing.T) {
	t.Parallel()
	path := genFile(t, t.TempDir(), loggen.Options{Seed: 5, Format: loggen.Combined, Rate: 200, Users: 50, IPs: 200}, 2<<20)
	var stderr bytes.Buffer
	rep, err := Run(Options{Inputs: []string{path}, MaxClasses: 50, MaxPolicies: 6, MinShare: 0.01, Top: 3, Progress: "always", stderr: &stderr})
	if err != nil {
		t.Fatal(err)
	}
	// the last drawing of each pass
	last := map[string]string{}
	draw := regexp.MustCompile(`^([a-z ,]+?) [0-9.]+ (?:B|KiB|MiB|GiB)`)
	for _, l := range strings.FieldsFunc(stderr.String(), func(r rune) bool { return r == '\r' || r == '\n' }) {
		if m := draw.FindStringSubmatch(l); m != nil {
			last[m[1]] = strings.TrimSuffix(l, "\x1b[K")
		}
	}
	lines := regexp.MustCompile(`  ([0-9.]+k?) lines`)
	for _, pass := range []string{"measuring", "measuring the proposed routes", "measuring the bursts", "replaying"} {
		l, ok := last[pass]
		if !ok {
			t.Errorf("no progress line for %q in:\n%q", pass, stderr.String())
			continue
		}
		if !strings.Contains(l, "100%") || strings.HasPrefix(l, pass+" 0 B") {
			t.Errorf("%q ends at %q: want all its bytes, 100%%", pass, l)
		}
		m := lines.FindStringSubmatch(l)
		if m == nil {
			t.Errorf("%q: no line count in %q", pass, l)
			continue
		}
		if want := humanCount(rep.Lines); m[1] != want {
			t.Errorf("%q ends at %s lines, want %s", pass, m[1], want)
		}
	}
}
