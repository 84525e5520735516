package envoyrls

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"

	"github.com/sluicehq/sluice/internal/connlimit"
	"github.com/sluicehq/sluice/internal/rlsstats"
)

// Options bounds what clients can hold of the gRPC listener, as the
// server section bounds the HTTP listeners. Zero values are defaults.
type Options struct {
	// MaxInFlight bounds the calls served at once, counted from their
	// headers, so that a stream that never sends its message counts too;
	// beyond it a call gets UNAVAILABLE at once. Default 10000.
	MaxInFlight int
	// MaxStreamsPerConnection is each connection's HTTP/2
	// SETTINGS_MAX_CONCURRENT_STREAMS. Default 100.
	MaxStreamsPerConnection int
	// MaxStreamsPerIP bounds the streams one client address holds open
	// over all its connections (an IPv6 address by IPv6Prefix); beyond it
	// a stream gets RESOURCE_EXHAUSTED. Default 1024.
	MaxStreamsPerIP int
	// IPv6Prefix groups IPv6 client addresses for MaxStreamsPerIP, as
	// connlimit does; default 64.
	IPv6Prefix int
	// FirstMessageTimeout bounds the time from a stream's headers to its
	// request message; beyond it the stream is cut with
	// DEADLINE_EXCEEDED. Default 2s.
	FirstMessageTimeout time.Duration
	// MaxInFlightPerDomain bounds the calls of one domain decided at
	// once; a call beyond it waits for a slot up to DomainWait, then gets
	// RESOURCE_EXHAUSTED. Default StreamWorkersPerCPU × GOMAXPROCS, at
	// most MaxInFlight.
	MaxInFlightPerDomain int
	// DomainWait bounds a call's wait for its domain's slot; default
	// 100ms.
	DomainWait time.Duration
	// BusyDomainRest paces a domain beyond MaxInFlightPerDomain while
	// another domain is called: each of its calls, once decided, holds
	// its slot for BusyDomainRest times its own time (at most
	// DomainWait) before it is answered: the call's time less what its
	// decisions waited on the store (decide.StoreTime), so that a domain
	// whose decisions wait on Redis is hardly paced. 0 or negative: no
	// pacing (config's default is 64).
	BusyDomainRest int
	// MaxDescriptors bounds the descriptors of a call, MaxEntries the
	// entries of a descriptor; beyond them a call gets INVALID_ARGUMENT.
	// Defaults 64 and 32.
	MaxDescriptors int
	MaxEntries     int
	// MaxConnections bounds the open connections; beyond it a new one is
	// closed at once. Default 10000.
	MaxConnections int
	// MaxMessageBytes bounds a request message; default 64 KiB.
	MaxMessageBytes int
	// HandshakeTimeout bounds a new connection's setup; default 10s.
	HandshakeTimeout time.Duration
	// IdleTimeout closes a connection without calls; default 2m.
	IdleTimeout time.Duration
	// Rejected, when set, counts what the bounds refused, by reason
	// (connections, in_flight, streams_per_ip, first_message_timeout,
	// in_flight_per_domain, descriptors, entries).
	Rejected func(reason string)
	// Logger receives the server's errors; nil means slog.Default().
	Logger *slog.Logger
	// Now is the clock of duration_until_reset where the store gives
	// none; nil means time.Now.
	Now func() time.Time
	// StreamWorkers is the number of long-lived goroutines that run
	// calls; a call that finds them all busy gets a goroutine of its own.
	// A worker's stack stays grown from one call to the next, where a
	// fresh goroutine grows its stack again in every call (gRPC's
	// NumStreamWorkers). Default the larger of StreamWorkersPerCPU ×
	// GOMAXPROCS and MinStreamWorkers, at most MaxInFlight.
	StreamWorkers int
	// TLS, when set, serves gRPC over TLS with it (its NextProtos must
	// offer h2); nil: plain text.
	TLS *tls.Config
	// Stats, when set, counts the calls in envoyproxy/ratelimit's statsd
	// stats (`sluice ratelimit`, USE_STATSD).
	Stats *rlsstats.Stats
	// Tracer, when set, traces each ShouldRateLimit call in a server span
	// (tracing.go), the child of the caller's W3C traceparent.
	Tracer trace.Tracer
}

// StreamWorkersPerCPU is the default of Options.StreamWorkers per
// GOMAXPROCS. A call spends most of its time waiting for the store, so
// a worker per CPU would leave most calls without one.
const StreamWorkersPerCPU = 16

// MinStreamWorkers is the least default of Options.StreamWorkers. A call
// is in flight for as long as its store call takes, however few the CPUs:
// with workers for 16 × GOMAXPROCS calls, 512 callers left most calls to a
// goroutine of their own, whose stack grew again in every call (runtime
// newstack, 10–15% of the CPU at 512 callers; BENCHMARKS.md, "Issue 26:
// 128 → 512 callers"). A parked worker costs its stack alone: 2 KiB at
// rest (1,024 workers: 2 MiB, measured), more while it runs a call, given
// back by the garbage collector once it rests again.
const MinStreamWorkers = 1024

// Server is the gRPC server of the rate limit and health services.
type Server struct {
	grpc     *grpc.Server
	health   *health.Server
	opts     Options
	inFlight atomic.Int64 // streams open, from their headers; health checks aside
	perIP    *connlimit.Counter
	domains  domainSlots
	sweeper  sweeper
	// served holds the full names of the methods of our handlers (guarded);
	// a stream of any other takes tap's slow path.
	served map[string]bool
}

// ServiceName is the full name of Envoy's rate limit service, as the
// health service knows it.
const ServiceName = "envoy.service.ratelimit.v3.RateLimitService"

// StreamWindow and ConnWindow are the listener's HTTP/2 flow-control
// windows, fixed: what a client may send on one stream, and on one
// connection, before the server grants more. Fixed windows turn off
// gRPC's bandwidth estimator, which otherwise sends a PING, and a window
// update before it, for the first DATA frame after each acknowledgement:
// on a connection whose calls arrive one at a time, as from Envoy's
// sidecars, one write and one read more for every call. A call is a few
// hundred bytes, far below either window; gRPC's default starts at 64
// KiB for both and the estimator only grows them, for bulk transfers.
const (
	StreamWindow = 64 << 10
	ConnWindow   = 1 << 20
)

// New returns a Server that decides with what source returns.
func New(source Source, opts Options) *Server {
	if opts.MaxInFlight <= 0 {
		opts.MaxInFlight = 10_000
	}
	if opts.MaxConnections <= 0 {
		opts.MaxConnections = 10_000
	}
	if opts.MaxMessageBytes <= 0 {
		opts.MaxMessageBytes = 64 << 10
	}
	if opts.HandshakeTimeout <= 0 {
		opts.HandshakeTimeout = 10 * time.Second
	}
	if opts.IdleTimeout <= 0 {
		opts.IdleTimeout = 2 * time.Minute
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.StreamWorkers <= 0 {
		opts.StreamWorkers = max(StreamWorkersPerCPU*runtime.GOMAXPROCS(0), MinStreamWorkers)
	}
	if opts.Rejected == nil {
		opts.Rejected = func(string) {}
	}
	opts.defaultBounds()
	s := &Server{opts: opts, health: health.NewServer(), perIP: connlimit.NewCounter(opts.MaxStreamsPerIP, opts.IPv6Prefix),
		domains: domainSlots{max: opts.MaxInFlightPerDomain, wait: opts.DomainWait, restFactor: max(opts.BusyDomainRest, 0), source: source, n: make(map[string]*domain)},
		served:  make(map[string]bool)}
	s.sweeper.init(s.sweepEvery)
	serverOpts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(opts.MaxMessageBytes),
		grpc.MaxConcurrentStreams(uint32(min(opts.MaxStreamsPerConnection, 1<<20))),
		grpc.InTapHandle(s.tap),
		grpc.ConnectionTimeout(opts.HandshakeTimeout),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: opts.IdleTimeout}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: time.Second, PermitWithoutStream: true}),
		grpc.NumStreamWorkers(uint32(min(opts.StreamWorkers, opts.MaxInFlight))),
		grpc.StaticStreamWindowSize(StreamWindow),
		grpc.StaticConnWindowSize(ConnWindow),
	}
	if opts.Stats != nil {
		serverOpts = append(serverOpts, grpc.ChainUnaryInterceptor(s.count, s.bound))
	} else {
		// No stats: no chain, whose every call allocates a closure.
		serverOpts = append(serverOpts, grpc.UnaryInterceptor(s.bound))
	}
	if opts.TLS != nil {
		serverOpts = append(serverOpts, grpc.Creds(credentials.NewTLS(opts.TLS)))
	}
	s.grpc = grpc.NewServer(serverOpts...)
	s.grpc.RegisterService(s.guarded(&rlsv3.RateLimitService_ServiceDesc), &service{source: source, log: opts.Logger, now: opts.Now, stats: opts.Stats, tracer: opts.Tracer})
	s.grpc.RegisterService(s.guarded(&healthpb.Health_ServiceDesc), s.health)
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	s.health.SetServingStatus(ServiceName, healthpb.HealthCheckResponse_SERVING)
	s.health.SetServingStatus(UpstreamServiceName, healthpb.HealthCheckResponse_SERVING)
	return s
}

// count counts every unary call (the health checks too) in
// envoyproxy/ratelimit's ratelimit_server.<method> stats, as its
// interceptor, the first of its chain, does; without Stats it only calls
// handler.
func (s *Server) count(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if s.opts.Stats == nil {
		return handler(ctx, req)
	}
	start := time.Now()
	resp, err := handler(ctx, req)
	s.opts.Stats.ForMethod(info.FullMethod).Called(time.Since(start))
	return resp, err
}

// defaultBounds fills the zero bounds of streams and calls.
func (o *Options) defaultBounds() {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&o.MaxStreamsPerConnection, 100)
	def(&o.MaxStreamsPerIP, 1024)
	def(&o.IPv6Prefix, 64)
	def(&o.MaxInFlightPerDomain, min(o.MaxInFlight, StreamWorkersPerCPU*runtime.GOMAXPROCS(0)))
	def(&o.MaxDescriptors, 64)
	def(&o.MaxEntries, 32)
	if o.DomainWait <= 0 {
		o.DomainWait = 100 * time.Millisecond
	}
	if o.FirstMessageTimeout <= 0 {
		o.FirstMessageTimeout = 2 * time.Second
	}
}

// Serve serves on ln until Stop.
func (s *Server) Serve(ln net.Listener) error {
	return s.grpc.Serve(&boundedListener{Listener: ln, slots: make(chan struct{}, s.opts.MaxConnections), rejected: s.opts.Rejected})
}

// SetUpstreamServing reports the health of UpstreamServiceName,
// envoyproxy/ratelimit's name: SERVING, or NOT_SERVING (`sluice
// ratelimit` with HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED and no domain
// loaded, as there). After Drain or Stop it changes nothing.
func (s *Server) SetUpstreamServing(ok bool) {
	st := healthpb.HealthCheckResponse_SERVING
	if !ok {
		st = healthpb.HealthCheckResponse_NOT_SERVING
	}
	s.health.SetServingStatus(UpstreamServiceName, st)
}

// Drain reports NOT_SERVING to health checks and goes on serving calls,
// so that Envoy moves to another instance before Stop.
func (s *Server) Drain() { s.health.Shutdown() }

// Stop reports NOT_SERVING, stops accepting and lets the calls in flight
// finish until ctx ends, then closes every connection.
func (s *Server) Stop(ctx context.Context) error {
	s.health.Shutdown()
	done := make(chan struct{})
	go func() {
		s.grpc.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		s.grpc.Stop()
		<-done
		return ctx.Err()
	}
}

// boundedListener closes a new connection beyond its slots at once.
type boundedListener struct {
	net.Listener
	slots    chan struct{}
	rejected func(string)
}

func (l *boundedListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		select {
		case l.slots <- struct{}{}:
			return &boundedConn{Conn: c, slots: l.slots}, nil
		default:
			l.rejected("connections")
			_ = c.Close()
		}
	}
}

type boundedConn struct {
	net.Conn
	slots chan struct{}
	once  sync.Once
}

func (c *boundedConn) Close() error {
	c.once.Do(func() { <-c.slots })
	return c.Conn.Close()
}
