package e2e

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/testkit/envoytest"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// rls is one `sluice serve` answering Envoy's rate limit protocol.
type rls struct {
	*gateway
	grpc string // host:port of envoy_rls
}

// startRLS runs sluice serve on redis with envoy_rls reading the descriptor
// files given (name → YAML) from a directory of their own, and waits until
// its gRPC health service reports SERVING. The store's deadline is 10 s,
// envoyproxy/ratelimit's REDIS_TIMEOUT, so that on a busy machine every
// decision is still Redis's and not the failure policy's (those tests hold
// decisions, not outages).
func startRLS(t *testing.T, redis *redistest.Server, files map[string]string, extra ...string) *rls {
	t.Helper()
	dir := t.TempDir()
	for name, yaml := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	store := fmt.Sprintf("store:\n  type: redis\n  redis: {url: %q, timeout: 10s}", redis.URL())
	section := fmt.Sprintf("envoy_rls:\n  listen: 127.0.0.1:0\n  config_dir: %q", dir)
	for _, e := range extra {
		section += "\n  " + e
	}
	g := startGateway(t, upstream(t), store, section)
	waitGRPCHealthy(t, g.rlsAddr, g)
	return &rls{gateway: g, grpc: g.rlsAddr}
}

func waitGRPCHealthy(t *testing.T, addr string, g *gateway) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	health := healthpb.NewHealthClient(conn)
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		resp, err := health.Check(ctx, &healthpb.HealthCheckRequest{})
		cancel()
		if err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("envoy_rls on %s not SERVING within 20s: %v %v\n%s", addr, resp.GetStatus(), err, g.out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// sequenceAttempts is how many times a sequence is run at most: a run whose
// span crossed the boundary of a window its limits use says nothing (the
// two services may have counted in different windows) and is run again,
// from an empty store, after the next boundary.
const sequenceAttempts = 4

// peerEnv turns on everything envoyproxy/ratelimit can put in an answer:
// its response headers and its dynamic metadata; sluiceUpstreamAnswers
// are the envoy_rls settings that give the same.
var (
	peerEnv = map[string]string{
		"LIMIT_RESPONSE_HEADERS_ENABLED": "true",
		"RESPONSE_DYNAMIC_METADATA":      "true",
	}
	sluiceUpstreamAnswers = []string{"response_headers: envoyproxy", "response_dynamic_metadata: true"}
)

// sluice's gRPC service, loaded with envoyproxy/ratelimit's own example and
// test configurations and cases of its own (middle wildcards, metadata:,
// quota mode, descriptor limit overrides), answers every request of every
// sequence as each pinned envoyproxy/ratelimit release does on the same
// files, field by field (envoytest.Diff): the overall code; per
// descriptor the code, current limit (name, requests, unit),
// limit_remaining, duration_until_reset and quota; the response headers
// (upstream's, LIMIT_RESPONSE_HEADERS_ENABLED), the request headers, the
// dynamic metadata (RESPONSE_DYNAMIC_METADATA), the raw body and the
// answer's quota. A sequence that an older release answers otherwise (the
// newer behaviour sluice follows, docs/envoy.md) is held against the newer
// releases only. Each request goes to envoyproxy/ratelimit, then to
// sluice, before the next; each service has a Redis of its own, emptied
// before every sequence. Durations until reset may differ by the whole
// seconds the run took, measured.
func TestEnvoyRLSMatchesEnvoyproxyRatelimit(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs envoyproxy/ratelimit")
	}
	for _, r := range envoytest.Releases() {
		t.Run(r.Name, func(t *testing.T) {
			for _, tc := range envoytest.Cases() {
				if !tc.In(r) {
					continue
				}
				t.Run(tc.Name, func(t *testing.T) {
					files, err := tc.LoadFrom(r)
					if errors.Is(err, envoytest.ErrUnavailable) && r.SourceEnv != "" {
						t.Skip(err)
					}
					if err != nil {
						t.Fatal(err)
					}
					peer := envoytest.StartRelease(t, r, redistest.Start(t), files, peerEnv)
					sluiceRedis := redistest.Start(t)
					s := startRLS(t, sluiceRedis, files, sluiceUpstreamAnswers...)
					clients := []*envoytest.Client{
						envoytest.Dial(t, "envoyproxy/ratelimit "+r.Name, peer.Addr()),
						envoytest.Dial(t, "sluice", s.grpc),
					}
					flush := []*redistest.Server{peer.Redis(), sluiceRedis}
					for _, sq := range tc.Sequences {
						if !sq.In(r) {
							continue
						}
						t.Run(sq.Name, func(t *testing.T) {
							compareSequence(t, r, clients, flush, sq)
						})
					}
				})
			}
		})
	}
}

func compareSequence(t *testing.T, r envoytest.Release, clients []*envoytest.Client, stores []*redistest.Server, sq envoytest.Sequence) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for attempt := 1; attempt <= sequenceAttempts; attempt++ {
		for _, srv := range stores {
			if err := srv.Client(t).FlushAll(ctx).Err(); err != nil {
				t.Fatal(err)
			}
		}
		// A sequence starts just after a second boundary, and at least
		// 10 s before a minute boundary.
		envoytest.WaitWindowStart(10 * time.Second)
		out, start, end, err := envoytest.Run(ctx, clients, sq.Requests)
		if err != nil {
			t.Fatal(err)
		}
		if envoytest.Straddles(start, end, out...) {
			t.Logf("attempt %d ran from %s to %s, across a window boundary: run again", attempt, start.Format("15:04:05.000"), end.Format("15:04:05.000"))
			continue
		}
		// Two answers to one request were given at most the run's span
		// apart: their whole seconds until reset differ by at most its
		// ceiling.
		slack := max(1, int64(math.Ceil(end.Sub(start).Seconds())))
		for i, req := range sq.Requests {
			want, got := r.AsMain(out[0][i]), out[1][i]
			if diff := envoytest.Diff(want, got, slack); diff != nil {
				t.Errorf("request %d (domain %q, %s, hits_addend %d):\n  %s: %v\n  %s: %v\n  %s",
					i+1, req.Domain, describe(req), req.HitsAddend, clients[0].Name, want, clients[1].Name, got, strings.Join(diff, "\n  "))
			}
		}
		return
	}
	t.Fatalf("every one of %d runs crossed a window boundary", sequenceAttempts)
}

// describe renders a request's descriptors as (k=v, k=v)[hits].
func describe(req *rlsv3.RateLimitRequest) string {
	var parts []string
	for _, d := range req.GetDescriptors() {
		var kv []string
		for _, e := range d.GetEntries() {
			kv = append(kv, e.GetKey()+"="+e.GetValue())
		}
		s := "(" + strings.Join(kv, ", ") + ")"
		if d.GetHitsAddend() != nil {
			s += fmt.Sprintf("[hits %d]", d.GetHitsAddend().GetValue())
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, " ")
}

// sharedDomain is a descriptor file in envoyproxy/ratelimit's format: one
// fixed-window limit per tenant.
const sharedDomain = `domain: shared
descriptors:
  - key: tenant
    rate_limit:
      unit: minute
      requests_per_unit: 200
`

// Three `sluice serve` processes answering Envoy's rate limit protocol on
// one Redis share one limit: 24 callers spread 600 requests for one tenant
// over the three, and exactly 200 are admitted, the limit of the tenant's
// fixed window (a run that crosses a minute boundary is run again with a
// new tenant, since it would count in two windows).
func TestThreeEnvoyRLSShareOneLimit(t *testing.T) {
	srv := redistest.Start(t)
	files := map[string]string{"shared.yaml": sharedDomain}
	var clients []*envoytest.Client
	for i := range 3 {
		s := startRLS(t, srv, files)
		clients = append(clients, envoytest.Dial(t, fmt.Sprintf("sluice %d", i+1), s.grpc))
	}
	const callers, requests, limit = 24, 600, 200
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for attempt := 1; attempt <= sequenceAttempts; attempt++ {
		envoytest.WaitWindowStart(20 * time.Second)
		req := envoytest.Request("shared", 0, envoytest.Descriptor("tenant", fmt.Sprintf("t%d", attempt)))
		var admitted, denied, sent atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, callers)
		start := time.Now()
		for c := range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := c; sent.Add(1) <= requests; i++ {
					o, err := clients[i%len(clients)].Record(ctx, req)
					if err != nil {
						errs <- err
						return
					}
					switch o.Overall {
					case "OK":
						admitted.Add(1)
					case "OVER_LIMIT":
						denied.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		end := time.Now()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		if start.Unix()/60 != end.Unix()/60 {
			t.Logf("attempt %d ran from %s to %s, across a minute boundary: run again", attempt, start.Format("15:04:05.000"), end.Format("15:04:05.000"))
			continue
		}
		t.Logf("%d requests over three processes in %v: admitted %d, denied %d", requests, end.Sub(start).Round(time.Millisecond), admitted.Load(), denied.Load())
		if admitted.Load() != limit || denied.Load() != requests-limit {
			t.Errorf("admitted %d and denied %d of %d requests, want exactly %d admitted (the tenant's limit per minute) and %d denied",
				admitted.Load(), denied.Load(), requests, limit, requests-limit)
		}
		return
	}
	t.Fatalf("every one of %d runs crossed a minute boundary", sequenceAttempts)
}

// upstreamConfigDirs are the directories of envoyproxy/ratelimit's source
// whose descriptor files it tests and ships.
var upstreamConfigDirs = []string{"test/config", "test/integration/runtime/current/ratelimit/config", "examples/ratelimit/config"}

// Every descriptor file of envoyproxy/ratelimit's tests, integration tests
// and examples, in each pinned release, alone in the config directory, is
// accepted by sluice exactly when that release accepts it (its log says
// "Error loading new configuration" when it does not).
func TestUpstreamConfigsAcceptedAlike(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs envoyproxy/ratelimit")
	}
	for _, r := range envoytest.Releases() {
		t.Run(r.Name, func(t *testing.T) {
			src, err := r.Source()
			if errors.Is(err, envoytest.ErrUnavailable) && r.SourceEnv != "" {
				t.Skip(err)
			}
			if err != nil {
				t.Fatal(err)
			}
			redis := redistest.Start(t)
			n := 0
			for _, d := range upstreamConfigDirs {
				paths, err := filepath.Glob(filepath.Join(src, d, "*.y*ml"))
				if err != nil {
					t.Fatal(err)
				}
				for _, path := range paths {
					n++
					body, err := os.ReadFile(path)
					if err != nil {
						t.Fatal(err)
					}
					name := filepath.Base(path)
					t.Run(d+"/"+name, func(t *testing.T) {
						files := map[string]string{name: string(body)}
						peer := envoytest.StartRelease(t, r, redis, files, nil)
						upstreamOK := !strings.Contains(peer.Log(), "Error loading new configuration")
						dir := t.TempDir()
						if err := os.Mkdir(filepath.Join(dir, "rl"), 0o755); err != nil {
							t.Fatal(err)
						}
						if err := os.WriteFile(filepath.Join(dir, "rl", name), body, 0o644); err != nil {
							t.Fatal(err)
						}
						_, err := config.Parse(filepath.Join(dir, "sluice.yaml"), dir, []byte("envoy_rls: {listen: 127.0.0.1:8081, config_dir: rl}\n"))
						if upstreamOK != (err == nil) {
							t.Errorf("envoyproxy/ratelimit %s accepts it: %t; sluice: %v\nits log:\n%s", r.Name, upstreamOK, err, peer.Log())
						}
					})
				}
			}
			if n < 20 {
				t.Fatalf("%d descriptor files in %s; want upstream's 20 or more", n, src)
			}
		})
	}
}
