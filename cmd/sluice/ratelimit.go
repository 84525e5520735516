package main

import (
	"context"
	"fmt"
	"io"
	"os/signal"
	"syscall"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/gateway"
	"github.com/sluicehq/sluice/internal/rlsstats"
)

const ratelimitDoc = `Usage: sluice ratelimit

Serve Envoy's global rate limit service as envoyproxy/ratelimit does, from
its environment variables alone, so that a Deployment of it changes only
its image: gRPC (rate limit and health, for "ratelimit" too) on
GRPC_HOST:GRPC_PORT (8081), or on the unix socket GRPC_UDS instead; /healthcheck and /json on HOST:PORT (8080);
/rlconfig, /metrics, /healthz and /readyz on DEBUG_HOST:DEBUG_PORT (6070),
and /debug/pprof/ there to loopback peers only with SLUICE_PPROF=true.
The descriptor files are every file under
RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY, subdirectories
too (dotfiles skipped with RUNTIME_IGNOREDOTFILES=true), watched: a change
applies within about 2 s, and a file that fails keeps the running
configuration (logged, and counted in sluice_config_reloads_total).
Counters live in the Redis of REDIS_SOCKET_TYPE, REDIS_TYPE and REDIS_URL
(those of unit second in the REDIS_PERSECOND_ one with REDIS_PERSECOND=true).
With any REDIS_STARTUP_ variable set, the listeners open only once Redis
answers, as there (exit 1 past REDIS_STARTUP_MAX_ELAPSED_TIME).

envoyproxy/ratelimit's statsd counters (ratelimit.service.…) go to
STATSD_HOST:STATSD_PORT over STATSD_PROTOCOL (tcp) every
STATS_FLUSH_INTERVAL unless USE_STATSD=false or DISABLE_STATS=true;
as DogStatsD over UDP with USE_DOG_STATSD=true (and USE_STATSD=false),
renamed and tagged by the mogrifiers of USE_DOG_STATSD_MOGRIFIERS.
With TRACING_ENABLED=true, spans go over OTLP (TRACING_EXPORTER_PROTOCOL:
http or grpc) to OTEL_EXPORTER_OTLP_ENDPOINT, of service
TRACING_SERVICE_NAME, sampled at TRACING_SAMPLING_RATE; none without it.

A variable sluice does not offer (memcache, xDS, …) is refused at start when set to anything but its default, with what to
use instead; docs/envoy.md lists every variable and what sluice does with
it. Exit status: 2 when the environment or a descriptor file is invalid,
1 when a listener cannot be opened or Redis does not answer in
REDIS_STARTUP_MAX_ELAPSED_TIME, 0 after a clean shutdown (SIGTERM:
/healthcheck fails at once, then the calls in flight finish).
`

func ratelimit(args, environ []string, stdout, stderr io.Writer) int {
	fs := newFlags("ratelimit", ratelimitDoc, stdout, stderr)
	if code := fs.parse(args); code >= 0 {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintln(stderr, "sluice ratelimit: takes no arguments; it is configured by envoyproxy/ratelimit's environment variables (see 'sluice ratelimit --help')")
		return 2
	}
	load := func() (*config.Config, error) { return config.FromUpstreamEnv(environ) }
	cfg, err := load()
	if err != nil {
		fmt.Fprintln(stderr, "sluice ratelimit:", err)
		return 2
	}
	up := cfg.EnvoyRLS.Upstream
	log, err := logFlags{level: &up.LogLevel, format: &up.LogFormat}.logger(stderr)
	if err != nil {
		fmt.Fprintln(stderr, "sluice ratelimit:", err)
		return 2
	}
	for _, n := range up.Notes {
		log.Info("sluice ratelimit: " + n)
	}
	for _, w := range cfg.Warnings {
		log.Warn("sluice: " + w)
	}
	// REDIS_STARTUP_*: wait for Redis before serving, as upstream does.
	if b := up.RedisStartup; b != nil {
		rs := []gateway.StartupRedis{{Name: "REDIS_URL's Redis", Redis: cfg.Store.Redis}}
		if up.PerSecond != nil {
			rs = append(rs, gateway.StartupRedis{Name: "the per-second Redis (REDIS_PERSECOND_URL)", Redis: *up.PerSecond})
		}
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
		err := gateway.WaitRedis(ctx, rs, *b, log)
		stop()
		if err != nil {
			fmt.Fprintln(stderr, "sluice ratelimit:", err)
			return 1
		}
	}
	g, err := gateway.New(cfg, "", log)
	if err != nil {
		fmt.Fprintln(stderr, "sluice ratelimit:", err)
		return 2
	}
	// USE_STATSD (true unless set false, as there): envoyproxy/ratelimit's
	// stats, to STATSD_HOST:STATSD_PORT; USE_PROMETHEUS: the same stats,
	// served for Prometheus at PROMETHEUS_ADDR (closed by stats.Close).
	var stats *rlsstats.Stats
	if sd := up.Statsd; sd != nil {
		if stats, err = rlsstats.New(*sd, log); err != nil {
			fmt.Fprintln(stderr, "sluice ratelimit:", err)
			return 2
		}
		defer stats.Close()
		if a := stats.PrometheusAddr(); a != nil {
			log.Info("sluice ratelimit: envoyproxy/ratelimit's stats for Prometheus", "addr", a.String(), "path", sd.Prometheus.Path)
		}
		stats.ConfigLoad(true)
		g.SetStats(stats)
	}
	g.SetLoader(func() (*config.Config, error) {
		c, err := load()
		stats.ConfigLoad(err == nil)
		return c, err
	})
	grpcAt := cfg.EnvoyRLS.Listen
	if up.GRPCUnixSocket != "" {
		grpcAt = "unix://" + up.GRPCUnixSocket
	}
	log.Info("sluice ratelimit: serving as envoyproxy/ratelimit", "grpc", grpcAt, "http", up.HTTPListen,
		"debug", up.DebugListen, "config_dir", cfg.EnvoyRLS.Dir(), "domains", len(cfg.EnvoyRLS.Domains()))
	return runGateway("sluice ratelimit", g, 0, log, stderr)
}
