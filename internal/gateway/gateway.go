// Package gateway is `sluice serve`: the reverse proxy that applies a
// configuration's policies in front of an upstream (the traffic listener),
// the decision API (POST /v1/check) for services that do not sit behind it
// and forward auth (/v1/authz, authz.go) for proxies that ask before they
// forward, on a listener of its own and optionally behind a bearer token,
// and the admin listener (/metrics, /healthz, /readyz, and the admin API
// behind a token: admin.go). Each listener bounds what a client can hold
// of it (limits.go).
//
// The configuration is swapped atomically on Reload (SIGHUP) and when
// WatchConfig sees its files change (watch.go), under the rules that
// protect a reload (reload.go); a request in flight
// finishes under the configuration it started with. The store is built
// once: its buckets survive reloads, and a change of the store section, or
// of a listener address, needs a restart (Reload says so in the log).
package gateway

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/algo"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/config/httpconfig"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/buildinfo"
	"github.com/sluicehq/sluice/internal/envoyrls"
	"github.com/sluicehq/sluice/internal/rlsstats"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/resilient"
)

// Gateway is one running `sluice serve`.
type Gateway struct {
	path     string
	load     func() (*config.Config, error) // what a reload reads; nil: config.Load(path)
	log      *slog.Logger
	reg      *prometheus.Registry
	metrics  *httplimit.Metrics
	reloads  *prometheus.CounterVec
	upstream *upstreamMetrics
	proxyLog *log.Logger // the reverse proxy's own errors

	tracing *tracing     // nil: off (tracing.go)
	tracer  trace.Tracer // tracing's, or nil

	store      sluice.Store        // what the policies check
	probes     []*probe            // what /readyz asks: each store itself, without failure policy
	layers     []resilient.Options // of each resilient layer built, REDIS_URL's first (tests read them)
	resilient  bool                // store is a resilient layer in front of Redis
	closeStore func() error

	state atomic.Pointer[state]
	mu    sync.Mutex // serialises Reload

	traffic, admin, decision       *http.Server
	trafficLn, adminLn, decisionLn net.Listener
	rls                            *envoyrls.Server // envoy_rls: the gRPC listener (nil: off)
	rlsStats                       *rlsstats.Stats  // envoyproxy/ratelimit's statsd stats (SetStats; nil: none)
	rlsLn                          net.Listener
	tlsConfigs                     map[string]*tls.Config // by listener; absent: plain text (tls.go)

	drainMu  sync.Mutex  // guards rls against Drain (drain.go)
	draining atomic.Bool // /readyz answers 503

	trafficFlight, decisionFlight *inFlight // requests in flight per listener
	rejections                    *prometheus.CounterVec

	accessLog *accessLog // nil: none (accesslog.go)

	untrusted *forwardedWarner // forwarding headers while trusted_proxies is empty (untrusted.go)

	// Runtime overrides and the admin API (admin.go, admin_store.go).
	redisClient redis.UniversalClient // nil with the memory store
	// perSecondClient is the per-second Redis of `sluice ratelimit`'s
	// REDIS_PERSECOND; nil without one.
	perSecondClient redis.UniversalClient
	overrides       *httplimit.Overrides
	overrideStore   *overrideSync
	adminMetrics    *adminMetrics
}

// state is what a configuration compiles to.
type state struct {
	cfg     *config.Config
	limiter *httplimit.Limiter
	handler http.Handler // limiter in front of the proxy (or of 404)

	trusted       []netip.Prefix // whose forwarding header is believed, for the access log
	forwardedFrom httplimit.ForwardedFrom
}

// New builds a gateway for cfg, read from path (the file Reload reads
// again). It opens no listener yet.
func New(cfg *config.Config, path string, log *slog.Logger) (*Gateway, error) {
	if log == nil {
		log = slog.Default()
	}
	g := &Gateway{path: path, log: log, reg: prometheus.NewRegistry()}
	g.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	g.reloads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_config_reloads_total",
		Help: "Configuration reloads by result (ok, invalid, refused).",
	}, []string{"result"})
	g.reg.MustRegister(g.reloads)
	for _, result := range []string{"ok", "invalid"} {
		g.reloads.WithLabelValues(result) // 0 from the start, so that increase() sees the first
	}
	m, err := httplimit.NewMetrics(g.reg)
	if err != nil {
		return nil, err
	}
	g.metrics = m
	g.upstream = newUpstreamMetrics(g.reg)
	g.reg.MustRegister(buildInfo(buildinfo.Read()))
	g.proxyLog = slog.NewLogLogger(log.Handler(), slog.LevelWarn)
	if up := cfg.EnvoyRLS.Upstream; up != nil {
		// `sluice ratelimit`: envoyproxy/ratelimit's TRACING_ variables.
		if g.tracing, err = newUpstreamTracing(up.Tracing, os.Getenv, log); err != nil {
			return nil, err
		}
		if t := up.Tracing; t != nil {
			log.Info("sluice: tracing on: spans go over OTLP to the endpoint of the OTEL_EXPORTER_OTLP_ variables, as TRACING_ENABLED asks",
				"protocol", t.Protocol, "service_name", t.ServiceName, "sampling_rate", t.SamplingRate)
		}
	} else if g.tracing, err = newTracing(os.Getenv, log); err != nil {
		return nil, err
	} else if g.tracing != nil {
		log.Info("sluice: tracing on: spans go over OTLP as the OTEL_* variables say")
	}
	if g.tracing != nil {
		g.tracer = g.tracing.tracer
	}
	g.untrusted = newForwardedWarner(g.reg, log)
	g.initLimits(cfg)
	if err := g.openStore(cfg); err != nil {
		_ = g.tracing.shutdown(context.Background())
		return nil, err
	}
	fail := func(err error) (*Gateway, error) {
		_ = g.closeStore()
		_ = g.tracing.shutdown(context.Background())
		return nil, err
	}
	if err := g.openOverrides(cfg); err != nil {
		return fail(err)
	}
	st, err := g.compile(cfg)
	if err != nil {
		return fail(err)
	}
	g.state.Store(st)
	if g.accessLog, err = newAccessLog(&cfg.AccessLog, g.reg, log); err != nil {
		return fail(fmt.Errorf("%s: %w", cfg.File, err))
	}
	return g, nil
}

func (g *Gateway) openStore(cfg *config.Config) error {
	if cfg.Store.Type != "redis" {
		local := memstore.New(memstore.Options{MaxKeys: cfg.Store.MaxKeys})
		all, err := newRouter(local, func(name string) (algo.Store, error) {
			return algo.Memory(name, algo.MemoryOptions{MaxKeys: cfg.Store.MaxKeys})
		})
		if err != nil {
			_ = local.Close()
			return err
		}
		g.store, g.probes = all, []*probe{{store: local}}
		g.closeStore = func() error { _ = all.Close(); return local.Close() }
		return nil
	}
	client, raw, pr, err := newRedisStore(cfg.Store.Redis, g.log)
	if err != nil {
		return fmt.Errorf("%s: store.redis: %w", cfg.File, err)
	}
	// Policies with a lease: (config.Lease) take leases of raw's buckets.
	leased := &leases{redis: raw}
	jitter := counterJitter(cfg)
	remade := countersRemade(g.reg)
	all, err := newRouter(leased, func(name string) (algo.Store, error) {
		return algo.Redis(name, client, algo.RedisOptions{DisableCoalescing: !cfg.Store.Redis.CoalesceOn(), ExpiryJitter: jitter, CountersRemade: remade})
	})
	if err != nil {
		_ = raw.Close()
		_ = client.Close()
		return err
	}
	// The resilient layer gives every call its deadline and decides by the
	// failure policy when Redis fails; its breaker stops calling a Redis
	// that keeps failing, and its denial cache keeps a flood off Redis.
	// Its bound on calls in flight keeps a burst of requests from waiting
	// for a pooled connection under the deadline: that wait is load, and
	// the local bucket decides what waits too long. Its breakers open only
	// on errors of calls Redis received (one per master on a Cluster).
	opts := resilient.Options{
		OnError:      cfg.Store.FailurePolicy(),
		Instances:    cfg.Store.Instances,
		Timeout:      cfg.Store.Redis.Timeout,
		MaxInFlight:  redisInFlight,
		MaxWait:      redisMaxWait(cfg.Store.Redis),
		Classify:     classifyRedis,
		LocalMaxKeys: cfg.Store.MaxKeys,
		Registerer:   g.reg,
		Logger:       g.log,
	}
	if cc, ok := client.(*redis.ClusterClient); ok {
		opts.Scope, opts.ScopeOf = clusterScope(cc, raw), counterScope(cc)
	}
	up := cfg.EnvoyRLS.Upstream
	if up != nil {
		// `sluice ratelimit`: the denial cache is envoyproxy/ratelimit's
		// local cache of keys over their limit, LOCAL_CACHE_SIZE_IN_BYTES
		// (0: none), split between the two Redis when there are two.
		opts.DenialCacheSize, opts.DenialCacheBytes = -1, 0
		if n := up.LocalCacheBytes; n > 0 {
			opts.DenialCacheSize, opts.DenialCacheBytes = 0, n
			if up.PerSecond != nil {
				opts.DenialCacheBytes = n / 2
			}
		}
	}
	rs := resilient.New(all, opts)
	g.layers = append(g.layers, opts)
	g.redisClient = client
	g.store, g.resilient = rs, true
	g.probes = []*probe{pr}
	closePerSecond := func() {}
	if up != nil && up.PerSecond != nil {
		// The per-second Redis has a resilient layer of its own (its
		// breaker, denial cache and local buckets): when one Redis
		// fails, the limits of the other are still decided by theirs.
		ps, closePS, err := g.openPerSecond(*up.PerSecond, opts, jitter)
		if err != nil {
			_ = rs.Close()
			_ = all.Close()
			_ = leased.Close()
			_ = raw.Close()
			_ = client.Close()
			return fmt.Errorf("%s: the per-second Redis (REDIS_PERSECOND_URL): %w", cfg.File, err)
		}
		g.store, closePerSecond = perSecondStore(rs, ps), closePS
		g.probes[0].name = "REDIS_URL's Redis"
	}
	g.closeStore = func() error {
		_ = rs.Close()
		_ = all.Close()
		_ = leased.Close() // gives back what the leases hold
		closePerSecond()
		_ = raw.Close()
		return client.Close()
	}
	return nil
}

// newRouter returns the gateway's one store: an algo.Router that sends
// each request to tokenBucket or to the store of its policy's algorithm,
// which build makes for every algorithm beside the token bucket. One
// store, so one resilient layer (one breaker, one denial cache) guards
// them all. Closing the router closes the stores build made.
func newRouter(tokenBucket sluice.Store, build func(name string) (algo.Store, error)) (*algo.Router, error) {
	var others []algo.Store
	closeAll := func() {
		for _, st := range others {
			_ = st.Close()
		}
	}
	for _, name := range algo.Names() {
		if name == algo.TokenBucket {
			continue
		}
		st, err := build(name)
		if err != nil {
			closeAll()
			return nil, err
		}
		others = append(others, st)
	}
	r, err := algo.NewRouter(tokenBucket, others...)
	if err != nil {
		closeAll()
	}
	return r, err
}

func (g *Gateway) compile(cfg *config.Config) (*state, error) {
	opts, err := httpconfig.LimiterOptions(cfg)
	if err != nil {
		return nil, err
	}
	opts.Policies = append(opts.Policies, cfg.EnvoyRLS.Policies()...)
	opts.Store = g.store
	opts.Metrics = g.metrics
	opts.Logger = g.log
	opts.Overrides = g.overrides
	opts.Tracer = g.tracer
	// The resilient store decides Redis's failures by each policy's
	// on_error; the other stores ignore it.
	opts.StoreOnError = true
	// Redis's calls are waits, not this process's work: the Envoy
	// service's pacing of a flooding domain leaves them out of a call's
	// own time (envoy_rls.busy_domain_rest).
	opts.StoreWaits = g.resilient
	if g.perSecondClient != nil {
		// The one store choice still in the context: which Redis
		// (REDIS_PERSECOND), read by perSecondStore.
		rls := &cfg.EnvoyRLS
		opts.StoreContext = func(ctx context.Context, p *httplimit.Policy) context.Context {
			return withPerSecond(ctx, rls, p)
		}
	}
	lim, err := httplimit.New(opts)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cfg.File, err)
	}
	var next http.Handler = http.HandlerFunc(noUpstream)
	if cfg.Upstream != "" {
		u, err := url.Parse(cfg.Upstream)
		if err != nil {
			return nil, fmt.Errorf("%s: upstream: %w", cfg.File, err)
		}
		next = g.proxies(u, opts.TrustedProxies, opts.ForwardedFrom, opts.Policies)
	}
	return &state{cfg: cfg, limiter: lim, handler: lim.Handler(next), trusted: opts.TrustedProxies, forwardedFrom: opts.ForwardedFrom}, nil
}

// upstreamTransport is shared by every configuration, so a reload keeps the
// pool of connections to the upstream.
var upstreamTransport = &http.Transport{
	Proxy:                 nil,
	DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
	ForceAttemptHTTP2:     true,
	MaxIdleConns:          1024,
	MaxIdleConnsPerHost:   512,
	IdleConnTimeout:       90 * time.Second,
	TLSHandshakeTimeout:   5 * time.Second,
	ExpectContinueTimeout: time.Second,
}

// copyBuffers lends ReverseProxy the 32 KiB buffer it copies each response
// body through, which it would otherwise allocate for every request: that
// allocation was most of the gateway's garbage, and its collection a fifth
// of its CPU under load.
var copyBuffers = &bufferPool{}

type bufferPool struct{ p sync.Pool }

func (b *bufferPool) Get() []byte {
	if buf, ok := b.p.Get().(*[]byte); ok {
		return *buf
	}
	return make([]byte, 32<<10)
}

func (b *bufferPool) Put(buf []byte) { b.p.Put(&buf) }

// upstreamFailed answers a request whose upstream did not. A request
// whose body passed max_body_bytes on the way did not fail upstream:
// guardWriter answers and counts it as what it is (413), and nothing is
// logged of it, as of the gateway's other refusals.
func (g *Gateway) upstreamFailed(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, context.Canceled) {
		w.WriteHeader(499) // the client went away; nobody reads this
		return
	}
	if tooLarge := (*http.MaxBytesError)(nil); errors.As(err, &tooLarge) {
		w.WriteHeader(http.StatusBadGateway) // replaced by guardWriter's 413
		return
	}
	g.log.Warn("sluice: upstream failed", "method", r.Method, "path", r.URL.Path, "err", err)
	writeError(w, http.StatusBadGateway, "bad_gateway", "the upstream did not answer")
}

func noUpstream(w http.ResponseWriter, r *http.Request) {
	writeError(w, http.StatusNotFound, "not_found", "no upstream is configured; this gateway serves only the decision API, on its own listener")
}

// ServeHTTP serves the traffic listener: the policies in front of the
// upstream, within the bounds of the server section. /v1/check and
// /v1/authz are the decision API here only with
// decision_api.on_traffic_listener; otherwise they go to the upstream like
// any other path.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if g.tracer != nil {
		g.serveTraced(w, r, g.serveLoggedOrNot)
		return
	}
	g.serveLoggedOrNot(w, r)
}

func (g *Gateway) serveLoggedOrNot(w http.ResponseWriter, r *http.Request) {
	if g.accessLog != nil {
		g.serveLogged(w, r, g.serveTrafficListener)
		return
	}
	g.serveTrafficListener(w, r)
}

func (g *Gateway) serveTrafficListener(w http.ResponseWriter, r *http.Request) {
	if !g.trafficFlight.acquire() {
		g.trafficFlight.overloaded(w)
		return
	}
	defer g.trafficFlight.release()
	st := g.state.Load()
	if len(st.trusted) == 0 {
		g.untrusted.note(r)
	}
	if r.URL.Path == "/v1/check" && st.cfg.DecisionAPI.OnTrafficListener {
		g.serveCheck(w, r, st)
		return
	}
	if isAuthz(r.URL.Path) && st.cfg.DecisionAPI.OnTrafficListener {
		g.serveAuthz(w, r, st, true)
		return
	}
	g.serveTraffic(w, r, st)
}

// Admin returns the handler of the admin listener.
func (g *Gateway) Admin() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(g.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", g.serveReady)
	mux.Handle("/v1/admin/", g.adminAPI())
	if g.Config().EnvoyRLS.Upstream != nil {
		mux.HandleFunc("GET /rlconfig", g.serveRLConfig)
	}
	if g.Config().Admin.Pprof {
		mux.Handle("/debug/pprof/", pprofHandler())
	}
	return mux
}

// probe is a store /readyz asks, without failure policy: name says which
// (empty when there is one store), eviction is a warning about its Redis's
// eviction policy, or "" (nil: not checked yet).
type probe struct {
	name     string
	store    sluice.Store
	timeout  time.Duration // its Redis's deadline, when not store.redis's
	eviction atomic.Pointer[string]
	// unchecked is the Redis whose eviction policy is still to be read: it
	// did not answer at start. The first probe that it answers reads it
	// (checkEviction), so a Redis that comes up later with allkeys-lru is
	// reported as one that was up at start is.
	unchecked redis.UniversalClient
	checking  atomic.Bool
}

// checkEviction reads the eviction policy of p's Redis once, when it was
// not read at start and p's store has just answered.
func (p *probe) checkEviction(ctx context.Context, log *slog.Logger) {
	if p.unchecked == nil || p.eviction.Load() != nil || !p.checking.CompareAndSwap(false, true) {
		return
	}
	w := checkEviction(ctx, p.unchecked, log)
	p.eviction.Store(&w)
}

// warning is p's eviction warning, or "".
func (p *probe) warning() string {
	if w := p.eviction.Load(); w != nil {
		return *w
	}
	return ""
}

// serveReady is ready when every store answers a write, or when one does
// not but the failure policy lets requests through (on_error local or
// open); either way the body says what is wrong, naming the store at fault
// when there are two (`sluice ratelimit` with REDIS_PERSECOND). The probe
// takes a token from a key of its own, so a Redis that refuses writes (out
// of memory, a read-only replica) is reported, not only one that is down;
// the key's bucket is full again at once, so it expires within a second.
func (g *Gateway) serveReady(w http.ResponseWriter, r *http.Request) {
	if g.serveDraining(w) {
		return
	}
	st := g.state.Load()
	timeout := st.cfg.Store.Redis.Timeout
	for _, p := range g.probes {
		timeout = max(timeout, p.timeout)
	}
	ctx, cancel := context.WithTimeout(r.Context(), 4*timeout)
	defer cancel()
	errs := make([]error, len(g.probes))
	var wg sync.WaitGroup
	for i, p := range g.probes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = p.store.Check(ctx, sluice.Request{Key: "sluice-readyz", Cost: 1, Rules: readyRule})
		}()
	}
	wg.Wait()
	var failing, notes []string
	for i, p := range g.probes {
		what := "store"
		if p.name != "" {
			what = "store " + p.name
		}
		if errs[i] != nil {
			failing = append(failing, fmt.Sprintf("%s failing (%s: %v)", what, classifyRedis(errs[i]), errs[i]))
		} else {
			p.checkEviction(ctx, g.log)
		}
		if w := p.warning(); w != "" {
			if p.name != "" {
				notes = append(notes, p.name+": "+w)
			} else {
				notes = append(notes, w)
			}
		}
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	note := ""
	if len(notes) > 0 {
		note = "; warning: " + strings.Join(notes, "; ")
	}
	why := strings.Join(failing, ", ")
	switch {
	case len(failing) == 0:
		fmt.Fprintf(w, "ready%s\n", note)
	case st.cfg.Store.FailurePolicy() != sluice.OnErrorClosed:
		fmt.Fprintf(w, "ready: %s, serving with on_error: %s%s\n", why, st.cfg.Store.OnError, note)
	default:
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, "not ready: %s and on_error is closed%s\n", why, note)
	}
}

// readyRule refills the probe's token within a microsecond.
var readyRule = []sluice.Rule{{Rate: 1e6, Burst: 1}}

// Config returns the running configuration.
func (g *Gateway) Config() *config.Config { return g.state.Load().cfg }

// Reload reads the configuration file again and switches to it, as SIGHUP
// asks (it reopens the access log too). When the new file is invalid, or
// refused by the rules that protect a reload (reload.go), the running
// configuration stays, the error is logged and returned.
func (g *Gateway) Reload() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.reopenAccessLog()
	return g.reloadLocked("signal")
}

// reloadLocked is Reload without the access log, for the file watch
// (watch.go) too; by says which asked. g.mu is held.
func (g *Gateway) reloadLocked(by string) error {
	old := g.state.Load().cfg
	cfg, err := g.loadConfig()
	if err == nil {
		if err = refuseReload(old, cfg); err != nil {
			g.reloads.WithLabelValues("refused").Inc()
			g.log.Error("sluice: new configuration refused; keeping the running one", "file", g.path, "by", by, "why", err.Error())
			return err
		}
		var st *state
		if st, err = g.compile(cfg); err == nil {
			g.warnRestart(old, cfg)
			if len(cfg.Policies) == 0 && len(old.Policies) > 0 {
				g.log.Warn("sluice: the new configuration has no policies (policies: []); nothing is limited but what envoy_rls and the allowlist say", "file", g.path, "running_policies", len(old.Policies))
			}
			g.state.Store(st)
			g.syncConfigHealth()
			g.reloads.WithLabelValues("ok").Inc()
			g.log.Info("sluice: configuration reloaded", "file", g.path, "by", by, "policies", len(cfg.Policies))
			return nil
		}
		err = errors.New(cfg.Redact("", err.Error()))
	}
	g.reloads.WithLabelValues("invalid").Inc()
	g.log.Error("sluice: new configuration is invalid; keeping the running one", "file", g.path, "by", by, "err", err)
	return err
}

func (g *Gateway) warnRestart(old, cfg *config.Config) {
	if !reflect.DeepEqual(old.Store, cfg.Store) {
		g.log.Warn("sluice: the store section changed; it applies at the next restart", "file", g.path)
	}
	if old.Listen != cfg.Listen || old.AdminListen != cfg.AdminListen || old.DecisionAPI.Listen != cfg.DecisionAPI.Listen || old.EnvoyRLS.Listen != cfg.EnvoyRLS.Listen {
		g.log.Warn("sluice: a listen address changed; it applies at the next restart", "file", g.path)
	}
	warnRestartServer(g.log, g.path, old, cfg)
	g.warnRestartTLS(old, cfg)
	if old.Admin.Pprof != cfg.Admin.Pprof {
		g.log.Warn("sluice: admin.pprof changed; it applies at the next restart", "file", g.path)
	}
	if old.Admin.OverridesFile != cfg.Admin.OverridesFile {
		g.log.Warn("sluice: admin.overrides_file changed; it applies at the next restart", "file", g.path)
	}
	if old.AccessLog != cfg.AccessLog {
		g.log.Warn("sluice: the access_log section changed; it applies at the next restart", "file", g.path)
	}
	if old.Reload.Watching() != cfg.Reload.Watching() {
		g.log.Warn("sluice: reload.watch changed; it applies at the next restart", "file", g.path)
	}
}

// Listen opens the traffic, admin and decision listeners of the
// configuration (the last unless decision_api.listen is off), and the
// gRPC listener of envoy_rls when it has an address.
func (g *Gateway) Listen() error {
	cfg := g.Config()
	if err := g.initTLS(cfg); err != nil {
		return err
	}
	var err error
	if g.trafficLn, err = net.Listen("tcp", cfg.Listen); err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	if g.adminLn, err = net.Listen("tcp", cfg.AdminListen); err != nil {
		g.trafficLn.Close()
		return fmt.Errorf("admin_listen: %w", err)
	}
	if cfg.DecisionAPI.Listen != config.DecisionListenOff {
		if g.decisionLn, err = net.Listen("tcp", cfg.DecisionAPI.Listen); err != nil {
			g.trafficLn.Close()
			g.adminLn.Close()
			return fmt.Errorf("decision_api.listen: %w", err)
		}
	}
	if cfg.EnvoyRLS.Enabled() {
		what := "envoy_rls.listen"
		if up := cfg.EnvoyRLS.Upstream; up != nil && up.GRPCUnixSocket != "" {
			// `sluice ratelimit` with GRPC_UDS: there instead of TCP.
			what = "GRPC_UDS"
			g.rlsLn, err = listenUnix(up.GRPCUnixSocket, g.log)
		} else {
			g.rlsLn, err = net.Listen("tcp", cfg.EnvoyRLS.Listen)
		}
		if err != nil {
			g.trafficLn.Close()
			g.adminLn.Close()
			if g.decisionLn != nil {
				g.decisionLn.Close()
			}
			return fmt.Errorf("%s: %w", what, err)
		}
	}
	return nil
}

// RLSAddr returns the address of the envoy_rls gRPC listener, or nil
// when it is off.
func (g *Gateway) RLSAddr() net.Addr {
	if g.rlsLn == nil {
		return nil
	}
	return g.rlsLn.Addr()
}

// serveRLS serves Envoy's rate limit service on the gRPC listener, with
// the descriptors and the Limiter of the running configuration.
func (g *Gateway) serveRLS(cfg *config.Config, errc chan<- error) {
	rls := envoyrls.New(g.rlsSource, envoyrls.Options{
		MaxInFlight:      cfg.Server.MaxInFlight,
		MaxConnections:   cfg.Server.MaxConnections,
		MaxMessageBytes:  cfg.Server.MaxHeaderBytes,
		HandshakeTimeout: cfg.Server.ReadHeaderTimeout,
		IdleTimeout:      cfg.Server.IdleTimeout,
		// envoy_rls's own bounds (docs/envoy.md, "Bounds of the listener").
		MaxStreamsPerConnection: cfg.EnvoyRLS.MaxStreamsPerConnection,
		MaxStreamsPerIP:         cfg.EnvoyRLS.MaxStreamsPerIP,
		IPv6Prefix:              cfg.IPv6Prefix,
		FirstMessageTimeout:     cfg.EnvoyRLS.FirstMessageTimeout,
		MaxInFlightPerDomain:    cfg.EnvoyRLS.MaxInFlightPerDomain,
		DomainWait:              cfg.EnvoyRLS.DomainWait,
		BusyDomainRest:          cfg.EnvoyRLS.BusyDomainRest,
		MaxDescriptors:          cfg.EnvoyRLS.MaxDescriptors,
		MaxEntries:              cfg.EnvoyRLS.MaxEntries,
		Rejected:                func(reason string) { g.rejected("envoy_rls", reason) },
		Logger:                  g.log,
		TLS:                     g.TLS(config.ListenerEnvoyRLS),
		Stats:                   g.rlsStats,
		Tracer:                  g.tracer,
	})
	g.setRLS(rls)
	go func() { errc <- rls.Serve(g.perAddress(g.rlsLn, cfg, "envoy_rls")) }()
}

// Addrs returns the addresses the traffic and admin listeners are bound to.
func (g *Gateway) Addrs() (traffic, admin net.Addr) {
	return g.trafficLn.Addr(), g.adminLn.Addr()
}

// DecisionAddr returns the address of the decision listener, or nil when
// decision_api.listen is off.
func (g *Gateway) DecisionAddr() net.Addr {
	if g.decisionLn == nil {
		return nil
	}
	return g.decisionLn.Addr()
}

// Serve serves on the listeners of Listen until ctx ends, then shuts down
// gracefully: it stops accepting, lets requests in flight finish (for up to
// grace; 0: server.shutdown_timeout), and closes the store. Drain before
// ending ctx lets load balancers notice first.
func (g *Gateway) Serve(ctx context.Context, grace time.Duration) error {
	cfg := g.Config()
	g.traffic = g.newServer(g.trafficHandler(cfg), cfg.Server, "traffic")
	g.admin = g.newServer(g.Admin(), cfg.Server, "admin")
	mode := "reverse proxy to " + cfg.Redact("upstream", cfg.Upstream)
	if cfg.Upstream == "" {
		mode = "decision API only (no upstream)"
	}
	decisionAddr := "off"
	if g.decisionLn != nil {
		decisionAddr = g.decisionLn.Addr().String()
	}
	g.log.Info("sluice: serving", "listen", g.trafficLn.Addr().String(), "admin_listen", g.adminLn.Addr().String(),
		"decision_listen", decisionAddr, "decision_api_on_traffic_listener", cfg.DecisionAPI.OnTrafficListener,
		"mode", mode, "store", cfg.Store.Type, "policies", len(cfg.Policies))
	if g.rlsLn != nil {
		g.log.Info("sluice: serving Envoy's rate limit service", "envoy_rls_listen", g.rlsLn.Addr().String(),
			"domains", len(cfg.EnvoyRLS.Domains()), "limits", len(cfg.EnvoyRLS.Policies()))
	}
	errc := make(chan error, 4)
	go func() {
		errc <- g.traffic.Serve(g.tlsListener(config.ListenerTraffic, g.limitListener(g.perAddress(g.trafficLn, cfg, "traffic"), cfg.Server.MaxConnections, "traffic")))
	}()
	go func() {
		errc <- g.admin.Serve(g.tlsListener(config.ListenerAdmin, g.perAddress(g.adminLn, cfg, "admin")))
	}()
	if g.decisionLn != nil {
		g.decision = g.newServer(g.DecisionAPI(), cfg.Server, "decision")
		go func() {
			errc <- g.decision.Serve(g.tlsListener(config.ListenerDecision, g.limitListener(g.perAddress(g.decisionLn, cfg, "decision"), cfg.Server.MaxConnections, "decision")))
		}()
	}
	if g.rlsLn != nil {
		g.serveRLS(cfg, errc)
	}
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	if grace <= 0 {
		grace = g.Config().Server.ShutdownTimeout // as the configuration says now
	}
	g.log.Info("sluice: shutting down: the listeners stop accepting; requests in flight may finish", "shutdown_timeout", grace)
	serr := g.shutdown(grace)
	g.closeAccessLog()
	_ = g.closeStore()
	tctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if e := g.tracing.shutdown(tctx); e != nil {
		g.log.Warn("sluice: spans not exported at shutdown", "err", e)
	}
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return serr
}

// Close releases the store of a gateway that never served.
func (g *Gateway) Close() error {
	g.closeAccessLog()
	_ = g.tracing.shutdown(context.Background())
	return g.closeStore()
}

func ceilMs(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, map[string]string{"error": code, "message": msg})
}
