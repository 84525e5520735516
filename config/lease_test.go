package config

import (
	"strings"
	"testing"
	"time"
)

// TestPolicyLease: a policy's lease parses, and every mistake is named
// with its line.
func TestPolicyLease(t *testing.T) {
	c, err := Parse("ok.yaml", ".", []byte(`store: {type: redis, redis: {url: "redis://127.0.0.1:1/0"}}
policies:
  - {name: a, match: /, anonymous: [{rate: 100/s, burst: 200}], lease: {tokens: 50, ttl: 100ms}}
`))
	if err != nil {
		t.Fatal(err)
	}
	if l := c.Policies[0].Lease; l == nil || *l != (Lease{Tokens: 50, TTL: 100 * time.Millisecond}) {
		t.Fatalf("lease %+v", l)
	}
	for _, c := range []struct{ yaml, want string }{
		{`policies:
  - {name: a, match: /, anonymous: [{rate: 1/s, burst: 2}], lease: {tokens: 5, ttl: 1s}}`,
			"bad.yaml:2: policies[0].lease: needs store.type: redis"},
		{`store: {type: redis, redis: {url: "redis://127.0.0.1:1/0"}}
policies:
  - {name: a, match: /, algorithm: fixed_window, anonymous: [{rate: 1/s, burst: 2}], lease: {tokens: 5, ttl: 1s}}`,
			"bad.yaml:3: policies[0].lease: needs algorithm: token_bucket, not fixed_window"},
		{`store: {type: redis, redis: {url: "redis://127.0.0.1:1/0"}}
policies:
  - {name: a, match: /, max_delay: 1s, anonymous: [{rate: 1/s, burst: 2}], lease: {tokens: 5, ttl: 1s}}`,
			"bad.yaml:3: policies[0].lease: a reservation (max_delay: 1s) is never decided from a lease"},
		{`store: {type: redis, redis: {url: "redis://127.0.0.1:1/0"}}
policies:
  - {name: a, match: /, anonymous: [{rate: 1/s, burst: 2}], lease: {ttl: 1s}}`,
			"policies[0].lease.tokens: 0: want 1 to 1000000000 tokens"},
		{`store: {type: redis, redis: {url: "redis://127.0.0.1:1/0"}}
policies:
  - {name: a, match: /, anonymous: [{rate: 1/s, burst: 2}], lease: {tokens: 5, ttl: 2m}}`,
			"policies[0].lease.ttl: 2m0s: want 1ms to 1m0s"},
		{`store: {type: redis, redis: {url: "redis://127.0.0.1:1/0"}}
policies:
  - {name: a, match: /, anonymous: [{rate: 1/s, burst: 2}], lease: {tokens: 5, tll: 1s}}`,
			"tll: unknown field"},
	} {
		_, err := Parse("bad.yaml", ".", []byte(c.yaml))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s\n: %v; want %q", c.yaml, err, c.want)
		}
	}
}
