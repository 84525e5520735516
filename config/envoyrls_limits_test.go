package config

import (
	"strings"
	"testing"
	"time"
)

// The envoy_rls listener's own bounds: defaults, and a clear error for
// each bad value.
func TestEnvoyRLSLimits(t *testing.T) {
	c, err := Parse("ok.yaml", ".", []byte("envoy_rls: {listen: 127.0.0.1:8081}\n"))
	if err != nil {
		t.Fatal(err)
	}
	e := c.EnvoyRLS
	if e.MaxStreamsPerConnection != 100 || e.MaxStreamsPerIP != 1024 || e.FirstMessageTimeout != 2*time.Second ||
		e.MaxInFlightPerDomain != 0 || e.DomainWait != 100*time.Millisecond || e.BusyDomainRest != 64 || e.MaxDescriptors != 64 || e.MaxEntries != 32 {
		t.Errorf("defaults: %+v", e)
	}
	if c, err := Parse("ok.yaml", ".", []byte("server: {max_in_flight: 50}\n")); err != nil || c.EnvoyRLS.MaxStreamsPerIP != 50 {
		t.Errorf("max_streams_per_ip under max_in_flight 50: %v %v", c.EnvoyRLS.MaxStreamsPerIP, err)
	}
	for _, tc := range []struct{ data, want string }{
		{"envoy_rls:\n  max_streams_per_connection: -1\n", "bad.yaml:2: envoy_rls.max_streams_per_connection: -1: want the most streams one HTTP/2 connection"},
		{"envoy_rls:\n  max_streams_per_ip: -1\n", "bad.yaml:2: envoy_rls.max_streams_per_ip: -1: want the most streams one client address"},
		{"envoy_rls:\n  first_message_timeout: -1s\n", "bad.yaml:2: envoy_rls.first_message_timeout: -1s"},
		{"envoy_rls:\n  max_in_flight_per_domain: 20000\n", "bad.yaml:2: envoy_rls.max_in_flight_per_domain: 20000: want the most calls of one domain decided at once, up to server.max_in_flight (10000)"},
		{"envoy_rls:\n  domain_wait: 2m\n", "bad.yaml:2: envoy_rls.domain_wait: 2m0s"},
		{"envoy_rls:\n  busy_domain_rest: -2\n", "bad.yaml:2: envoy_rls.busy_domain_rest: -2: want how many times its own decision time"},
		{"envoy_rls:\n  max_descriptors: 100000\n", "bad.yaml:2: envoy_rls.max_descriptors: 100000: want the most descriptors of one call, from 1 to 65536"},
		{"envoy_rls:\n  max_entries: -2\n", "bad.yaml:2: envoy_rls.max_entries: -2"},
		{"envoy_rls:\n  max_entries: lots\n", "bad.yaml:2: envoy_rls.max_entries: \"lots\": want an integer"},
	} {
		_, err := Parse("bad.yaml", ".", []byte(tc.data))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v; want %q", tc.data, err, tc.want)
		}
	}
}
