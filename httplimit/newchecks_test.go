package httplimit

import (
	"strings"
	"testing"
	"time"
)

// New refuses options that would fail, or limit nothing, only once
// requests come: each was accepted, then answered 500 on every request
// (a MaxDelay above an hour), matched no request (a pattern with a dot
// segment), or fell back quietly (an IPv6Prefix out of range became 64,
// an unknown Headers mode sent no headers, a CostHeader that is no header
// name never charged), and a policy name outside printable ASCII came out
// as "??" in the headers' item names.
func TestNewRefusesWhatWouldFailLater(t *testing.T) {
	store := newTestStore(t)
	ok := func() Policy { return Policy{Name: "p", Pattern: "/p/", Cost: 1, Anonymous: rule(1, 10)} }
	for _, tc := range []struct {
		name string
		edit func(*Options)
		want string
	}{
		{"max delay above an hour", func(o *Options) { o.Policies[0].MaxDelay = 2 * time.Hour }, "max delay 2h0m0s: want at most 1h0m0s"},
		{"dot segment", func(o *Options) { o.Policies[0].Pattern = "/a/./b" }, "a dot segment (.)"},
		{"encoded dot segment", func(o *Options) { o.Policies[0].Pattern = "GET /%2e%2E/x" }, "a dot segment (%2e%2E)"},
		{"empty segment", func(o *Options) { o.Policies[0].Pattern = "//x" }, "an empty segment"},
		{"path parameter", func(o *Options) { o.Policies[0].Pattern = "/a;b" }, "a path parameter"},
		{"ipv6 prefix below", func(o *Options) { o.IPv6Prefix = -1 }, "IPv6Prefix -1: want 1 to 128"},
		{"ipv6 prefix above", func(o *Options) { o.IPv6Prefix = 200 }, "IPv6Prefix 200: want 1 to 128"},
		{"headers mode", func(o *Options) { o.Headers = 9 }, "Headers 9: want"},
		{"cost header", func(o *Options) { o.Policies[0].CostHeader = "bad header\n" }, `CostHeader "bad header\n": want a header name`},
		{"non-ASCII name", func(o *Options) { o.Policies[0].Name = "Ünïcode" }, "want a name of printable ASCII"},
		{"quote in name", func(o *Options) { o.Policies[0].Name = `a"b` }, "want a name of printable ASCII"},
	} {
		opts := Options{Store: store, Policies: []Policy{ok()}}
		tc.edit(&opts)
		if _, err := New(opts); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: New = %v, want an error saying %q", tc.name, err, tc.want)
		}
	}
	opts := Options{Store: store, Policies: []Policy{ok()}, IPv6Prefix: 128, Headers: HeadersNone}
	opts.Policies[0].MaxDelay, opts.Policies[0].CostHeader, opts.Policies[0].Pattern = time.Hour, "X-Cost", "GET /a/{id}/b.c/{rest...}"
	if _, err := New(opts); err != nil {
		t.Fatalf("valid options at their bounds: %v", err)
	}
}
