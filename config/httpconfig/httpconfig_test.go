package httpconfig

import (
	"testing"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/memstore"
)

// TestLimiterOptions: a file's options build a limiter, with the file's
// HTTP settings (headers, forwarded header, paths) and its policies.
func TestLimiterOptions(t *testing.T) {
	c, err := config.Parse("sluice.yaml", t.TempDir(), []byte(`
trusted_proxies: [10.0.0.0/8]
forwarded_header: forwarded
headers: draft
paths: {case: insensitive, escaped_slashes: keep}
policies:
  - {name: api, match: "/api/", anonymous: [{rate: 10/s, burst: 20}]}
`))
	if err != nil {
		t.Fatal(err)
	}
	opts, err := LimiterOptions(c)
	if err != nil {
		t.Fatal(err)
	}
	if opts.Headers != httplimit.HeadersDraft || opts.ForwardedFrom != httplimit.FromForwarded ||
		opts.Paths != (httplimit.Paths{CaseInsensitive: true, EscapedSlashes: httplimit.EscapedSlashesKeep}) ||
		len(opts.TrustedProxies) != 1 || len(opts.Policies) != 1 || opts.Policies[0].Name != "api" {
		t.Fatalf("options %+v", opts)
	}
	opts.Store = memstore.New(memstore.Options{SweepInterval: -1})
	if _, err := httplimit.New(opts); err != nil {
		t.Fatal(err)
	}
}
