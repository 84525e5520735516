package config_test

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/testkit/certstest"
)

// upstreamBase is an environment that starts: a runtime directory with
// one descriptor file in a subdirectory of its config directory.
func upstreamBase(t *testing.T) (env []string, root string) {
	t.Helper()
	root = t.TempDir()
	dir := filepath.Join(root, "rl", "config", "nested")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "limits"), "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 5}\n")
	return []string{"RUNTIME_ROOT=" + root, "RUNTIME_SUBDIRECTORY=rl", "USE_STATSD=false", "REDIS_SOCKET_TYPE=tcp", "REDIS_URL=127.0.0.1:6390"}, root
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestFromUpstreamEnvDefaults(t *testing.T) {
	env, root := upstreamBase(t)
	c, err := config.FromUpstreamEnv(env)
	if err != nil {
		t.Fatal(err)
	}
	up := c.EnvoyRLS.Upstream
	if up == nil {
		t.Fatal("EnvoyRLS.Upstream is nil")
	}
	for _, f := range []struct{ name, got, want string }{
		{"grpc listen", c.EnvoyRLS.Listen, "0.0.0.0:8081"},
		{"http listen", c.Listen, "0.0.0.0:8080"},
		{"debug listen", c.AdminListen, "0.0.0.0:6070"},
		{"config dir", c.EnvoyRLS.Dir(), filepath.Join(root, "rl", "config")},
		{"redis url", c.Store.Redis.URL, "redis://127.0.0.1:6390"},
		{"store", c.Store.Type, "redis"},
		{"headers", c.Headers, "none"},
		{"envoy headers", c.EnvoyRLS.ResponseHeaders, "none"},
		{"log level", up.LogLevel, "warn"},
		{"log format", up.LogFormat, "text"},
		{"decision api", c.DecisionAPI.Listen, config.DecisionListenOff},
	} {
		if f.got != f.want {
			t.Errorf("%s = %q; want %q", f.name, f.got, f.want)
		}
	}
	if _, ok := c.EnvoyRLS.Domains()["d"]; !ok {
		t.Errorf("domains %v; want d, from a file without a .yaml name in a subdirectory", c.EnvoyRLS.Domains())
	}
	if c.Store.Redis.Timeout != 50*time.Millisecond {
		t.Errorf("redis timeout %v; want sluice's 50ms when REDIS_TIMEOUT is unset", c.Store.Redis.Timeout)
	}
	// The listener's own bounds are sluice's defaults, one domain's flood
	// paced (envoy_rls.busy_domain_rest) included: no variable of
	// upstream's turns them off.
	if e := c.EnvoyRLS; e.BusyDomainRest != config.DefaultRLSBusyDomainRest || e.MaxStreamsPerIP != config.DefaultRLSMaxStreamsPerIP {
		t.Errorf("busy_domain_rest %d, max_streams_per_ip %d; want sluice's defaults", e.BusyDomainRest, e.MaxStreamsPerIP)
	}
}

// TestFromUpstreamEnvHonoured sets each honoured variable and checks what
// it changes.
func TestFromUpstreamEnvHonoured(t *testing.T) {
	ca := certstest.NewCA(t, "ca")
	certDir := t.TempDir()
	cert, key := ca.Issue(t, "localhost").Write(t, certDir, "server")
	caFile := filepath.Join(certDir, "ca.pem")
	certstest.WriteFile(t, caFile, ca.PEM)
	cases := []struct {
		vars  []string
		check func(c *config.Config) string // "" when right, else what is wrong
	}{
		{[]string{"HOST=127.0.0.1", "PORT=9001"}, func(c *config.Config) string { return want(c.Listen, "127.0.0.1:9001") }},
		{[]string{"DEBUG_HOST=127.0.0.2", "DEBUG_PORT=9002"}, func(c *config.Config) string { return want(c.AdminListen, "127.0.0.2:9002") }},
		{[]string{"SLUICE_PPROF=true"}, func(c *config.Config) string { return want(c.Admin.Pprof, true) }},
		{[]string{"SLUICE_MAX_IN_FLIGHT_PER_DOMAIN=512", "SLUICE_DOMAIN_WAIT=250ms", "SLUICE_BUSY_DOMAIN_REST=-1", "SLUICE_MAX_STREAMS_PER_IP=4096",
			"SLUICE_MAX_STREAMS_PER_CONNECTION=200", "SLUICE_FIRST_MESSAGE_TIMEOUT=5s", "SLUICE_MAX_DESCRIPTORS=128", "SLUICE_MAX_ENTRIES=16"},
			func(c *config.Config) string {
				e := c.EnvoyRLS
				return want(fmt.Sprint(e.MaxInFlightPerDomain, e.DomainWait, e.BusyDomainRest, e.MaxStreamsPerIP, e.MaxStreamsPerConnection, e.FirstMessageTimeout, e.MaxDescriptors, e.MaxEntries),
					"512 250ms -1 4096 200 5s 128 16")
			}},
		{[]string{"SLUICE_PPROF=false"}, func(c *config.Config) string { return want(c.Admin.Pprof, false) }},
		{nil, func(c *config.Config) string { return want(c.Admin.Pprof, false) }},
		{[]string{"GRPC_HOST=127.0.0.3", "GRPC_PORT=9003"}, func(c *config.Config) string { return want(c.EnvoyRLS.Listen, "127.0.0.3:9003") }},
		{[]string{"LOCAL_CACHE_SIZE_IN_BYTES=2000000"}, func(c *config.Config) string { return want(c.EnvoyRLS.Upstream.LocalCacheBytes, 2000000) }},
		{[]string{"LOCAL_CACHE_SIZE_IN_BYTES=1000"}, func(c *config.Config) string { return want(c.EnvoyRLS.Upstream.LocalCacheBytes, 512<<10) }},
		{[]string{"LOCAL_CACHE_SIZE_IN_BYTES=0"}, func(c *config.Config) string { return want(c.EnvoyRLS.Upstream.LocalCacheBytes, 0) }},
		{[]string{"GRPC_UDS=/run/rl/grpc.sock"}, func(c *config.Config) string { return want(c.EnvoyRLS.Upstream.GRPCUnixSocket, "/run/rl/grpc.sock") }},
		{[]string{"GRPC_SERVER_USE_TLS=true", "GRPC_SERVER_TLS_CERT=" + cert, "GRPC_SERVER_TLS_KEY=" + key, "GRPC_CLIENT_TLS_CACERT=" + caFile}, func(c *config.Config) string {
			if c.ListenerTLS(config.ListenerEnvoyRLS) == nil || c.EnvoyRLS.TLS.ClientCAFile != caFile {
				return "no TLS with a client CA on the gRPC listener"
			}
			return ""
		}},
		{[]string{"LOG_LEVEL=debug", "LOG_FORMAT=JSON"}, func(c *config.Config) string {
			return want(c.EnvoyRLS.Upstream.LogLevel+" "+c.EnvoyRLS.Upstream.LogFormat, "debug json")
		}},
		{[]string{"LOG_LEVEL=trace"}, func(c *config.Config) string { return want(c.EnvoyRLS.Upstream.LogLevel, "debug") }},
		// REDIS_STARTUP_: no wait at start unless one is set; one set
		// gives upstream's defaults for the others.
		{nil, func(c *config.Config) string { return want(c.EnvoyRLS.Upstream.RedisStartup == nil, true) }},
		{[]string{"REDIS_STARTUP_MAX_ELAPSED_TIME=2m"}, func(c *config.Config) string {
			return want(fmt.Sprint(c.EnvoyRLS.Upstream.RedisStartup), "&{1s 30s 2m0s}")
		}},
		{[]string{"REDIS_STARTUP_INITIAL_INTERVAL=50ms", "REDIS_STARTUP_MAX_INTERVAL=400ms"}, func(c *config.Config) string {
			return want(fmt.Sprint(c.EnvoyRLS.Upstream.RedisStartup), "&{50ms 400ms 0s}")
		}},
		// The statsd stats: upstream's defaults when USE_STATSD is true
		// (upstreamBase sets it false), each variable as set.
		{[]string{"USE_STATSD=true"}, func(c *config.Config) string {
			sd := c.EnvoyRLS.Upstream.Statsd
			if sd == nil {
				return "USE_STATSD=true: no statsd"
			}
			return want(fmt.Sprintf("%s %s %v %v %v", sd.Addr, sd.Protocol, sd.FlushInterval, sd.NearLimitRatio, len(sd.Tags)), "localhost:8125 tcp 10s 0.8 0")
		}},
		{[]string{"USE_STATSD=true", "STATSD_HOST=stats.local", "STATSD_PORT=9125", "STATSD_PROTOCOL=UDP", "STATS_FLUSH_INTERVAL=250ms", "NEAR_LIMIT_RATIO=0.5", "EXTRA_TAGS=env:prod,team:edge"}, func(c *config.Config) string {
			sd := c.EnvoyRLS.Upstream.Statsd
			if sd == nil {
				return "no statsd"
			}
			return want(fmt.Sprintf("%s %s %v %v %v", sd.Addr, sd.Protocol, sd.FlushInterval, sd.NearLimitRatio, sd.Tags), "stats.local:9125 udp 250ms 0.5 map[env:prod team:edge]")
		}},
		// DogStatsD: over UDP whatever STATSD_PROTOCOL says, with the
		// mogrifiers named, in their order.
		{[]string{"USE_DOG_STATSD=true", "STATSD_PROTOCOL=tcp", "USE_DOG_STATSD_MOGRIFIERS=rl,Other",
			`DOG_STATSD_MOGRIFIER_RL_PATTERN=^ratelimit\.service\.rate_limit\.([^.]+)\.(.+)\.([a-z_]+)$`, "DOG_STATSD_MOGRIFIER_RL_NAME=ratelimit.$3", "DOG_STATSD_MOGRIFIER_RL_TAGS=domain:$1,descriptor:$2,n:$9",
			"DOG_STATSD_MOGRIFIER_OTHER_PATTERN=^x$", "DOG_STATSD_MOGRIFIER_OTHER_NAME=y"}, func(c *config.Config) string {
			sd := c.EnvoyRLS.Upstream.Statsd
			if sd == nil || !sd.Dog || len(sd.Mogrifiers) != 2 {
				return fmt.Sprintf("statsd %+v; want DogStatsD with two mogrifiers", sd)
			}
			name, tags := config.Mogrify(sd.Mogrifiers, "ratelimit.service.rate_limit.d.k_v.total_hits")
			other, none := config.Mogrify(sd.Mogrifiers, "ratelimit.service.config_load_success")
			return want(fmt.Sprint(sd.Protocol, " ", name, " ", tags, " ", other, " ", none), "udp ratelimit.total_hits [domain:d descriptor:k_v n:$9] ratelimit.service.config_load_success []")
		}},
		{[]string{"USE_DOG_STATSD=true", "DISABLE_STATS=true"}, func(c *config.Config) string { return want(c.EnvoyRLS.Upstream.Statsd == nil, true) }},
		{[]string{"USE_STATSD=true", "DISABLE_STATS=true"}, func(c *config.Config) string { return want(c.EnvoyRLS.Upstream.Statsd == nil, true) }},
		// USE_PROMETHEUS (with USE_STATSD=false): TestUpstreamPrometheus.
		{[]string{"USE_PROMETHEUS=true", "PROMETHEUS_ADDR=127.0.0.1:9102", "PROMETHEUS_PATH=/m", "PROMETHEUS_MAPPER_YAML=/m.yaml", "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS=true"}, func(c *config.Config) string {
			sd := c.EnvoyRLS.Upstream.Statsd
			if sd == nil || sd.Prometheus == nil {
				return "USE_PROMETHEUS=true: no Prometheus"
			}
			return want(fmt.Sprintf("%+v", *sd.Prometheus), "{Addr:127.0.0.1:9102 Path:/m MapperYAML:/m.yaml ResponseTimeMillis:true}")
		}},
		// Tracing: none unless TRACING_ENABLED is true, whatever the
		// OTEL_ variables say (they are noted); upstream's defaults.
		{[]string{"OTEL_EXPORTER_OTLP_ENDPOINT=http://collector:4318"}, func(c *config.Config) string {
			up := c.EnvoyRLS.Upstream
			return want(fmt.Sprint(up.Tracing == nil, " ", slices.ContainsFunc(up.Notes, func(n string) bool { return strings.Contains(n, "TRACING_ENABLED is not true") })), "true true")
		}},
		{[]string{"TRACING_ENABLED=true"}, func(c *config.Config) string {
			return want(fmt.Sprint(c.EnvoyRLS.Upstream.Tracing), "&{http RateLimit   1}")
		}},
		{[]string{"TRACING_ENABLED=true", "TRACING_EXPORTER_PROTOCOL=GRPC", "TRACING_SERVICE_NAME=rl", "TRACING_SERVICE_NAMESPACE=edge", "TRACING_SERVICE_INSTANCE_ID=rl-0", "TRACING_SAMPLING_RATE=0.25",
			"OTEL_TRACES_SAMPLER=always_off"}, func(c *config.Config) string {
			up := c.EnvoyRLS.Upstream
			return want(fmt.Sprint(up.Tracing, " ", slices.Contains(up.Notes, "OTEL_TRACES_SAMPLER=always_off: ignored, TRACING_SAMPLING_RATE decides, as in envoyproxy/ratelimit")),
				"&{grpc rl edge rl-0 0.25} true")
		}},
		{[]string{"TRACING_ENABLED=true", "TRACING_EXPORTER_PROTOCOL=", "TRACING_SAMPLING_RATE=0"}, func(c *config.Config) string {
			return want(fmt.Sprint(c.EnvoyRLS.Upstream.Tracing), "&{http RateLimit   0}")
		}},
		{[]string{"TRACING_ENABLED=false", "TRACING_SAMPLING_RATE=0.5"}, func(c *config.Config) string { return want(c.EnvoyRLS.Upstream.Tracing == nil, true) }},
		{[]string{"LOG_LEVEL=fatal"}, func(c *config.Config) string { return want(c.EnvoyRLS.Upstream.LogLevel, "error") }},
		{[]string{"RUNTIME_APPDIRECTORY=config/nested"}, func(c *config.Config) string { return want(filepath.Base(c.EnvoyRLS.Dir()), "nested") }},
		{[]string{"RUNTIME_WATCH_ROOT=false"}, func(c *config.Config) string { return want(filepath.Base(c.EnvoyRLS.Dir()), "config") }},
		{[]string{"RUNTIME_IGNOREDOTFILES=true"}, func(c *config.Config) string {
			return want(c.EnvoyRLS.Upstream.IgnoreDotFiles, true)
		}},
		{[]string{"BACKEND_TYPE=redis"}, func(c *config.Config) string { return want(c.Store.Type, "redis") }},
		{[]string{"RESPONSE_DYNAMIC_METADATA=true"}, func(c *config.Config) string { return want(c.EnvoyRLS.DynamicMetadata, true) }},
		{[]string{"LIMIT_RESPONSE_HEADERS_ENABLED=true"}, func(c *config.Config) string {
			e := c.EnvoyRLS
			return want(e.ResponseHeaders+" "+e.LimitHeader+" "+e.RemainingHeader+" "+e.ResetHeader, "envoyproxy RateLimit-Limit RateLimit-Remaining RateLimit-Reset")
		}},
		{[]string{"LIMIT_RESPONSE_HEADERS_ENABLED=true", "LIMIT_LIMIT_HEADER=X-Limit", "LIMIT_REMAINING_HEADER=X-Left", "LIMIT_RESET_HEADER=X-Reset"}, func(c *config.Config) string {
			e := c.EnvoyRLS
			return want(e.LimitHeader+" "+e.RemainingHeader+" "+e.ResetHeader, "X-Limit X-Left X-Reset")
		}},
		{[]string{"REDIS_SOCKET_TYPE=unix", "REDIS_URL=/run/redis/redis.sock"}, func(c *config.Config) string {
			return want(c.Store.Redis.URL, "unix:///run/redis/redis.sock")
		}},
		{[]string{"REDIS_TYPE=CLUSTER", "REDIS_URL=10.0.0.1:7000,10.0.0.2:7000"}, func(c *config.Config) string {
			return want(strings.Join(c.Store.Redis.ClusterAddrs, ","), "10.0.0.1:7000,10.0.0.2:7000")
		}},
		{[]string{"REDIS_TYPE=sentinel", "REDIS_URL=mymaster,10.0.0.1:26379,10.0.0.2:26379"}, func(c *config.Config) string {
			s := c.Store.Redis.Sentinel
			return want(s.Master+" "+strings.Join(s.Addrs, ","), "mymaster 10.0.0.1:26379,10.0.0.2:26379")
		}},
		{[]string{"REDIS_TYPE=SINGLE"}, func(c *config.Config) string { return want(c.Store.Redis.URL, "redis://127.0.0.1:6390") }},
		{[]string{"REDIS_POOL_SIZE=64"}, func(c *config.Config) string { return want(c.Store.Redis.PoolSize, 64) }},
		{[]string{"REDIS_AUTH=secret"}, func(c *config.Config) string {
			return want(c.Store.Redis.Username+"/"+c.Store.Redis.Password.Reveal(), "/secret")
		}},
		{[]string{"REDIS_AUTH=alice:se:cret"}, func(c *config.Config) string {
			return want(c.Store.Redis.Username+"/"+c.Store.Redis.Password.Reveal(), "alice/se:cret")
		}},
		{[]string{"REDIS_TLS=true", "REDIS_TLS_CACERT=" + caFile, "REDIS_TLS_CLIENT_CERT=" + cert, "REDIS_TLS_CLIENT_KEY=" + key}, func(c *config.Config) string {
			r := c.Store.Redis
			return want(r.URL+" "+r.TLS.CAFile+" "+r.TLS.CertFile+" "+r.TLS.KeyFile, "rediss://127.0.0.1:6390 "+caFile+" "+cert+" "+key)
		}},
		{[]string{"REDIS_TIMEOUT=2s"}, func(c *config.Config) string { return want(c.Store.Redis.Timeout, 2*time.Second) }},
		{[]string{"SHADOW_MODE=true"}, func(c *config.Config) string { return want(c.EnvoyRLS.Upstream.ShadowMode, true) }},
		{[]string{"QUOTA_MODE=true"}, func(c *config.Config) string { return want(c.EnvoyRLS.Upstream.QuotaMode, true) }},
		{[]string{"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED=true"}, func(c *config.Config) string {
			return want(c.EnvoyRLS.Upstream.HealthyWithConfig, true)
		}},
		{[]string{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true"}, func(c *config.Config) string {
			return want(c.EnvoyRLS.Upstream.StopIncrementWhenOver, true)
		}},
		{[]string{"MERGE_DOMAIN_CONFIG=true"}, func(c *config.Config) string { return want(c.EnvoyRLS.Upstream.MergeDomains, true) }},
		{[]string{"REDIS_TYPE=SENTINEL", "REDIS_URL=m,10.0.0.1:26379", "REDIS_SENTINEL_AUTH=sentry:pw"}, func(c *config.Config) string {
			s := c.Store.Redis.Sentinel
			return want(s.Username+"/"+s.Password.Reveal()+" "+c.Store.Redis.Password.Reveal(), "sentry/pw ")
		}},
		{[]string{"CACHE_KEY_PREFIX=rl:", "EXPIRATION_JITTER_MAX_SECONDS=7"}, func(c *config.Config) string {
			up := c.EnvoyRLS.Upstream
			return want(fmt.Sprint(up.CacheKeyPrefix, " ", up.ExpirationJitter), "rl: 7s")
		}},
		{[]string{"REDIS_PERSECOND=true", "REDIS_PERSECOND_SOCKET_TYPE=unix", "REDIS_PERSECOND_URL=/run/ps.sock"}, func(c *config.Config) string {
			ps := c.EnvoyRLS.Upstream.PerSecond
			if ps == nil {
				return "no per-second Redis"
			}
			// Unset, its timeout is the main Redis's; the limit of unit
			// second in upstreamBase's file is decided there.
			return want(fmt.Sprint(ps.URL, " ", ps.Timeout, " ", c.EnvoyRLS.PerSecond("rls:d/k"), " ", c.EnvoyRLS.PerSecond(config.RLSOverridePolicy("SECOND")), " ", c.EnvoyRLS.PerSecond(config.RLSOverridePolicy("MINUTE"))),
				"unix:///run/ps.sock 50ms true true false")
		}},
		{[]string{"REDIS_PERSECOND=true", "REDIS_PERSECOND_TYPE=SENTINEL", "REDIS_PERSECOND_SOCKET_TYPE=tcp", "REDIS_PERSECOND_URL=m2,10.0.0.9:26379",
			"REDIS_PERSECOND_AUTH=u:p", "REDIS_PERSECOND_SENTINEL_AUTH=sp", "REDIS_PERSECOND_POOL_SIZE=77", "REDIS_PERSECOND_TIMEOUT=3s", "REDIS_PERSECOND_TLS=true",
			"REDIS_TLS=true", "REDIS_TLS_CACERT=" + caFile}, func(c *config.Config) string {
			ps := c.EnvoyRLS.Upstream.PerSecond
			if ps == nil {
				return "no per-second Redis"
			}
			return want(fmt.Sprint(ps.Sentinel.Master, ps.Sentinel.Addrs, " ", ps.Username, "/", ps.Password.Reveal(), " ", ps.Sentinel.Password.Reveal(), " ", ps.PoolSize, " ", ps.Timeout, " ", ps.URL, " ", ps.TLS.CAFile == caFile),
				"m2[10.0.0.9:26379] u/p sp 77 3s rediss://10.0.0.9:26379 true")
		}},
	}
	covered := map[string]bool{"RUNTIME_ROOT": true, "RUNTIME_SUBDIRECTORY": true, "REDIS_URL": true}
	for _, tc := range cases {
		t.Run(strings.Join(tc.vars, " "), func(t *testing.T) {
			env, _ := upstreamBase(t)
			c, err := config.FromUpstreamEnv(append(env, tc.vars...))
			if err != nil {
				t.Fatal(err)
			}
			if msg := tc.check(c); msg != "" {
				t.Error(msg)
			}
		})
		for _, v := range tc.vars {
			name, _, _ := strings.Cut(v, "=")
			covered[name] = true
		}
	}
	for _, u := range config.UpstreamVars {
		if u.Handling() == "honoured" && !covered[u.Name] {
			t.Errorf("%s is honoured but no case here sets it", u.Name)
		}
	}
}

func want[T comparable](got, want T) string {
	if got != want {
		return fmt.Sprintf("got %v; want %v", got, want)
	}
	return ""
}

func mapKeys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestFromUpstreamEnvPprofBad: SLUICE_PPROF that is no bool is refused by
// name.
func TestFromUpstreamEnvPprofBad(t *testing.T) {
	env, _ := upstreamBase(t)
	_, err := config.FromUpstreamEnv(append(env, "SLUICE_PPROF=maybe"))
	if err == nil || !strings.Contains(err.Error(), `SLUICE_PPROF="maybe"`) {
		t.Errorf("SLUICE_PPROF=maybe: err %v; want it refused by name", err)
	}
}

// TestFromUpstreamEnvRefused sets every refused variable to a value
// other than its default (refused, by name, with what to do instead) and
// to its default (accepted); every accepted one is noted when set.
func TestFromUpstreamEnvRefused(t *testing.T) {
	for _, u := range config.UpstreamVars {
		switch u.Handling() {
		case "refused":
			t.Run(u.Name, func(t *testing.T) {
				env, _ := upstreamBase(t)
				_, err := config.FromUpstreamEnv(append(env, u.Name+"="+otherValue(u)))
				if err == nil || !errors.Is(err, config.ErrUpstreamEnv) || !strings.Contains(err.Error(), u.Name+"=") || !strings.Contains(err.Error(), u.Refuse) {
					t.Errorf("%s=%s: err %v; want it refused by name, with %q", u.Name, otherValue(u), err, u.Refuse)
				}
				if u.Default != "" || u.Kind() == "bool" {
					def := u.Default
					if def == "" {
						def = "false"
					}
					if _, err := config.FromUpstreamEnv(append(env, u.Name+"="+def)); err != nil {
						t.Errorf("%s at its default %q: %v; want it accepted", u.Name, def, err)
					}
				}
			})
		case "accepted":
			t.Run(u.Name, func(t *testing.T) {
				env, _ := upstreamBase(t)
				c, err := config.FromUpstreamEnv(append(env, u.Name+"="+otherValue(u)))
				if err != nil {
					t.Fatal(err)
				}
				if !slices.ContainsFunc(c.EnvoyRLS.Upstream.Notes, func(n string) bool { return strings.HasPrefix(n, u.Name+"=") }) {
					t.Errorf("%s set: notes %q; want one naming it", u.Name, c.EnvoyRLS.Upstream.Notes)
				}
			})
		}
	}
}

// otherValue is a valid value of u's kind other than its default.
func otherValue(u config.UpstreamVar) string {
	switch u.Kind() {
	case "bool":
		if u.Default == "true" {
			return "false"
		}
		return "true"
	case "int":
		return "7"
	case "duration":
		return "7s"
	case "float":
		return "0.25"
	}
	return "something-else"
}

func TestFromUpstreamEnvInvalid(t *testing.T) {
	for _, tc := range []struct{ v, want string }{
		// USE_STATSD=true first: upstreamBase turns the stats off.
		{"PORT=http", "PORT=\"http\": want a whole number"},
		{"SLUICE_MAX_IN_FLIGHT_PER_DOMAIN=lots", "SLUICE_MAX_IN_FLIGHT_PER_DOMAIN=\"lots\": want a whole number (envoy_rls.max_in_flight_per_domain)"},
		{"SLUICE_DOMAIN_WAIT=soon", "SLUICE_DOMAIN_WAIT=\"soon\": want a duration"},
		{"SLUICE_DOMAIN_WAIT=2m", "SLUICE_DOMAIN_WAIT (envoy_rls.domain_wait): 2m0s: want how long a call may wait"},
		{"SLUICE_MAX_DESCRIPTORS=-3", "SLUICE_MAX_DESCRIPTORS (envoy_rls.max_descriptors): -3"},
		{"PORT=70000", "PORT=70000: want a port"},
		{"LOG_LEVEL=loud", "LOG_LEVEL=\"loud\""},
		{"REDIS_SOCKET_TYPE=udp", "REDIS_SOCKET_TYPE=\"udp\": want unix or tcp"},
		{"REDIS_TYPE=RING", "REDIS_TYPE=\"RING\""},
		{"REDIS_POOL_SIZE=0", "REDIS_POOL_SIZE=0: want 1 or more"},
		{"LOCAL_CACHE_SIZE_IN_BYTES=-1", "LOCAL_CACHE_SIZE_IN_BYTES=-1: want 0 (no cache of keys over their limit) or a number of bytes"},
		{"GRPC_UDS=/" + strings.Repeat("s", 120), "121 bytes, longer than the 107 a unix socket path may have"},
		{"REDIS_TIMEOUT=-1s", "REDIS_TIMEOUT"},
		{"BACKEND_TYPE=memcache", "BACKEND_TYPE=\"memcache\" is not offered"},
		{"RUNTIME_SUBDIRECTORY=", "RUNTIME_SUBDIRECTORY is empty"},
		{"REDIS_TLS_CACERT=/x.pem", "REDIS_TLS is not true"},
		{"GRPC_SERVER_TLS_CERT=/x.pem", "GRPC_SERVER_USE_TLS is not true"},
		{"LIMIT_RESPONSE_HEADERS_ENABLED=yes", "want true or false"},
		{"STATSD_PORT=0", "STATSD_PORT=0: want a port from 1 to 65535"},
		{"STATSD_PORT=statsd", "STATSD_PORT=\"statsd\": want a whole number"},
		{"STATSD_PROTOCOL=sctp", "STATSD_PROTOCOL=\"sctp\": want tcp or udp"},
		{"STATSD_HOST=", "STATSD_HOST is empty"},
		{"STATS_FLUSH_INTERVAL=0s", "STATS_FLUSH_INTERVAL=0s: want a positive duration"},
		{"STATS_FLUSH_INTERVAL=soon", "STATS_FLUSH_INTERVAL=\"soon\": want a duration"},
		{"EXTRA_TAGS=env", "EXTRA_TAGS=\"env\": \"env\" is no tag:value"},
		{"NEAR_LIMIT_RATIO=1.5", "NEAR_LIMIT_RATIO=1.5: want a number from 0 to 1"},
		{"NEAR_LIMIT_RATIO=most", "NEAR_LIMIT_RATIO=\"most\": want a number"},
		{"USE_STATSD=yes", "USE_STATSD=\"yes\": want true or false"},
		{"REDIS_STARTUP_INITIAL_INTERVAL=0s", "REDIS_STARTUP_INITIAL_INTERVAL=0s: want a positive duration"},
		{"REDIS_STARTUP_MAX_INTERVAL=10ms", "REDIS_STARTUP_MAX_INTERVAL=10ms is less than REDIS_STARTUP_INITIAL_INTERVAL=1s"},
		{"REDIS_STARTUP_MAX_ELAPSED_TIME=-1s", "REDIS_STARTUP_MAX_ELAPSED_TIME=-1s: want 0"},
		{"REDIS_STARTUP_MAX_INTERVAL=later", "REDIS_STARTUP_MAX_INTERVAL=\"later\": want a duration"},
		{"USE_DOG_STATSD=true", "USE_DOG_STATSD=true with USE_STATSD=true"},
		// Checked with TRACING_ENABLED unset too.
		{"TRACING_SAMPLING_RATE=abc", "TRACING_SAMPLING_RATE=\"abc\": want a number"},
		{"TRACING_SAMPLING_RATE=2", "TRACING_SAMPLING_RATE=\"2\": want a number from 0 (no trace sampled) to 1"},
		{"TRACING_SAMPLING_RATE=NaN", "TRACING_SAMPLING_RATE=\"NaN\": want a number from 0"},
		{"TRACING_EXPORTER_PROTOCOL=http/json", "TRACING_EXPORTER_PROTOCOL=\"http/json\": want http or grpc"},
		{"TRACING_ENABLED=on", "TRACING_ENABLED=\"on\": want true or false"},
	} {
		env, _ := upstreamBase(t)
		_, err := config.FromUpstreamEnv(append(env, "USE_STATSD=true", tc.v))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v; want one containing %q", tc.v, err, tc.want)
		}
	}
	// The mogrifiers, with USE_DOG_STATSD=true and USE_STATSD=false.
	for _, tc := range []struct {
		vars []string
		want string
	}{
		{[]string{"USE_DOG_STATSD_MOGRIFIERS=rl"}, "DOG_STATSD_MOGRIFIER_RL_PATTERN is not set"},
		{[]string{"USE_DOG_STATSD_MOGRIFIERS=rl", "DOG_STATSD_MOGRIFIER_RL_PATTERN=(", "DOG_STATSD_MOGRIFIER_RL_NAME=x"}, "DOG_STATSD_MOGRIFIER_RL_PATTERN=\"(\": not a regular expression"},
		{[]string{"USE_DOG_STATSD_MOGRIFIERS=rl", "DOG_STATSD_MOGRIFIER_RL_PATTERN=x"}, "DOG_STATSD_MOGRIFIER_RL_NAME is not set"},
		{[]string{"USE_DOG_STATSD_MOGRIFIERS=rl", "DOG_STATSD_MOGRIFIER_RL_PATTERN=x", "DOG_STATSD_MOGRIFIER_RL_NAME=y", "DOG_STATSD_MOGRIFIER_RL_TAGS=domain"}, "DOG_STATSD_MOGRIFIER_RL_TAGS=\"domain\": \"domain\" is no key:value"},
	} {
		env, _ := upstreamBase(t)
		_, err := config.FromUpstreamEnv(append(append(env, "USE_STATSD=false", "USE_DOG_STATSD=true"), tc.vars...))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v; want one containing %q", tc.vars, err, tc.want)
		}
	}
	// One stats sink at a time, as upstream's runner says.
	{
		env, _ := upstreamBase(t)
		_, err := config.FromUpstreamEnv(append(env, "USE_STATSD=false", "USE_DOG_STATSD=true", "USE_PROMETHEUS=true"))
		if err == nil || !strings.Contains(err.Error(), "USE_PROMETHEUS=true with USE_DOG_STATSD=true") {
			t.Errorf("DogStatsD and Prometheus: err %v; want both named", err)
		}
	}
	// Two problems are both reported.
	env, _ := upstreamBase(t)
	_, err := config.FromUpstreamEnv(append(env, "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION=true", "MEMCACHE_HOST_PORT=m:11211"))
	if err == nil || !strings.Contains(err.Error(), "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION") || !strings.Contains(err.Error(), "MEMCACHE_HOST_PORT") {
		t.Errorf("err %v; want both variables named", err)
	}
	// A variable upstream does not have is ignored.
	if _, err := config.FromUpstreamEnv(append(env, "NOT_A_RATELIMIT_VARIABLE=1", "PATH=/bin")); err != nil {
		t.Errorf("unknown variables: %v; want them ignored", err)
	}
}

// TestFromUpstreamEnvDirectory holds the reading of the runtime
// directory to envoyproxy/ratelimit's: every file, any name,
// subdirectories too, dotfiles per RUNTIME_IGNOREDOTFILES, two files of
// one domain an error, a link to a directory not followed.
func TestFromUpstreamEnvDirectory(t *testing.T) {
	env, root := upstreamBase(t)
	conf := filepath.Join(root, "rl", "config")
	file := func(rel, domain string) {
		t.Helper()
		p := filepath.Join(conf, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, p, "domain: "+domain+"\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1}\n")
	}
	file("top.yaml", "top")
	file("deep/er/file.json", "deeper")
	file(".hidden", "hidden")
	file(".dotdir/inside", "dotdir")
	domains := func(extra ...string) []string {
		t.Helper()
		c, err := config.FromUpstreamEnv(append(env, extra...))
		if err != nil {
			t.Fatal(err)
		}
		return mapKeys(c.EnvoyRLS.Domains())
	}
	if got := strings.Join(domains(), ","); got != "d,deeper,dotdir,hidden,top" {
		t.Errorf("domains %s; want d,deeper,dotdir,hidden,top (every file)", got)
	}
	if got := strings.Join(domains("RUNTIME_IGNOREDOTFILES=true"), ","); got != "d,deeper,top" {
		t.Errorf("with RUNTIME_IGNOREDOTFILES: domains %s; want d,deeper,top", got)
	}
	if err := os.Symlink(filepath.Join(conf, "deep"), filepath.Join(conf, "link")); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(domains(), ","); got != "d,deeper,dotdir,hidden,top" {
		t.Errorf("with a link to a directory: domains %s; want it not followed", got)
	}
	writeFile(t, filepath.Join(conf, "again"), "domain: top\ndescriptors:\n  - key: k2\n    rate_limit: {unit: minute, requests_per_unit: 1}\n")
	_, err := config.FromUpstreamEnv(env)
	if err == nil || !strings.Contains(err.Error(), `"top" is also the domain of`) {
		t.Errorf("two files of one domain: err %v; want it refused", err)
	}
	// MERGE_DOMAIN_CONFIG=true merges them, as there; a descriptor given
	// in both is still refused.
	c, err := config.FromUpstreamEnv(append(env, "MERGE_DOMAIN_CONFIG=true"))
	if err != nil {
		t.Fatalf("two files of one domain with MERGE_DOMAIN_CONFIG=true: %v", err)
	}
	if got := strings.Join(mapKeys(c.EnvoyRLS.Domains()["top"].Children), ","); got != "k,k2" {
		t.Errorf("merged domain top has descriptors %s; want k,k2", got)
	}
	file("again2", "top")
	if _, err := config.FromUpstreamEnv(append(env, "MERGE_DOMAIN_CONFIG=true")); err == nil || !strings.Contains(err.Error(), "given twice at this level") {
		t.Errorf("one descriptor in two merged files: err %v; want it refused", err)
	}
}

// TestUpstreamVarsDocumented: docs/envoy.md's table lists every variable
// of UpstreamVars, in its order, with what sluice does with it.
func TestUpstreamVarsDocumented(t *testing.T) {
	data, err := os.ReadFile("../docs/envoy.md")
	if err != nil {
		t.Fatal(err)
	}
	// A variable's row starts with its name in capitals (other tables of
	// the page name settings such as envoy_rls.max_entries).
	varRow := regexp.MustCompile("^\\| `[A-Z][A-Z0-9_]*` \\|")
	var rows []string
	for _, line := range strings.Split(string(data), "\n") {
		if varRow.MatchString(line) {
			rows = append(rows, line)
		}
	}
	if len(rows) != len(config.UpstreamVars) {
		t.Errorf("docs/envoy.md lists %d variables; the code knows %d", len(rows), len(config.UpstreamVars))
	}
	for i, u := range config.UpstreamVars {
		if i >= len(rows) {
			break
		}
		cells := strings.Split(rows[i], "|")
		def := cmp.Or(u.Default, "(empty)")
		if len(cells) != 5 || strings.TrimSpace(cells[1]) != "`"+u.Name+"`" || strings.TrimSpace(cells[2]) != "`"+def+"`" || strings.TrimSpace(cells[3]) != u.Handling()+": "+u.Note {
			t.Errorf("docs/envoy.md row %d: %s\nwant | `%s` | `%s` | %s: %s |", i+1, rows[i], u.Name, def, u.Handling(), u.Note)
		}
	}
}

// notInSettings are the variables of UpstreamVars that envoyproxy/ratelimit
// reads elsewhere than its settings.go.
var notInSettings = map[string]string{"STATSD_PROTOCOL": "read by its statsd client, lyft/gostats"}

// TestUpstreamVarsAreUpstreams: UpstreamVars are exactly the variables of
// envoyproxy/ratelimit's settings.go at the newest commit sluice follows
// (testdata/upstream-settings.tsv, taken from it), in its order and with
// its defaults, but for notInSettings: a variable upstream adds must be
// honoured or refused here (and so listed in docs/envoy.md, which
// TestUpstreamVarsDocumented checks), never silently ignored.
func TestUpstreamVarsAreUpstreams(t *testing.T) {
	data, err := os.ReadFile("testdata/upstream-settings.tsv")
	if err != nil {
		t.Fatal(err)
	}
	type setting struct{ name, def string }
	var settings []setting
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, def, ok := strings.Cut(line, "\t")
		if !ok {
			t.Fatalf("testdata/upstream-settings.tsv: %q is not NAME<TAB>default", line)
		}
		settings = append(settings, setting{name, def})
	}
	if len(settings) < 100 {
		t.Fatalf("testdata/upstream-settings.tsv holds %d variables; want upstream's 114", len(settings))
	}
	var ours []config.UpstreamVar
	byName := make(map[string]config.UpstreamVar)
	for _, u := range config.UpstreamVars {
		if byName[u.Name].Name != "" {
			t.Errorf("UpstreamVars lists %s twice", u.Name)
		}
		byName[u.Name] = u
		if notInSettings[u.Name] == "" {
			ours = append(ours, u)
		}
	}
	upstream := make(map[string]bool)
	for _, s := range settings {
		upstream[s.name] = true
		u, ok := byName[s.name]
		switch {
		case !ok:
			t.Errorf("upstream's %s (default %q) is not in config.UpstreamVars: honour or refuse it, and list it in docs/envoy.md", s.name, s.def)
		case u.Default != s.def:
			t.Errorf("%s: default %q in config.UpstreamVars; upstream's is %q", s.name, u.Default, s.def)
		}
	}
	for _, u := range ours {
		if !upstream[u.Name] {
			t.Errorf("config.UpstreamVars lists %s, which upstream's settings.go does not have", u.Name)
		}
	}
	if len(ours) == len(settings) {
		for i, u := range ours {
			if u.Name != settings[i].name {
				t.Errorf("config.UpstreamVars[%d] is %s where upstream's settings.go has %s: keep its order", i, u.Name, settings[i].name)
				break
			}
		}
	}
}

// FuzzFromUpstreamEnv: any value of any variable is taken or refused with
// a message that names the variable; none panics.
func FuzzFromUpstreamEnv(f *testing.F) {
	for i, u := range config.UpstreamVars {
		for _, v := range []string{"", "true", "x", "-1", "0", "99999999999999999999", "1h", "a,b", "unix", "tcp", "SENTINEL", "CLUSTER", "\x00", "::1", "0.0.0.0", u.Default} {
			f.Add(i, v)
		}
	}
	root := f.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "rl", "config"), 0o755); err != nil {
		f.Fatal(err)
	}
	base := []string{"RUNTIME_ROOT=" + root, "RUNTIME_SUBDIRECTORY=rl", "USE_STATSD=false", "REDIS_SOCKET_TYPE=tcp", "REDIS_URL=127.0.0.1:6390"}
	f.Fuzz(func(t *testing.T, i int, value string) {
		if i < 0 {
			i = -(i + 1)
		}
		u := config.UpstreamVars[i%len(config.UpstreamVars)]
		_, err := config.FromUpstreamEnv(append(slices.Clone(base), u.Name+"="+value))
		if err != nil && !strings.Contains(err.Error(), u.Name) {
			t.Errorf("%s=%q: %v; want the message to name %s", u.Name, value, err, u.Name)
		}
	})
}

// TestUpstreamPrometheus: USE_PROMETHEUS and the PROMETHEUS_ variables
// give Statsd.Prometheus, as envoyproxy/ratelimit reads them: upstream's
// defaults when unset, nothing with DISABLE_STATS, and USE_STATSD (true
// unless set false) beside it refused, as there.
func TestUpstreamPrometheus(t *testing.T) {
	env, _ := upstreamBase(t)
	c, err := config.FromUpstreamEnv(append(env, "USE_PROMETHEUS=true"))
	if err != nil {
		t.Fatal(err)
	}
	want := config.Prometheus{Addr: ":9090", Path: "/metrics"}
	if p := c.EnvoyRLS.Upstream.Statsd; p == nil || p.Prometheus == nil || *p.Prometheus != want || p.Addr != "" {
		t.Fatalf("USE_PROMETHEUS=true: Statsd %+v; want Prometheus %+v and no statsd", p, want)
	}
	c, err = config.FromUpstreamEnv(append(env, "USE_PROMETHEUS=true", "PROMETHEUS_ADDR=127.0.0.1:9102", "PROMETHEUS_PATH=/m",
		"PROMETHEUS_MAPPER_YAML=/etc/m.yaml", "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS=true", "EXTRA_TAGS=a:b", "STATS_FLUSH_INTERVAL=1s"))
	if err != nil {
		t.Fatal(err)
	}
	want = config.Prometheus{Addr: "127.0.0.1:9102", Path: "/m", MapperYAML: "/etc/m.yaml", ResponseTimeMillis: true}
	if p := c.EnvoyRLS.Upstream.Statsd; p == nil || p.Prometheus == nil || *p.Prometheus != want || p.Tags["a"] != "b" || p.FlushInterval != time.Second {
		t.Fatalf("Statsd %+v; want Prometheus %+v, the tags and the interval", p, want)
	}
	if c, err := config.FromUpstreamEnv(append(env, "USE_PROMETHEUS=true", "DISABLE_STATS=true")); err != nil || c.EnvoyRLS.Upstream.Statsd != nil {
		t.Errorf("DISABLE_STATS=true: %v, %+v; want no stats, as there", err, c)
	}
	for _, tc := range []struct{ v, want string }{
		{"USE_STATSD=true", "USE_STATSD=false"},
		{"PROMETHEUS_ADDR=9090", "PROMETHEUS_ADDR=\"9090\": want HOST:PORT"},
		{"PROMETHEUS_ADDR=:http", "PROMETHEUS_ADDR=\":http\": want a port"},
		{"PROMETHEUS_PATH=metrics", "PROMETHEUS_PATH=\"metrics\": want a path"},
		{"PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS=yes", "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS"},
	} {
		_, err := config.FromUpstreamEnv(append(env, "USE_PROMETHEUS=true", tc.v))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("USE_PROMETHEUS=true %s: err %v; want one containing %q", tc.v, err, tc.want)
		}
	}
}
