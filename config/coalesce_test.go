package config

import (
	"fmt"
	"testing"
)

// Coalescing is on unless the configuration turns it off.
func TestCoalesceIsOnByDefault(t *testing.T) {
	for _, tc := range []struct {
		line string
		want bool
	}{{"", true}, {"\n    coalesce: true", true}, {"\n    coalesce: false", false}} {
		yaml := fmt.Sprintf("store:\n  type: redis\n  redis:\n    url: redis://127.0.0.1:6379/0%s\npolicies:\n  - name: p\n    match: /\n    anonymous: [{rate: 1/s, burst: 1}]\n", tc.line)
		c, err := Parse("sluice.yaml", ".", []byte(yaml))
		if err != nil {
			t.Fatalf("%q: %v", tc.line, err)
		}
		if got := c.Store.Redis.CoalesceOn(); got != tc.want {
			t.Errorf("%q: coalescing on %v, want %v", tc.line, got, tc.want)
		}
	}
	if !(Redis{}).CoalesceOn() {
		t.Error("the zero Redis section does not coalesce")
	}
}
