package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/internal/testkit/envoytest"
)

const edgeLimits = `domain: edge
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 5}
`

// A fixed window's whole limit late in one second and again just after
// the next begins: envoyproxy/ratelimit allows both, and so must `sluice
// ratelimit`. Its resilient layer's guard held the fixed window to a
// token bucket's burst and denied part of the second as a forgotten
// counter until 6 December 2026. An attempt that a stall of the machine
// carries across another edge is made again with a new user.
func TestRatelimitWindowEdge(t *testing.T) {
	if testing.Short() {
		t.Skip("builds envoyproxy/ratelimit")
	}
	const limit = 5
	b := startBothEnv(t, envoytest.January, map[string]string{"edge.yaml": edgeLimits}, nil)
	var clients []*envoytest.Client
	for _, s := range b.services {
		clients = append(clients, envoytest.Dial(t, s.name, s.grpc))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	second := func() int64 { return time.Now().Unix() }
	for attempt := range 10 {
		calls := make([]*rlsv3.RateLimitRequest, limit)
		for i := range calls {
			calls[i] = envoytest.Request("edge", 0, envoytest.Descriptor("user", fmt.Sprintf("edge-%d", attempt)))
		}
		now := time.Now()
		if late := now.Truncate(time.Second).Add(750 * time.Millisecond); now.Before(late) {
			time.Sleep(time.Until(late))
		}
		s := second()
		before, _, _, err := envoytest.Run(ctx, clients, calls)
		if err != nil {
			t.Fatal(err)
		}
		if second() != s {
			continue // the first burst reached the next second
		}
		time.Sleep(time.Until(time.Unix(s+1, 0).Add(20 * time.Millisecond)))
		if second() != s+1 {
			continue
		}
		after, _, _, err := envoytest.Run(ctx, clients, calls)
		if err != nil {
			t.Fatal(err)
		}
		if second() != s+1 {
			continue // the second burst reached the second after
		}
		for half, out := range [][][]envoytest.Outcome{before, after} {
			for i := range calls {
				peer, sl := out[0][i], out[1][i]
				if peer.Overall != "OK" || sl.Overall != "OK" {
					t.Errorf("burst %d (of %d a second), call %d: %s %v, sluice ratelimit %v; want OK from both",
						half+1, limit, i+1, b.services[0].name, peer, sl)
				}
			}
		}
		return
	}
	t.Fatal("no attempt of 10 kept each burst within its second: the machine stalled through every one")
}
