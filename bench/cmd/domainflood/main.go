// Command domainflood measures what envoy_rls.busy_domain_rest costs a
// flooding domain and buys another one, with the store the flood's calls
// wait on: it starts a redis-server (or none, -store memory) and a sluice
// binary serving the Envoy rate limit service with two domains; -callers
// goroutines flood domain "flood" (one descriptor a call, 100,000 keys, a
// limit never reached) while one caller calls domain "b" every 5ms. It
// prints the flood's decided and refused calls a second and b's latency,
// once for each -rest value given (each a fresh sluice and Redis):
//
//	go build -o /tmp/sluice ./cmd/sluice
//	cd bench && go run ./cmd/domainflood -sluice-bin /tmp/sluice -rest default,-1 -rounds 2
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sluicehq/sluice/bench"
)

func main() {
	bin := flag.String("sluice-bin", "", "the sluice binary (required)")
	rests := flag.String("rest", "default,-1", "busy_domain_rest values, comma-separated; default: leave it unset")
	store := flag.String("store", "redis", "redis or memory")
	callers := flag.Int("callers", 200, "the flood's callers, one call in flight each")
	dur := flag.Duration("d", 8*time.Second, "each measure's length")
	rounds := flag.Int("rounds", 2, "rounds, the rest values alternated within each")
	flag.Parse()
	if *bin == "" {
		log.Fatal("domainflood: -sluice-bin is required")
	}
	fmt.Printf("store %s, %d callers flooding, %v each, GOMAXPROCS of sluice: the machine's\n", *store, *callers, *dur)
	for r := 1; r <= *rounds; r++ {
		for _, rest := range strings.Split(*rests, ",") {
			res, err := measure(*bin, *store, rest, *callers, *dur)
			if err != nil {
				log.Fatalf("domainflood: rest %s: %v", rest, err)
			}
			fmt.Printf("round %d, busy_domain_rest %-7s %s\n", r, rest+":", res)
		}
	}
}

func freeAddr() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func measure(bin, store, rest string, callers int, dur time.Duration) (string, error) {
	dir, err := os.MkdirTemp("", "domainflood-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	rls := filepath.Join(dir, "rls")
	if err := os.Mkdir(rls, 0o755); err != nil {
		return "", err
	}
	for name, yaml := range map[string]string{
		"flood.yaml": "domain: flood\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: hour, requests_per_unit: 1000000000}\n",
		"b.yaml":     "domain: b\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: 1000000000}\n",
	} {
		if err := os.WriteFile(filepath.Join(rls, name), []byte(yaml), 0o644); err != nil {
			return "", err
		}
	}
	storeYAML := "store: {type: memory}"
	if store == "redis" {
		srv, err := bench.StartRedis()
		if err != nil {
			return "", err
		}
		defer srv.Stop()
		storeYAML = fmt.Sprintf("store: {type: redis, redis: {url: \"redis://%s\"}}", srv.Addr)
	}
	rlsAddr := freeAddr()
	section := fmt.Sprintf("listen: %s, config_dir: %q", rlsAddr, rls)
	if rest != "default" {
		section += ", busy_domain_rest: " + rest
	}
	cfg := fmt.Sprintf("listen: %s\nadmin_listen: %s\nupstream: http://127.0.0.1:1\n%s\nenvoy_rls: {%s}\n", freeAddr(), freeAddr(), storeYAML, section)
	file := filepath.Join(dir, "sluice.yaml")
	if err := os.WriteFile(file, []byte(cfg), 0o644); err != nil {
		return "", err
	}
	cmd := exec.Command(bin, "serve", "-config", file)
	logf, err := os.Create(filepath.Join(dir, "serve.log"))
	if err != nil {
		return "", err
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return "", err
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	conn, err := grpc.NewClient(rlsAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return "", err
	}
	defer conn.Close()
	for start := time.Now(); ; {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
		cancel()
		if err == nil {
			break
		}
		if time.Since(start) > 20*time.Second {
			return "", fmt.Errorf("sluice did not answer on %s: %v", rlsAddr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	client := rlsv3.NewRateLimitServiceClient(conn)
	var ok, refused atomic.Int64
	ctx, cancel := context.WithTimeout(context.Background(), dur)
	defer cancel()
	var wg sync.WaitGroup
	for g := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g << 20; ctx.Err() == nil; i++ {
				req := &rlsv3.RateLimitRequest{Domain: "flood", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
					Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "tenant", Value: strconv.Itoa(i % 100_000)}}}}}
				if _, err := client.ShouldRateLimit(ctx, req); err == nil {
					ok.Add(1)
				} else if ctx.Err() == nil {
					refused.Add(1)
				}
			}
		}()
	}
	bconn, err := grpc.NewClient(rlsAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return "", err
	}
	defer bconn.Close()
	b := rlsv3.NewRateLimitServiceClient(bconn)
	var took []time.Duration
	for i := 0; ctx.Err() == nil; i++ {
		req := &rlsv3.RateLimitRequest{Domain: "b", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
			Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: strconv.Itoa(i)}}}}}
		start := time.Now()
		if _, err := b.ShouldRateLimit(context.Background(), req); err == nil {
			took = append(took, time.Since(start))
		}
		time.Sleep(5 * time.Millisecond)
	}
	wg.Wait()
	if len(took) == 0 {
		return "", fmt.Errorf("no call of domain b was answered")
	}
	slices.Sort(took)
	q := func(f float64) time.Duration { return took[int(f*float64(len(took)-1))].Round(10 * time.Microsecond) }
	s := dur.Seconds()
	return fmt.Sprintf("flood decided %6.0f/s, refused %5.0f/s; b p50 %v p99 %v (%d calls)",
		float64(ok.Load())/s, float64(refused.Load())/s, q(.5), q(.99), len(took)), nil
}
