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
// the real logs and on a generated one. The configuration loads in sluice.
func TestFixedPoint(t *testing.T) {
	dir := realLogs(t)
	inputs := map[string]string{"generated": genFile(t, t.TempDir(), loggen.Options{Seed: 11, Format: loggen.Mixed, Rate: 300}, 3e6)}
	for _, n := range realLogNames {
		inputs[n] = filepath.Join(dir, n)
	}
	for name, path := range inputs {
		t.Run(name, func(t *testing.T) {
			tmp := t.TempDir()
			first, second := filepath.Join(tmp, "first.yaml"), filepath.Join(tmp, "second.yaml")
			// the notes differ: the first run says which patterns it left out
			a := reportJSON(t, path, Options{Window: 0, OutConfig: first}, true)
			b := reportJSON(t, path, Options{Window: 0, OutConfig: second, Config: first}, true)
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
		})
	}
}
