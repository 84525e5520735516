package config

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice"
)

// TestOnErrorParsedOnce: store.on_error, parsed once, is the failure
// policy of the store, of a policy without its own, of an Envoy limit
// without its own and of the seven policies of Envoy's request limit
// overrides; a policy's or a limit's own on_error wins over it.
func TestOnErrorParsedOnce(t *testing.T) {
	for _, store := range []sluice.OnError{sluice.OnErrorLocal, sluice.OnErrorOpen, sluice.OnErrorClosed} {
		t.Run(store.String(), func(t *testing.T) {
			own := (store + 1) % 3 // another policy than the store's
			dir := rlsDir(t, map[string]string{"d.yaml": fmt.Sprintf(`domain: d
descriptors:
  - {key: a, rate_limit: {unit: second, requests_per_unit: 5}}
  - {key: b, rate_limit: {unit: second, requests_per_unit: 5, on_error: %s}}
`, own)})
			yaml := fmt.Sprintf(`store: {on_error: %s}
%spolicies:
  - {name: inherits, match: /a/, anonymous: [{rate: 1/s, burst: 1}]}
  - {name: own, match: /b/, anonymous: [{rate: 1/s, burst: 1}], on_error: %s}
`, store, rlsSection, own)
			c, err := Parse(filepath.Join(dir, "sluice.yaml"), dir, []byte(yaml))
			if err != nil {
				t.Fatal(err)
			}
			if got := c.Store.FailurePolicy(); got != store {
				t.Errorf("store: %v; want %v", got, store)
			}
			opts, err := c.LimiterOptions()
			if err != nil {
				t.Fatal(err)
			}
			if got := opts.Policies[0].OnError; got != store {
				t.Errorf("policy without on_error: %v; want the store's %v", got, store)
			}
			if got := opts.Policies[1].OnError; got != own {
				t.Errorf("policy with on_error: %v; want its own %v", got, own)
			}
			overrides := 0
			for _, p := range c.EnvoyRLS.Policies() {
				want := store
				switch {
				case p.Name == "rls:d/b":
					want = own
				case strings.HasPrefix(p.Name, "rls:@limit/"):
					overrides++
				case p.Name != "rls:d/a":
					t.Fatalf("unexpected policy %s", p.Name)
				}
				if p.OnError != want {
					t.Errorf("%s: on_error %v; want %v", p.Name, p.OnError, want)
				}
				if p.Local {
					t.Errorf("%s: Local set; OnError says it", p.Name)
				}
			}
			if overrides != 7 {
				t.Errorf("%d policies of request limit overrides; want 7", overrides)
			}
		})
	}
}
