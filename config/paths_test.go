package config

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/httplimit"
)

func TestPathsAndForwardedHeader(t *testing.T) {
	for _, tc := range []struct {
		name, data string
		want       []string // each must appear in the error; none: valid
	}{
		{"defaults", "", nil},
		{"insensitive decode", "paths: {case: insensitive, escaped_slashes: decode}\n", nil},
		{"keep", "paths:\n  escaped_slashes: keep\n", nil},
		{"bad case", "paths:\n  case: lower\n", []string{"bad.yaml:2: paths.case: \"lower\": want one of sensitive, insensitive"}},
		{"bad escaped_slashes", "paths:\n  escaped_slashes: allow\n", []string{"bad.yaml:2: paths.escaped_slashes: \"allow\": want one of reject, keep, decode"}},
		{"unknown paths field", "paths:\n  merge_slashes: true\n", []string{"bad.yaml:2: paths.merge_slashes: unknown field"}},
		{"proxies without header", "trusted_proxies: [10.0.0.0/8]\n", []string{"bad.yaml:1: trusted_proxies: forwarded_header is required with trusted_proxies; want forwarded_header: x-forwarded-for or forwarded"}},
		{"proxies with auto", "trusted_proxies: [10.0.0.0/8]\nforwarded_header: auto\n", []string{"bad.yaml:2: forwarded_header: \"auto\" is not accepted with trusted_proxies", "want x-forwarded-for or forwarded"}},
		{"proxies with a typo", "trusted_proxies: [10.0.0.0/8]\nforwarded_header: x-real-ip\n", []string{"bad.yaml:2: forwarded_header: \"x-real-ip\": want one of x-forwarded-for, forwarded"}},
		{"proxies with xff", "trusted_proxies: [10.0.0.0/8]\nforwarded_header: x-forwarded-for\n", nil},
		{"proxies with forwarded", "trusted_proxies: [10.0.0.0/8]\nforwarded_header: forwarded\n", nil},
		{"auto without proxies", "forwarded_header: auto\n", nil},
		{"case conflict", "paths: {case: insensitive}\npolicies:\n  - {name: a, match: \"GET /Products/{id}\", anonymous: [{rate: 1/s, burst: 1}]}\n  - {name: b, match: \"GET /products/{x}\", anonymous: [{rate: 1/s, burst: 1}]}\n",
			[]string{"bad.yaml:4: policies[1].match: \"GET /products/{x}\" conflicts with another pattern once case is ignored"}},
		{"double slash", "policies:\n  - {name: a, match: \"GET /a//b\", anonymous: [{rate: 1/s, burst: 1}]}\n", []string{"bad.yaml:2: policies[0].match: \"GET /a//b\" holds an empty segment (//), which no request does once normalised"}},
		{"dot segment", "policies:\n  - {name: a, match: \"host.example/a/../b\", anonymous: [{rate: 1/s, burst: 1}]}\n", []string{"policies[0].match:", "holds a dot segment (..)"}},
		{"path parameter", "policies:\n  - {name: a, match: \"/login;x\", anonymous: [{rate: 1/s, burst: 1}]}\n", []string{"policies[0].match:", "holds a path parameter (;)"}},
		{"case apart", "policies:\n  - {name: a, match: \"GET /Products/{id}\", anonymous: [{rate: 1/s, burst: 1}]}\n  - {name: b, match: \"GET /products/{x}\", anonymous: [{rate: 1/s, burst: 1}]}\n", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse("bad.yaml", t.TempDir(), []byte(tc.data))
			if tc.want == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if _, err := c.LimiterOptions(); err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted:\n%s", tc.data)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\nwant it to contain %q", err, w)
				}
			}
		})
	}
}

func TestPathsOptions(t *testing.T) {
	c, err := Parse("ok.yaml", t.TempDir(), []byte("paths: {case: insensitive, escaped_slashes: decode}\ntrusted_proxies: [10.0.0.0/8]\nforwarded_header: forwarded\n"))
	if err != nil {
		t.Fatal(err)
	}
	opts, err := c.LimiterOptions()
	if err != nil {
		t.Fatal(err)
	}
	if want := (httplimit.Paths{CaseInsensitive: true, EscapedSlashes: httplimit.EscapedSlashesDecode}); opts.Paths != want {
		t.Errorf("Paths = %+v, want %+v", opts.Paths, want)
	}
	if opts.ForwardedFrom != httplimit.FromForwarded {
		t.Errorf("ForwardedFrom = %v, want FromForwarded", opts.ForwardedFrom)
	}
	d, _ := Parse("ok.yaml", t.TempDir(), nil)
	if d.Paths != (Paths{Case: "sensitive", EscapedSlashes: "reject"}) {
		t.Errorf("default paths %+v", d.Paths)
	}
}

func TestCatchAllWarning(t *testing.T) {
	pol := "policies:\n  - {name: login, match: \"POST /login\", anonymous: [{rate: 1/s, burst: 1}]}\n"
	for _, tc := range []struct{ name, data, want string }{
		{"no upstream", pol, ""},
		{"no catch-all", "upstream: http://127.0.0.1:3000\n" + pol, `warn.yaml:3: policies: no policy matches "/"`},
		{"no policies", "upstream: http://127.0.0.1:3000\n", `warn.yaml:1: upstream: no policy matches "/"`},
		{"GET / is no catch-all", "upstream: http://127.0.0.1:3000\n" + pol + "  - {name: all, match: \"GET /\", anonymous: [{rate: 1/s, burst: 1}]}\n", `warn.yaml:3: policies: no policy matches "/"`},
		{"catch-all", "upstream: http://127.0.0.1:3000\n" + pol + "  - {name: all, match: /, anonymous: [{rate: 1/s, burst: 1}]}\n", ""},
		{"catch-all wildcard", "upstream: http://127.0.0.1:3000\n" + pol + "  - {name: all, match: \"/{rest...}\", anonymous: [{rate: 1/s, burst: 1}]}\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse("warn.yaml", t.TempDir(), []byte(tc.data))
			if err != nil {
				t.Fatal(err)
			}
			got := strings.Join(c.Warnings, "\n")
			if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
				t.Errorf("warnings %q, want %q", got, tc.want)
			}
		})
	}
}
