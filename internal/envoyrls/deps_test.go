package envoyrls

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDecidesWithoutHTTPLimit: the Envoy front door decides through
// package decide, not through the net/http middleware: neither it nor any
// package it links (package config among them, which hands the gateway
// plain data for the HTTP options) reaches httplimit or a JWT library. gRPC
// links net/http itself, which is fine.
func TestDecidesWithoutHTTPLimit(t *testing.T) {
	for _, pkg := range []string{
		"github.com/sluicehq/sluice/internal/envoyrls",
		"github.com/sluicehq/sluice/config",
	} {
		out, err := exec.Command("go", "list", "-deps", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list: %v\n%s", err, out)
		}
		for _, p := range strings.Fields(string(out)) {
			if p == "github.com/sluicehq/sluice/httplimit" || strings.HasPrefix(p, "github.com/golang-jwt/") {
				t.Errorf("%s links %s", pkg, p)
			}
		}
	}
}
