package envoyrls

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/tap"

	"github.com/sluicehq/sluice/config"
)

// BenchmarkStreamGuard is the stream guard alone, as one call meets it:
// tap on the stream's headers (under a fresh cancellable context, as
// gRPC's transport gives it), the message received, the handler's end.
// Its allocs/op are the guard's own, which BenchmarkGRPC drowns in gRPC's.
// The client address holds nothing else: its count is made and retired
// each call.
func BenchmarkStreamGuard(b *testing.B) { benchStreamGuard(b, false) }

// BenchmarkStreamGuardBusyAddress is BenchmarkStreamGuard from an address
// that holds another stream open meanwhile, as Envoy's few addresses do:
// its count is found each call.
func BenchmarkStreamGuardBusyAddress(b *testing.B) { benchStreamGuard(b, true) }

func benchStreamGuard(b *testing.B, busy bool) {
	s := New(nil, Options{})
	s.opts.FirstMessageTimeout = time.Minute
	base := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 5}})
	info := &tap.Info{FullMethodName: "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"}
	open := func() (*stream, context.CancelFunc) {
		parent, cancel := context.WithCancel(base)
		ctx, err := s.tap(parent, info)
		if err != nil {
			b.Fatal(err)
		}
		return ctx.Value(streamKey{}).(*stream), cancel
	}
	if busy {
		st, cancel := open()
		defer cancel()
		defer st.ended()
	}
	b.ReportAllocs()
	for b.Loop() {
		st, cancel := open()
		_ = received(st, nil)
		st.ended()
		cancel()
	}
}

// BenchmarkDomainSlots is a call's per-domain slot, taken and given back
// (domainSlots.acquire, release), by 16 callers a CPU, as many as the
// default slots of a domain, so that none waits: what is measured is the
// finding and counting of the domain's entry. The domains are those of
// the configuration (the usual case), one or eight (the callers spread
// over them in turn), or one no file defines (a made-up domain, counted
// under the process-wide lock). Pacing is on (busy_domain_rest 64, the
// configuration's default), so each call records its domain as called.
func BenchmarkDomainSlots(b *testing.B) {
	dir := b.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "rl"), 0o755); err != nil {
		b.Fatal(err)
	}
	names := make([]string, 8)
	for i := range names {
		names[i] = "d" + strconv.Itoa(i)
		file := "domain: " + names[i] + "\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 1000}\n"
		if err := os.WriteFile(filepath.Join(dir, "rl", names[i]+".yaml"), []byte(file), 0o600); err != nil {
			b.Fatal(err)
		}
	}
	cfg, err := config.Parse("sluice.yaml", dir, []byte("envoy_rls: {listen: 127.0.0.1:0, config_dir: rl}\n"))
	if err != nil {
		b.Fatal(err)
	}
	source := func() (*config.EnvoyRLS, Decider) { return &cfg.EnvoyRLS, nil }
	for _, c := range []struct {
		name    string
		domains []string
	}{{"known1", names[:1]}, {"known8", names}, {"unknown1", []string{"made-up"}}} {
		b.Run(c.name, func(b *testing.B) {
			s := New(source, Options{BusyDomainRest: 64})
			ctx := context.Background()
			var next atomic.Int64
			b.ReportAllocs()
			b.SetParallelism(StreamWorkersPerCPU)
			b.RunParallel(func(pb *testing.PB) {
				name := c.domains[int(next.Add(1))%len(c.domains)]
				for pb.Next() {
					dm, held := s.domains.acquire(ctx, name)
					if dm == nil {
						b.Error("no slot")
						return
					}
					s.domains.release(name, dm, held)
				}
			})
		})
	}
}
