package envoyrls

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDecidesWithoutHTTPLimit: the Envoy front door decides through
// package decide, not through the net/http middleware: it imports neither
// httplimit nor a JWT library, and the only import that still brings them
// in is package config (whose LimiterOptions builds httplimit's options),
// so no new path to them creeps in. gRPC links net/http itself, which is
// fine.
func TestDecidesWithoutHTTPLimit(t *testing.T) {
	const self = "github.com/sluicehq/sluice/internal/envoyrls"
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", self).CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	imports := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		imports[f[0]] = f[1:]
	}
	banned := func(p string) bool {
		return p == "github.com/sluicehq/sluice/httplimit" || strings.HasPrefix(p, "github.com/golang-jwt/")
	}
	reaches := map[string]bool{}
	var reach func(p string) bool
	reach = func(p string) bool {
		if r, ok := reaches[p]; ok {
			return r
		}
		reaches[p] = false
		r := banned(p)
		for _, q := range imports[p] {
			r = reach(q) || r
		}
		reaches[p] = r
		return r
	}
	for _, p := range imports[self] {
		switch {
		case banned(p):
			t.Errorf("package envoyrls imports %s", p)
		case reach(p) && p != "github.com/sluicehq/sluice/config":
			t.Errorf("package envoyrls reaches httplimit or golang-jwt through %s", p)
		}
	}
}
