package advise

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/loggen"
)

// TestFixedPoint: advise → --out-config → advise --config that file gives
// the same classes and numbers, and writes the same configuration, on
// the real logs and on a generated one, with a policy per class and with
// the classes grouped into a handful. The configuration loads in sluice.
func TestFixedPoint(t *testing.T) {
	dir := realLogs(t)
	inputs := map[string]string{"generated": genFile(t, t.TempDir(), loggen.Options{Seed: 11, Format: loggen.Mixed, Rate: 300}, 3e6)}
	for _, n := range realLogNames {
		inputs[n] = filepath.Join(dir, n)
	}
	for label, path := range inputs {
		for _, grouped := range []bool{false, true} {
			if raceEnabled && !grouped {
				continue // the race detector makes it ten times slower: the command's default only
			}
			name, maxPolicies := label, 0
			if grouped {
				name, maxPolicies = label+"/grouped", 10
			}
			t.Run(name, func(t *testing.T) { fixedPoint(t, path, Options{Window: 0, MaxPolicies: maxPolicies, MinShare: 0.01}) })
		}
	}
}

func fixedPoint(t *testing.T, path string, o Options) {
	tmp := t.TempDir()
	first, second := filepath.Join(tmp, "first.yaml"), filepath.Join(tmp, "second.yaml")
	// the notes differ: the first run says which patterns it left out
	o.OutConfig = first
	a := reportJSON(t, path, o, true)
	o.OutConfig, o.Config = second, first
	b := reportJSON(t, path, o, true)
	if !bytes.Equal(a, b) {
		t.Errorf("advising again with its own configuration changes the report:\n%s", firstDiff(a, b))
	}
	fa, _ := os.ReadFile(first)
	fb, _ := os.ReadFile(second)
	if !bytes.Equal(fa, fb) {
		t.Errorf("the configurations differ:\n%s", firstDiff(fa, fb))
	}
	cfg := filepath.Join(tmp, "sluice.yaml")
	if err := os.WriteFile(cfg, append([]byte("upstream: http://127.0.0.1:1\n"), fa...), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := config.Load(cfg); err != nil {
		t.Errorf("sluice does not load the configuration: %v", err)
	}
}
