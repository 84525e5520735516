package config

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Upstream is what `sluice ratelimit` keeps of envoyproxy/ratelimit's
// environment beside the configuration it builds (FromUpstreamEnv).
type Upstream struct {
	// IgnoreDotFiles: RUNTIME_IGNOREDOTFILES, skip names starting with a
	// dot in the configuration directory.
	IgnoreDotFiles bool
	// ShadowMode: SHADOW_MODE, the overall code of a call is OK even when
	// a descriptor is over its limit (the statuses say so).
	ShadowMode bool
	// HTTPListen is HOST:PORT, where /healthcheck and /json are served;
	// DebugListen is DEBUG_HOST:DEBUG_PORT, with /rlconfig and /metrics.
	HTTPListen, DebugListen string
	// LogLevel (debug, info, warn, error) and LogFormat (text, json).
	LogLevel, LogFormat string
	// PerSecond, from REDIS_PERSECOND=true and the REDIS_PERSECOND_
	// variables, is the Redis that holds the counters of the limits whose
	// unit is SECOND (EnvoyRLS.PerSecond names their policies); nil: every
	// counter is in the Redis of store.redis.
	PerSecond *Redis
	// MergeDomains: MERGE_DOMAIN_CONFIG, several files of one domain add
	// their descriptors to it (a descriptor given twice is still an
	// error); otherwise a second file of a domain is refused.
	MergeDomains bool
	// QuotaMode: QUOTA_MODE, every descriptor of a call is in quota mode
	// (the call is refused only when all of them are over their limits).
	QuotaMode bool
	// StopIncrementWhenOver: STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT, a
	// call that a descriptor refuses counts no hit on the descriptors that
	// would have passed it.
	StopIncrementWhenOver bool
	// Statsd, from USE_STATSD (true unless set false) and the STATSD_
	// variables, or USE_PROMETHEUS and the PROMETHEUS_ variables, is where
	// envoyproxy/ratelimit's stats go; nil with neither or with
	// DISABLE_STATS=true.
	Statsd *Statsd
	// HealthyWithConfig: HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED, health
	// (gRPC and /healthcheck) fails while no descriptor file is loaded.
	HealthyWithConfig bool
	// LocalCacheBytes: LOCAL_CACHE_SIZE_IN_BYTES, what the cache of keys
	// over their limit may hold (resilient's denial cache, bounded in
	// bytes), at least MinLocalCacheBytes; 0: no such cache.
	LocalCacheBytes int64
	// GRPCUnixSocket: GRPC_UDS, the unix socket path gRPC is served on
	// instead of EnvoyRLS.Listen; empty: TCP.
	GRPCUnixSocket string
	// CacheKeyPrefix: CACHE_KEY_PREFIX, which starts the Redis key of every
	// counter; ExpirationJitter: EXPIRATION_JITTER_MAX_SECONDS, the most
	// added at random to a counter's expiry.
	CacheKeyPrefix   string
	ExpirationJitter time.Duration
	// RedisStartup, from the REDIS_STARTUP_ variables when any is set, is
	// how long to wait for Redis at start before serving, as upstream
	// waits; nil: sluice serves at once and Redis's errors are answered
	// as they come until it answers.
	RedisStartup *RedisStartup
	// Tracing, from TRACING_ENABLED=true and the other TRACING_ variables,
	// is how spans are exported over OTLP, as envoyproxy/ratelimit
	// exports them; nil: no tracing, whatever the OTEL_ variables say.
	Tracing *Tracing
	// Notes are the variables set that sluice accepts without their
	// having an effect on answers, with why, to log at start.
	Notes []string
}

// Statsd is where and how `sluice ratelimit` sends envoyproxy/ratelimit's
// statsd stats (internal/rlsstats): to a statsd, or, when Prometheus is
// set, to a Prometheus exposition of its own.
type Statsd struct {
	Addr     string // STATSD_HOST:STATSD_PORT; empty with Prometheus
	Protocol string // STATSD_PROTOCOL: tcp or udp
	// Prometheus, from USE_PROMETHEUS=true, serves the stats for
	// Prometheus instead of sending them to a statsd.
	Prometheus *Prometheus
	// FlushInterval: STATS_FLUSH_INTERVAL, how often the counts go.
	FlushInterval time.Duration
	// Tags: EXTRA_TAGS, added to every stat.
	Tags map[string]string
	// NearLimitRatio: NEAR_LIMIT_RATIO, the share of a limit past which
	// hits count as near_limit.
	NearLimitRatio float64
	// Dog: USE_DOG_STATSD, the stats go as DogStatsD (over UDP, the tags
	// as tags, not in the names), renamed by Mogrifiers.
	Dog        bool
	Mogrifiers []Mogrifier
}

// Mogrifier is one of USE_DOG_STATSD_MOGRIFIERS: a stat whose name
// Pattern matches (the first mogrifier that does) is sent as Name with
// Tags, where $0, $1, … stand for the match and its groups.
type Mogrifier struct {
	Pattern *regexp.Regexp
	Name    string
	Tags    [][2]string // key, value
}

// Mogrify returns the name and the tags (key:value) of a stat named name.
func Mogrify(ms []Mogrifier, name string) (string, []string) {
	for _, m := range ms {
		match := m.Pattern.FindStringSubmatch(name)
		if match == nil {
			continue
		}
		tags := make([]string, 0, len(m.Tags))
		for _, t := range m.Tags {
			tags = append(tags, t[0]+":"+expandMatch(t[1], match))
		}
		return expandMatch(m.Name, match), tags
	}
	return name, nil
}

var matchRef = regexp.MustCompile(`\$\d+`)

// expandMatch replaces $N in pattern by match[N]; one beyond the groups
// stays as written.
func expandMatch(pattern string, match []string) string {
	return matchRef.ReplaceAllStringFunc(pattern, func(ref string) string {
		if i, err := strconv.Atoi(ref[1:]); err == nil && i < len(match) {
			return match[i]
		}
		return ref
	})
}

// Tracing is how `sluice ratelimit` exports its spans, as
// envoyproxy/ratelimit does with TRACING_ENABLED=true: over OTLP to the
// endpoint of the standard OTEL_EXPORTER_OTLP_ variables (the exporter
// reads those itself), sampled by a parent-based ratio sampler.
type Tracing struct {
	// Protocol: TRACING_EXPORTER_PROTOCOL, "http" (OTLP/HTTP, protobuf)
	// or "grpc".
	Protocol string
	// ServiceName, ServiceNamespace and ServiceInstanceID are the
	// resource's service.name, service.namespace (none when empty) and
	// service.instance.id (a random UUID when empty, as there), from
	// TRACING_SERVICE_NAME, _NAMESPACE and _INSTANCE_ID.
	ServiceName, ServiceNamespace, ServiceInstanceID string
	// SamplingRate: TRACING_SAMPLING_RATE, the share of the traces not
	// begun by the caller that are sampled, from 0 to 1; a caller's
	// sampled traceparent is followed whatever it is.
	SamplingRate float64
}

// Prometheus is how envoyproxy/ratelimit's stats are served for
// Prometheus (USE_PROMETHEUS): through prometheus/statsd_exporter's
// mapping of their statsd names, as there.
type Prometheus struct {
	Addr string // PROMETHEUS_ADDR, the listener's address
	Path string // PROMETHEUS_PATH, where the metrics are served
	// MapperYAML: PROMETHEUS_MAPPER_YAML, a statsd_exporter mapping file
	// that replaces the default mapping; empty: the default.
	MapperYAML string
	// ResponseTimeMillis: PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS, the
	// default mapping does not scale the response time to seconds.
	ResponseTimeMillis bool
}

// RedisStartup is how `sluice ratelimit` waits at start for its Redis
// (REDIS_URL's, and the per-second one) to answer a PING before it opens
// its listeners, as envoyproxy/ratelimit does: the waits between tries
// start at Initial and double up to Max, each less a random share of up
// to half; past MaxElapsed (0: never) it gives up and exits.
type RedisStartup struct {
	Initial, Max, MaxElapsed time.Duration
}

// UpstreamVar is one of envoyproxy/ratelimit's environment variables
// (its src/settings/settings.go) and what sluice does with it.
type UpstreamVar struct {
	Name    string
	Default string // upstream's default, as written there
	kind    byte   // 'b' bool, 'i' int, 'd' duration, 'f' float, 's' string
	// Refuse, when set, is why a value other than Default is refused at
	// start and what to use instead; empty: the variable is honoured (or
	// accepted, see Note).
	Refuse string
	// Note is what sluice does with the variable, for docs/envoy.md; an
	// accepted variable's note is logged when it is set.
	Note     string
	accepted bool // set to anything, it changes nothing sluice answers
}

// Kind names what the variable holds: bool, int, duration, float or string.
func (u UpstreamVar) Kind() string {
	return map[byte]string{'b': "bool", 'i': "int", 'd': "duration", 'f': "float", 's': "string"}[u.kind]
}

// Handling is honoured, accepted or refused (a value other than the default).
func (u UpstreamVar) Handling() string {
	switch {
	case u.Refuse != "":
		return "refused"
	case u.accepted:
		return "accepted"
	}
	return "honoured"
}

func honour(name, def string, kind byte, note string) UpstreamVar {
	return UpstreamVar{Name: name, Default: def, kind: kind, Note: note}
}

func accept(name, def string, kind byte, note string) UpstreamVar {
	return UpstreamVar{Name: name, Default: def, kind: kind, Note: note, accepted: true}
}

func refuse(name, def string, kind byte, instead string) UpstreamVar {
	return UpstreamVar{Name: name, Default: def, kind: kind, Refuse: instead, Note: instead}
}

const (
	noXDS              = "sluice reads the descriptor files only (CONFIG_TYPE=FILE): mount them under RUNTIME_ROOT and unset it"
	noMemcash          = "sluice keeps its counters in Redis only: set BACKEND_TYPE=redis and the REDIS_ variables"
	noPipelineParallel = "sluice sends a cluster's commands to each node in parallel itself, batching concurrent checks (store.redis.coalesce)"
)

// UpstreamVars are every environment variable of envoyproxy/ratelimit
// (src/settings/settings.go of the newest version internal/testkit/envoytest
// holds sluice against, envoytest.Main; testdata/upstream-settings.tsv),
// in its order, and STATSD_PROTOCOL, which its statsd client reads.
var UpstreamVars = []UpstreamVar{
	honour("HOST", "0.0.0.0", 's', "address of the HTTP listener (/healthcheck, /json)"),
	honour("PORT", "8080", 'i', "port of the HTTP listener"),
	honour("DEBUG_HOST", "0.0.0.0", 's', "address of the debug listener (/rlconfig, /metrics, /healthz, /readyz)"),
	honour("DEBUG_PORT", "6070", 'i', "port of the debug listener"),
	honour("GRPC_UDS", "", 's', "a unix socket path: gRPC is served there instead of GRPC_HOST:GRPC_PORT, as there (mode from the umask, as there); a stale socket file is replaced, anything else at the path is an error"),
	honour("GRPC_HOST", "0.0.0.0", 's', "address of the gRPC listener (rate limit and health services)"),
	honour("GRPC_PORT", "8081", 'i', "port of the gRPC listener"),
	refuse("GRPC_MAX_CONNECTION_AGE", "24h", 'd', "sluice keeps a connection while it is used and closes it after 2m idle: unset it"),
	refuse("GRPC_MAX_CONNECTION_AGE_GRACE", "1h", 'd', "sluice keeps a connection while it is used and closes it after 2m idle: unset it"),
	honour("GRPC_SERVER_USE_TLS", "false", 'b', "serves gRPC over TLS with GRPC_SERVER_TLS_CERT and _KEY"),
	honour("GRPC_SERVER_TLS_CERT", "", 's', "the gRPC listener's PEM certificate"),
	honour("GRPC_SERVER_TLS_KEY", "", 's', "its PEM key"),
	honour("GRPC_CLIENT_TLS_CACERT", "", 's', "mutual TLS: clients must present a certificate signed by this PEM CA"),
	refuse("GRPC_CLIENT_TLS_SAN", "", 's', "sluice checks that a client's certificate is signed by GRPC_CLIENT_TLS_CACERT, not its SAN: unset it"),
	honour("LOG_LEVEL", "WARN", 's', "trace and debug log as debug, info, warn (warning), error; fatal and panic as error"),
	honour("LOG_FORMAT", "text", 's', "json, else text"),
	refuse("CONFIG_TYPE", "FILE", 's', noXDS),
	accept("FORCE_START_WITHOUT_INITIAL_CONFIG", "false", 'b', "sluice starts with an empty configuration directory either way (xDS only there)"),
	refuse("CONFIG_GRPC_XDS_NODE_ID", "default", 's', noXDS),
	refuse("CONFIG_GRPC_XDS_NODE_METADATA", "", 's', noXDS),
	refuse("CONFIG_GRPC_XDS_SERVER_URL", "localhost:18000", 's', noXDS),
	refuse("CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "3s", 'd', noXDS),
	refuse("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "", 's', noXDS),
	refuse("CONFIG_GRPC_XDS_SERVER_USE_TLS", "false", 'b', noXDS),
	refuse("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "", 's', noXDS),
	refuse("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "", 's', noXDS),
	refuse("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "", 's', noXDS),
	refuse("CONFIG_GRPC_XDS_SERVER_TLS_SAN", "", 's', noXDS),
	refuse("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "10s", 'd', noXDS),
	refuse("XDS_CLIENT_BACKOFF_MAX_INTERVAL", "60s", 'd', noXDS),
	refuse("XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "0.5", 'f', noXDS),
	refuse("XDS_CLIENT_BACKOFF_JITTER", "true", 'b', noXDS),
	refuse("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "", 's', noXDS),
	honour("USE_DOG_STATSD", "false", 'b', "true (with USE_STATSD=false, as there): the stats go as DogStatsD over UDP to STATSD_HOST:STATSD_PORT, EXTRA_TAGS as tags"),
	honour("USE_DOG_STATSD_MOGRIFIERS", "", 's', "names of mogrifiers, comma-separated, each read from DOG_STATSD_MOGRIFIER_<name>_PATTERN, _NAME and _TAGS, as there: the first whose pattern matches a stat's name renames it and adds tags"),
	honour("USE_STATSD", "true", 'b', "true: envoyproxy/ratelimit's statsd counters, its names (ratelimit.service.…), to STATSD_HOST:STATSD_PORT, as there; no statsd listening costs nothing"),
	honour("STATSD_HOST", "localhost", 's', "the statsd's host"),
	honour("STATSD_PORT", "8125", 'i', "the statsd's port"),
	// Read by envoyproxy/ratelimit's statsd client (lyft/gostats), not
	// its settings.go.
	honour("STATSD_PROTOCOL", "tcp", 's', "tcp or udp, as there (its statsd client's variable)"),
	honour("EXTRA_TAGS", "", 's', "tag:value,… added to every stat's name as .__tag=value, as there"),
	honour("STATS_FLUSH_INTERVAL", "10s", 'd', "how often the counts are sent"),
	honour("DISABLE_STATS", "false", 'b', "true: no statsd (USE_STATSD) and no USE_PROMETHEUS listener, as there; sluice's Prometheus metrics at http://DEBUG_HOST:DEBUG_PORT/metrics are on either way"),
	honour("USE_PROMETHEUS", "false", 'b', "true (with USE_STATSD=false, as there): envoyproxy/ratelimit's stats, through its default mapping (ratelimit_service_…), for Prometheus at http://PROMETHEUS_ADDR/PROMETHEUS_PATH, as there; sluice's own metrics stay at http://DEBUG_HOST:DEBUG_PORT/metrics"),
	honour("PROMETHEUS_ADDR", ":9090", 's', "the Prometheus listener's address (a port taken fails the start, where upstream serves no metrics)"),
	honour("PROMETHEUS_PATH", "/metrics", 's', "the path of the metrics there (only it: no /debug/pprof or /debug/vars there, which upstream's listener also serves)"),
	honour("PROMETHEUS_MAPPER_YAML", "", 's', "a statsd_exporter mapping file that replaces the default mapping, as there; one that does not load fails the start (upstream serves unmapped names then)"),
	honour("PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS", "false", 'b', "true: ratelimit_service_response_time_seconds observes milliseconds, as there (the default mapping only)"),
	honour("RUNTIME_ROOT", "/srv/runtime_data/current", 's', "the descriptor files are RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY, every file, subdirectories too"),
	honour("RUNTIME_SUBDIRECTORY", "", 's', "see RUNTIME_ROOT (empty with RUNTIME_WATCH_ROOT=true loads nothing there: refused)"),
	honour("RUNTIME_APPDIRECTORY", "config", 's', "see RUNTIME_ROOT"),
	honour("RUNTIME_IGNOREDOTFILES", "false", 'b', "skip files and directories whose names start with a dot"),
	honour("RUNTIME_WATCH_ROOT", "true", 'b', "sluice watches the directory, every directory below and the symlinks above it either way; a change applies within 2s"),
	honour("EXPIRATION_JITTER_MAX_SECONDS", "300", 'i', "up to this many seconds, at random, added to a counter's expiry, as there"),
	honour("LOCAL_CACHE_SIZE_IN_BYTES", "0", 'i', "0: off, as there; else a cache of the keys over their limit, answered over limit without Redis until their window ends, bounded to that many bytes in all (at least 512 KiB, as there; half of it for each Redis with REDIS_PERSECOND=true), each key costing 200 bytes and its length"),
	honour("NEAR_LIMIT_RATIO", "0.8", 'f', "the share of a limit past which hits count in the near_limit stat; no effect on answers"),
	honour("CACHE_KEY_PREFIX", "", 's', "starts the name of every counter, as there: sluice's counters are envoyproxy/ratelimit's, so the two can share one Redis"),
	honour("BACKEND_TYPE", "redis", 's', "redis; memcache is refused"),
	honour("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "false", 'b', "true: as there, the counts are read first, and when a descriptor of a call would go over its limit only those over count the hits, the call takes nothing of the limits it passes (fixed-window limits; a sluice algorithm counts no refused hit anyway)"),
	honour("LIMIT_RESPONSE_HEADERS_ENABLED", "false", 'b', "true: the limit, what remains and the seconds until reset in response_headers_to_add, named by LIMIT_*_HEADER (envoy_rls.response_headers: envoyproxy); false: no headers (none)"),
	honour("LIMIT_LIMIT_HEADER", "RateLimit-Limit", 's', "the name of the limit header"),
	honour("LIMIT_REMAINING_HEADER", "RateLimit-Remaining", 's', "the name of the remaining header"),
	honour("LIMIT_RESET_HEADER", "RateLimit-Reset", 's', "the name of the reset header"),
	honour("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", "false", 'b', "true: gRPC health for ratelimit and /healthcheck fail while no descriptor file is loaded (sluice starts on an empty directory either way; a file that does not load stops it at start)"),
	honour("REDIS_SOCKET_TYPE", "unix", 's', "unix (REDIS_URL is a socket path) or tcp (HOST:PORT)"),
	honour("REDIS_TYPE", "SINGLE", 's', "SINGLE, SENTINEL (REDIS_URL: master,sentinel1:port,…) or CLUSTER (REDIS_URL: node1:port,…)"),
	honour("REDIS_URL", "/var/run/nutcracker/ratelimit.sock", 's', "the Redis, as REDIS_SOCKET_TYPE and REDIS_TYPE say"),
	honour("REDIS_POOL_SIZE", "10", 'i', "connections per Redis node, at least sluice's own 40 (its 32 calls in flight and its probes)"),
	honour("REDIS_AUTH", "", 's', "password, or user:password"),
	honour("REDIS_TLS", "false", 'b', "TLS to Redis"),
	honour("REDIS_TLS_CLIENT_CERT", "", 's', "client certificate (PEM) for TLS to Redis"),
	honour("REDIS_TLS_CLIENT_KEY", "", 's', "its key"),
	honour("REDIS_TLS_CACERT", "", 's', "the CA (PEM) that signed Redis's certificate"),
	refuse("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "false", 'b', "sluice always verifies Redis's certificate: give its CA in REDIS_TLS_CACERT and unset it"),
	accept("REDIS_PIPELINE_WINDOW", "0", 'd', "sluice batches concurrent checks to Redis itself (store.redis.coalesce)"),
	accept("REDIS_PIPELINE_LIMIT", "0", 'i', "sluice batches concurrent checks to Redis itself (store.redis.coalesce)"),
	accept("REDIS_CLUSTER_PIPELINE_PARALLELISM", "1", 'i', noPipelineParallel),
	honour("REDIS_PERSECOND", "false", 'b', "true: the counters of the limits whose unit is second (a request's own limit override of unit SECOND too) live in the Redis of the REDIS_PERSECOND_ variables, the others in REDIS_URL's, as there"),
	honour("REDIS_PERSECOND_SOCKET_TYPE", "unix", 's', "the per-second Redis (REDIS_PERSECOND=true): unix or tcp, as REDIS_SOCKET_TYPE"),
	honour("REDIS_PERSECOND_TYPE", "SINGLE", 's', "the per-second Redis (REDIS_PERSECOND=true): SINGLE, SENTINEL or CLUSTER, as REDIS_TYPE"),
	honour("REDIS_PERSECOND_URL", "/var/run/nutcracker/ratelimitpersecond.sock", 's', "the per-second Redis (REDIS_PERSECOND=true): as REDIS_URL"),
	honour("REDIS_PERSECOND_POOL_SIZE", "10", 'i', "the per-second Redis (REDIS_PERSECOND=true): as REDIS_POOL_SIZE"),
	honour("REDIS_PERSECOND_AUTH", "", 's', "the per-second Redis (REDIS_PERSECOND=true): as REDIS_AUTH"),
	honour("REDIS_PERSECOND_TLS", "false", 'b', "the per-second Redis (REDIS_PERSECOND=true): as REDIS_TLS, with the REDIS_TLS_ files"),
	honour("REDIS_SENTINEL_AUTH", "", 's', "password, or user:password, of the sentinels (REDIS_TYPE=SENTINEL); REDIS_AUTH is the master's"),
	honour("REDIS_PERSECOND_SENTINEL_AUTH", "", 's', "the per-second Redis (REDIS_PERSECOND=true): as REDIS_SENTINEL_AUTH"),
	accept("REDIS_PERSECOND_PIPELINE_WINDOW", "0", 'd', "sluice batches concurrent checks to Redis itself (store.redis.coalesce)"),
	accept("REDIS_PERSECOND_PIPELINE_LIMIT", "0", 'i', "sluice batches concurrent checks to Redis itself (store.redis.coalesce)"),
	accept("REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM", "1", 'i', noPipelineParallel),
	refuse("REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", "false", 'b', "sluice answers by its failure policy (open, closed, local) when Redis fails, and /readyz on the debug port reports the store: unset it"),
	honour("REDIS_TIMEOUT", "10s", 'd', "bounds a Redis call (sluice's 50ms when unset)"),
	honour("REDIS_PERSECOND_TIMEOUT", "10s", 'd', "the per-second Redis (REDIS_PERSECOND=true): as REDIS_TIMEOUT"),
	accept("REDIS_POOL_ON_EMPTY_BEHAVIOR", "WAIT", 's', "sluice's pool waits for a connection, as WAIT does"),
	accept("REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR", "WAIT", 's', "sluice's pool waits for a connection, as WAIT does"),
	honour("REDIS_STARTUP_INITIAL_INTERVAL", "1s", 'd', "any REDIS_STARTUP_ set: as there, the listeners open only once every Redis (REDIS_URL's, the per-second one) answers a PING, retried after this wait, doubled each try up to REDIS_STARTUP_MAX_INTERVAL (each less a random share of up to half); none set: sluice serves at once and answers Redis's errors (redis_error) until it answers"),
	honour("REDIS_STARTUP_MAX_INTERVAL", "30s", 'd', "the longest wait between two tries at start (see REDIS_STARTUP_INITIAL_INTERVAL)"),
	honour("REDIS_STARTUP_MAX_ELAPSED_TIME", "0", 'd', "0: wait for Redis at start as long as it takes; else exit 1 past this long, naming the Redis (see REDIS_STARTUP_INITIAL_INTERVAL)"),
	refuse("MEMCACHE_HOST_PORT", "", 's', noMemcash),
	refuse("MEMCACHE_MAX_IDLE_CONNS", "2", 'i', noMemcash),
	refuse("MEMCACHE_SRV", "", 's', noMemcash),
	refuse("MEMCACHE_SRV_REFRESH", "0", 'd', noMemcash),
	refuse("MEMCACHE_TLS", "false", 'b', noMemcash),
	refuse("MEMCACHE_TLS_CLIENT_CERT", "", 's', noMemcash),
	refuse("MEMCACHE_TLS_CLIENT_KEY", "", 's', noMemcash),
	refuse("MEMCACHE_TLS_CACERT", "", 's', noMemcash),
	refuse("MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION", "false", 'b', noMemcash),
	honour("SHADOW_MODE", "false", 'b', "overall_code OK even when a descriptor is over its limit (its status says OVER_LIMIT)"),
	honour("QUOTA_MODE", "false", 'b', "true: every descriptor of a call is in quota mode, as there: the call is OVER_LIMIT only when every descriptor that is not unlimited is (one without a limit never is)"),
	honour("RESPONSE_DYNAMIC_METADATA", "false", 'b', "true: dynamic_metadata with the domain, the descriptors, hitsAddend and the metadata: of the limits that passed (envoy_rls.response_dynamic_metadata)"),
	honour("MERGE_DOMAIN_CONFIG", "false", 'b', "true: several files of one domain add their descriptors to it, as there (a descriptor given twice at one level is still refused); false: a second file of a domain is refused"),
	honour("TRACING_ENABLED", "false", 'b', "true: spans go over OTLP to the endpoint of the OTEL_EXPORTER_OTLP_ variables, as there (docs/envoy.md, \"Tracing\"); false: none, whatever the OTEL_ variables say"),
	honour("TRACING_SERVICE_NAME", "RateLimit", 's', "the spans' service.name (over OTEL_SERVICE_NAME, as there)"),
	honour("TRACING_SERVICE_NAMESPACE", "", 's', "their service.namespace; empty: none"),
	honour("TRACING_SERVICE_INSTANCE_ID", "", 's', "their service.instance.id; empty: a random UUID at each start, as there"),
	honour("TRACING_EXPORTER_PROTOCOL", "http", 's', "http (OTLP/HTTP, protobuf) or grpc (over OTEL_EXPORTER_OTLP_PROTOCOL, as there)"),
	honour("TRACING_SAMPLING_RATE", "1", 'f', "from 0 to 1: the share of traces sampled, parent-based as there (a caller's sampled traceparent is followed)"),
}

// MinLocalCacheBytes is the least LOCAL_CACHE_SIZE_IN_BYTES gives, as
// envoyproxy/ratelimit's cache (freecache) makes a smaller size this one.
const MinLocalCacheBytes = 512 << 10

// MaxUnixSocketPath is the longest path a unix socket may be bound to
// (GRPC_UDS): Linux's sun_path less its NUL.
const MaxUnixSocketPath = 107

// PprofVar is sluice's own variable for `sluice ratelimit`: true serves
// /debug/pprof/ on DEBUG_HOST:DEBUG_PORT to loopback peers (admin.pprof).
const PprofVar = "SLUICE_PPROF"

// rlsBoundVars are sluice's own variables for `sluice ratelimit`, one for
// each bound of the envoy_rls section that envoyproxy/ratelimit has no
// variable for: a drop-in deployment sets them in its environment, as
// sluice.yaml's envoy_rls section does (docs/envoy.md, "Bounds of the
// listener"). Unset, each keeps the section's default.
var rlsBoundVars = []struct{ Name, Field string }{
	{"SLUICE_MAX_STREAMS_PER_CONNECTION", "max_streams_per_connection"},
	{"SLUICE_MAX_STREAMS_PER_IP", "max_streams_per_ip"},
	{"SLUICE_FIRST_MESSAGE_TIMEOUT", "first_message_timeout"},
	{"SLUICE_MAX_IN_FLIGHT_PER_DOMAIN", "max_in_flight_per_domain"},
	{"SLUICE_DOMAIN_WAIT", "domain_wait"},
	{"SLUICE_BUSY_DOMAIN_REST", "busy_domain_rest"},
	{"SLUICE_MAX_DESCRIPTORS", "max_descriptors"},
	{"SLUICE_MAX_ENTRIES", "max_entries"},
}

// rlsBounds sets the envoy_rls bounds of rlsBoundVars that env sets.
func rlsBounds(e *EnvoyRLS, env map[string]string, bad func(string, ...any)) {
	ints := map[string]*int{"max_streams_per_connection": &e.MaxStreamsPerConnection, "max_streams_per_ip": &e.MaxStreamsPerIP,
		"max_in_flight_per_domain": &e.MaxInFlightPerDomain, "busy_domain_rest": &e.BusyDomainRest,
		"max_descriptors": &e.MaxDescriptors, "max_entries": &e.MaxEntries}
	durations := map[string]*time.Duration{"first_message_timeout": &e.FirstMessageTimeout, "domain_wait": &e.DomainWait}
	for _, b := range rlsBoundVars {
		raw, set := env[b.Name]
		if !set {
			continue
		}
		if p, ok := ints[b.Field]; ok {
			n, err := strconv.Atoi(strings.TrimSpace(raw))
			if err != nil {
				bad("%s=%q: want a whole number (envoy_rls.%s)", b.Name, raw, b.Field)
				continue
			}
			*p = n
			continue
		}
		d, err := time.ParseDuration(strings.TrimSpace(raw))
		if err != nil {
			bad("%s=%q: want a duration such as 100ms or 2s (envoy_rls.%s)", b.Name, raw, b.Field)
			continue
		}
		*durations[b.Field] = d
	}
}

// ErrUpstreamEnv is wrapped by FromUpstreamEnv's errors.
var ErrUpstreamEnv = errors.New("envoyproxy/ratelimit environment")

// FromUpstreamEnv builds the configuration of `sluice ratelimit` from
// envoyproxy/ratelimit's environment variables alone (environ is
// os.Environ's form, KEY=value): the gRPC rate limit service on
// GRPC_HOST:GRPC_PORT, the descriptor files under RUNTIME_ROOT read as
// envoyproxy/ratelimit reads them, counters in the Redis of REDIS_URL, and
// the HTTP and debug listeners of HOST:PORT and DEBUG_HOST:DEBUG_PORT.
// Every variable of UpstreamVars is honoured or, when it asks for what
// sluice does not do, refused: the error names every such variable and
// says what to use instead. Variables envoyproxy/ratelimit does not read
// are ignored.
func FromUpstreamEnv(environ []string) (*Config, error) {
	env := make(map[string]string)
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	vals := make(map[string]any, len(UpstreamVars))
	up := &Upstream{}
	for _, u := range UpstreamVars {
		raw, set := env[u.Name]
		def, _ := parseVar(u.kind, u.Default)
		val := def
		if set {
			v, err := parseVar(u.kind, raw)
			if err != nil {
				bad("%s=%q: %v", u.Name, raw, err)
				continue
			}
			val = v
		}
		vals[u.Name] = val
		switch {
		case !set:
		case u.Refuse != "" && val != def:
			bad("%s=%q is not offered: %s", u.Name, raw, u.Refuse)
		case u.accepted:
			up.Notes = append(up.Notes, fmt.Sprintf("%s=%s: accepted, no effect on answers: %s", u.Name, raw, u.Note))
		}
	}
	str := func(name string) string { s, _ := vals[name].(string); return s }
	boolean := func(name string) bool { b, _ := vals[name].(bool); return b }
	num := func(name string) int64 { n, _ := vals[name].(int64); return n }

	c := &Config{File: "the environment (envoyproxy/ratelimit's variables)"}
	c.policiesSet = true
	c.Store.Type = "redis"
	c.DecisionAPI.Listen = DecisionListenOff
	c.Headers = "none"
	port := func(name string) string {
		n := num(name)
		if n < 0 || n > 65535 {
			bad("%s=%d: want a port from 0 to 65535", name, n)
		}
		return strconv.FormatInt(n, 10)
	}
	up.HTTPListen = net.JoinHostPort(str("HOST"), port("PORT"))
	up.DebugListen = net.JoinHostPort(str("DEBUG_HOST"), port("DEBUG_PORT"))
	c.Listen, c.AdminListen = up.HTTPListen, up.DebugListen
	// SLUICE_PPROF, sluice's own: envoyproxy/ratelimit serves /debug/pprof
	// on its debug port to anyone; sluice serves it only when asked, and
	// then to loopback peers alone (admin.pprof).
	if raw, set := env[PprofVar]; set {
		if b, err := strconv.ParseBool(raw); err != nil {
			bad("%s=%q: want true or false", PprofVar, raw)
		} else {
			c.Admin.Pprof = b
		}
	}
	c.EnvoyRLS.Listen = net.JoinHostPort(str("GRPC_HOST"), port("GRPC_PORT"))
	c.EnvoyRLS.Upstream = up
	rlsBounds(&c.EnvoyRLS, env, bad)
	switch n := num("LOCAL_CACHE_SIZE_IN_BYTES"); {
	case n < 0:
		bad("LOCAL_CACHE_SIZE_IN_BYTES=%d: want 0 (no cache of keys over their limit) or a number of bytes", n)
	case n > 0:
		up.LocalCacheBytes = max(n, MinLocalCacheBytes)
	}
	if uds := str("GRPC_UDS"); uds != "" {
		// sun_path holds 108 bytes on Linux, the last a NUL; bind
		// would say only "invalid argument".
		if len(uds) > MaxUnixSocketPath {
			bad("GRPC_UDS=%q: %d bytes, longer than the %d a unix socket path may have: use a shorter path", uds, len(uds), MaxUnixSocketPath)
		}
		up.GRPCUnixSocket = uds
	}

	if boolean("GRPC_SERVER_USE_TLS") {
		c.EnvoyRLS.TLS = &TLS{CertFile: str("GRPC_SERVER_TLS_CERT"), KeyFile: str("GRPC_SERVER_TLS_KEY"), ClientCAFile: str("GRPC_CLIENT_TLS_CACERT")}
	} else {
		for _, n := range []string{"GRPC_SERVER_TLS_CERT", "GRPC_SERVER_TLS_KEY", "GRPC_CLIENT_TLS_CACERT"} {
			if str(n) != "" {
				bad("%s is set but GRPC_SERVER_USE_TLS is not true: set GRPC_SERVER_USE_TLS=true, or unset it", n)
			}
		}
	}

	switch l := strings.ToLower(str("LOG_LEVEL")); l {
	case "trace", "debug":
		up.LogLevel = "debug"
	case "info", "warn", "error":
		up.LogLevel = l
	case "warning":
		up.LogLevel = "warn"
	case "fatal", "panic":
		up.LogLevel = "error"
	default:
		bad("LOG_LEVEL=%q: want trace, debug, info, warn, error, fatal or panic", str("LOG_LEVEL"))
	}
	up.LogFormat = "text"
	if strings.EqualFold(str("LOG_FORMAT"), "json") {
		up.LogFormat = "json"
	}

	if b := str("BACKEND_TYPE"); b != "redis" {
		bad("BACKEND_TYPE=%q is not offered: %s", b, noMemcash)
	}
	redisFromEnv(&c.Store.Redis, "REDIS_", env, vals, bad)
	if boolean("REDIS_PERSECOND") {
		up.PerSecond = &Redis{}
		redisFromEnv(up.PerSecond, "REDIS_PERSECOND_", env, vals, bad)
	}
	root, sub, app := str("RUNTIME_ROOT"), str("RUNTIME_SUBDIRECTORY"), str("RUNTIME_APPDIRECTORY")
	if sub == "" && boolean("RUNTIME_WATCH_ROOT") {
		bad("RUNTIME_SUBDIRECTORY is empty while RUNTIME_WATCH_ROOT is true, where envoyproxy/ratelimit loads no configuration at all: set RUNTIME_SUBDIRECTORY (the files are read from RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY)")
	}
	c.EnvoyRLS.ConfigDir = filepath.Join(root, sub, app)
	up.IgnoreDotFiles = boolean("RUNTIME_IGNOREDOTFILES")
	up.ShadowMode = boolean("SHADOW_MODE")
	up.MergeDomains = boolean("MERGE_DOMAIN_CONFIG")
	up.QuotaMode = boolean("QUOTA_MODE")
	up.StopIncrementWhenOver = boolean("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT")
	up.HealthyWithConfig = boolean("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED")
	up.CacheKeyPrefix = str("CACHE_KEY_PREFIX")
	up.ExpirationJitter = time.Duration(max(0, num("EXPIRATION_JITTER_MAX_SECONDS"))) * time.Second
	up.RedisStartup = redisStartupFromEnv(env, vals, bad)

	// LIMIT_RESPONSE_HEADERS_ENABLED: upstream's three headers (the reset
	// in seconds), named by LIMIT_*_HEADER; without it, no headers at all.
	c.EnvoyRLS.ResponseHeaders = "none"
	if boolean("LIMIT_RESPONSE_HEADERS_ENABLED") {
		c.EnvoyRLS.ResponseHeaders = "envoyproxy"
		for _, n := range []struct {
			env, def string
			to       *string
		}{
			{"LIMIT_LIMIT_HEADER", "RateLimit-Limit", &c.EnvoyRLS.LimitHeader},
			{"LIMIT_REMAINING_HEADER", "RateLimit-Remaining", &c.EnvoyRLS.RemainingHeader},
			{"LIMIT_RESET_HEADER", "RateLimit-Reset", &c.EnvoyRLS.ResetHeader},
		} {
			if name := str(n.env); validHeaderName(name) {
				*n.to = name
			} else {
				bad("%s=%q: want a header name such as %s", n.env, name, n.def)
			}
		}
	}
	c.EnvoyRLS.DynamicMetadata = boolean("RESPONSE_DYNAMIC_METADATA")
	up.Statsd = statsdFromEnv(env, vals, bad)
	up.Tracing = tracingFromEnv(env, vals, bad, &up.Notes)
	if len(problems) > 0 {
		return nil, fmt.Errorf("%w: %s", ErrUpstreamEnv, strings.Join(problems, "; "))
	}
	built, err := Build(c, ".")
	if err != nil {
		// The checks of Build name sluice's fields: say which variables
		// they come from.
		return nil, fmt.Errorf("%w: %s", ErrUpstreamEnv, upstreamFields.ReplaceAllStringFunc(err.Error(), func(m string) string {
			field := strings.Trim(m, ": ")
			for _, f := range upstreamFieldVars {
				if field == f.field || strings.HasPrefix(field, f.field+".") {
					return ": " + f.vars + " (" + field + "):"
				}
			}
			return m
		}))
	}
	if up.PerSecond != nil && up.PerSecond.Timeout == 0 {
		up.PerSecond.Timeout = built.Store.Redis.Timeout
	}
	return built, err
}

// upstreamFields finds the field an error of Build names, and
// upstreamFieldVars the variables each field is made of.
var (
	upstreamFields    = regexp.MustCompile(`: [a-z_]+(\.[a-z_]+)*:`)
	upstreamFieldVars = []struct{ field, vars string }{
		{"envoy_rls.config_dir", "RUNTIME_ROOT, RUNTIME_SUBDIRECTORY and RUNTIME_APPDIRECTORY"},
		{"envoy_rls.max_streams_per_connection", "SLUICE_MAX_STREAMS_PER_CONNECTION"},
		{"envoy_rls.max_streams_per_ip", "SLUICE_MAX_STREAMS_PER_IP"},
		{"envoy_rls.first_message_timeout", "SLUICE_FIRST_MESSAGE_TIMEOUT"},
		{"envoy_rls.max_in_flight_per_domain", "SLUICE_MAX_IN_FLIGHT_PER_DOMAIN"},
		{"envoy_rls.domain_wait", "SLUICE_DOMAIN_WAIT"},
		{"envoy_rls.busy_domain_rest", "SLUICE_BUSY_DOMAIN_REST"},
		{"envoy_rls.max_descriptors", "SLUICE_MAX_DESCRIPTORS"},
		{"envoy_rls.max_entries", "SLUICE_MAX_ENTRIES"},
		{"envoy_rls.tls", "GRPC_SERVER_USE_TLS, GRPC_SERVER_TLS_CERT, GRPC_SERVER_TLS_KEY and GRPC_CLIENT_TLS_CACERT"},
		{"envoy_rls.listen", "GRPC_HOST and GRPC_PORT"},
		{"envoy_rls", "LIMIT_RESPONSE_HEADERS_ENABLED and the LIMIT_ headers"},
		{"store.redis.tls", "REDIS_TLS, REDIS_TLS_CACERT, REDIS_TLS_CLIENT_CERT and REDIS_TLS_CLIENT_KEY"},
		{"store.redis", "REDIS_SOCKET_TYPE, REDIS_TYPE, REDIS_URL, REDIS_AUTH, REDIS_POOL_SIZE and REDIS_TIMEOUT"},
		{"admin_listen", "DEBUG_HOST and DEBUG_PORT"},
		{"listen", "HOST and PORT"},
	}
)

// redisFromEnv fills r from the variables of prefix (REDIS_ or
// REDIS_PERSECOND_): SOCKET_TYPE, TYPE, URL, AUTH, SENTINEL_AUTH, TLS,
// POOL_SIZE and TIMEOUT, and the REDIS_TLS_ files, which both Redis share
// (as there). env holds what is set; vals every variable's value.
func redisFromEnv(r *Redis, prefix string, env map[string]string, vals map[string]any, bad func(string, ...any)) {
	str := func(name string) string { s, _ := vals[name].(string); return s }
	socket, typ, addr := strings.ToLower(str(prefix+"SOCKET_TYPE")), strings.ToUpper(str(prefix+"TYPE")), str(prefix+"URL")
	tls, _ := vals[prefix+"TLS"].(bool)
	scheme := "redis://"
	if tls {
		scheme = "rediss://"
	}
	if socket != "unix" && socket != "tcp" {
		bad("%sSOCKET_TYPE=%q: want unix or tcp", prefix, str(prefix+"SOCKET_TYPE"))
		return
	}
	if addr == "" {
		bad("%sURL is empty: want the Redis's socket path or HOST:PORT", prefix)
		return
	}
	list := strings.Split(addr, ",")
	switch typ {
	case "SINGLE":
		if socket == "unix" {
			if tls {
				bad("%sTLS=true with %sSOCKET_TYPE=unix: TLS is for tcp; unset %sTLS", prefix, prefix, prefix)
			}
			r.URL = "unix://" + addr
		} else {
			r.URL = scheme + addr
		}
	case "SENTINEL", "CLUSTER":
		if socket != "tcp" {
			bad("%sTYPE=%s needs %sSOCKET_TYPE=tcp", prefix, typ, prefix)
			return
		}
		if typ == "CLUSTER" {
			r.ClusterAddrs = list
		} else if len(list) < 2 {
			bad("%sURL=%q with %sTYPE=SENTINEL: want the master name and the sentinels, such as mymaster,10.0.0.1:26379,10.0.0.2:26379", prefix, addr, prefix)
			return
		} else {
			r.Sentinel = Sentinel{Master: list[0], Addrs: list[1:]}
		}
		if tls {
			r.URL = "rediss://" + list[len(list)-1] // TLS for the cluster or the sentinels' master
		}
	default:
		bad("%sTYPE=%q: want SINGLE, SENTINEL or CLUSTER", prefix, str(prefix+"TYPE"))
		return
	}
	if auth := str(prefix + "AUTH"); auth != "" {
		if user, pass, ok := strings.Cut(auth, ":"); ok {
			r.Username, r.Password = user, Secret(pass)
		} else {
			r.Password = Secret(auth)
		}
	}
	if auth := str(prefix + "SENTINEL_AUTH"); auth != "" {
		if r.Sentinel.Master == "" {
			bad("%sSENTINEL_AUTH is set but %sTYPE is not SENTINEL: set %sTYPE=SENTINEL, or unset it", prefix, prefix, prefix)
		}
		if user, pass, ok := strings.Cut(auth, ":"); ok {
			r.Sentinel.Username, r.Sentinel.Password = user, Secret(pass)
		} else {
			r.Sentinel.Password = Secret(auth)
		}
	}
	if n, _ := vals[prefix+"POOL_SIZE"].(int64); n < 1 {
		bad("%sPOOL_SIZE=%d: want 1 or more", prefix, n)
	} else if _, set := env[prefix+"POOL_SIZE"]; set {
		r.PoolSize = int(n)
	}
	if _, set := env[prefix+"TIMEOUT"]; set {
		if d, _ := vals[prefix+"TIMEOUT"].(time.Duration); d > 0 {
			r.Timeout = d
		} else {
			bad("%sTIMEOUT=%q: want a positive duration such as 50ms", prefix, env[prefix+"TIMEOUT"])
		}
	}
	if !tls {
		if prefix == "REDIS_" && (str("REDIS_TLS_CACERT") != "" || str("REDIS_TLS_CLIENT_CERT") != "" || str("REDIS_TLS_CLIENT_KEY") != "") {
			bad("REDIS_TLS_CACERT, REDIS_TLS_CLIENT_CERT or REDIS_TLS_CLIENT_KEY is set but REDIS_TLS is not true: set REDIS_TLS=true, or unset them")
		}
		return
	}
	// The files serve both Redis, as there.
	r.TLS = RedisTLS{CAFile: str("REDIS_TLS_CACERT"), CertFile: str("REDIS_TLS_CLIENT_CERT"), KeyFile: str("REDIS_TLS_CLIENT_KEY")}
}

// redisStartupFromEnv reads the REDIS_STARTUP_ variables: nil when none
// is set.
func redisStartupFromEnv(env map[string]string, vals map[string]any, bad func(string, ...any)) *RedisStartup {
	names := []string{"REDIS_STARTUP_INITIAL_INTERVAL", "REDIS_STARTUP_MAX_INTERVAL", "REDIS_STARTUP_MAX_ELAPSED_TIME"}
	if !slices.ContainsFunc(names, func(n string) bool { _, set := env[n]; return set }) {
		return nil
	}
	d := func(name string) time.Duration { v, _ := vals[name].(time.Duration); return v }
	s := &RedisStartup{Initial: d(names[0]), Max: d(names[1]), MaxElapsed: d(names[2])}
	if s.Initial <= 0 {
		bad("%s=%v: want a positive duration such as 1s", names[0], s.Initial)
	}
	if s.Max < s.Initial {
		bad("%s=%v is less than %s=%v: want at least as long", names[1], s.Max, names[0], s.Initial)
	}
	if s.MaxElapsed < 0 {
		bad("%s=%v: want 0 (wait as long as it takes) or a positive duration such as 5m", names[2], s.MaxElapsed)
	}
	return s
}

// statsdFromEnv reads USE_STATSD, USE_DOG_STATSD, USE_PROMETHEUS,
// DISABLE_STATS, the STATSD_, DOG_STATSD_ and PROMETHEUS_ variables,
// EXTRA_TAGS, STATS_FLUSH_INTERVAL and NEAR_LIMIT_RATIO; nil when no
// stats are sent. As there, DISABLE_STATS wins over all, and two sinks at
// once (USE_STATSD is true unless set false) are refused.
func statsdFromEnv(env map[string]string, vals map[string]any, bad func(string, ...any)) *Statsd {
	str := func(name string) string { s, _ := vals[name].(string); return s }
	ratio, _ := vals["NEAR_LIMIT_RATIO"].(float64)
	if !(ratio >= 0 && ratio <= 1) {
		bad("NEAR_LIMIT_RATIO=%v: want a number from 0 to 1, such as 0.8", ratio)
	}
	useStatsd, _ := vals["USE_STATSD"].(bool)
	dog, _ := vals["USE_DOG_STATSD"].(bool)
	useProm, _ := vals["USE_PROMETHEUS"].(bool)
	if off, _ := vals["DISABLE_STATS"].(bool); off || !useStatsd && !dog && !useProm {
		return nil
	}
	s := &Statsd{NearLimitRatio: ratio, Tags: map[string]string{}, Dog: dog}
	switch {
	case useStatsd && dog:
		bad("USE_DOG_STATSD=true with USE_STATSD=true (its default): envoyproxy/ratelimit sends to one stats sink and refuses to start; set USE_STATSD=false")
	case useStatsd && useProm:
		bad("USE_PROMETHEUS=true with USE_STATSD=true (its default): one stats sink at a time, as envoyproxy/ratelimit refuses both: set USE_STATSD=false")
	case dog && useProm:
		bad("USE_PROMETHEUS=true with USE_DOG_STATSD=true: one stats sink at a time, as envoyproxy/ratelimit refuses both: unset one")
	case useProm:
		s.Prometheus = prometheusFromEnv(vals, bad)
	default: // statsd, or DogStatsD
		if dog {
			s.Mogrifiers = mogrifiersFromEnv(env, str("USE_DOG_STATSD_MOGRIFIERS"), bad)
		}
		host := str("STATSD_HOST")
		if host == "" {
			bad("STATSD_HOST is empty: want the statsd's host, such as localhost")
		}
		port, _ := vals["STATSD_PORT"].(int64)
		if port < 1 || port > 65535 {
			bad("STATSD_PORT=%d: want a port from 1 to 65535", port)
		}
		s.Addr = net.JoinHostPort(host, strconv.FormatInt(port, 10))
		switch p := strings.ToLower(str("STATSD_PROTOCOL")); p {
		case "tcp", "udp", "tcp4", "tcp6", "udp4", "udp6":
			s.Protocol = p
			if dog {
				s.Protocol = "udp" // DogStatsD's client sends over UDP whatever STATSD_PROTOCOL says
			}
		default:
			bad("STATSD_PROTOCOL=%q: want tcp or udp", str("STATSD_PROTOCOL"))
		}
	}
	if s.FlushInterval, _ = vals["STATS_FLUSH_INTERVAL"].(time.Duration); s.FlushInterval <= 0 {
		bad("STATS_FLUSH_INTERVAL=%v: want a positive duration such as 10s", s.FlushInterval)
	}
	// EXTRA_TAGS, as envconfig reads a map: tag:value pairs separated by
	// commas.
	if tags := str("EXTRA_TAGS"); tags != "" {
		for _, pair := range strings.Split(tags, ",") {
			k, v, ok := strings.Cut(pair, ":")
			if !ok {
				bad("EXTRA_TAGS=%q: %q is no tag:value; want tag:value pairs separated by commas, such as env:prod,team:edge", tags, pair)
				continue
			}
			s.Tags[k] = v
		}
	}
	return s
}

// prometheusFromEnv reads the PROMETHEUS_ variables (USE_PROMETHEUS=true).
// An empty address or path is upstream's default, as its sink takes it.
func prometheusFromEnv(vals map[string]any, bad func(string, ...any)) *Prometheus {
	str := func(name string) string { s, _ := vals[name].(string); return s }
	p := &Prometheus{Addr: str("PROMETHEUS_ADDR"), Path: str("PROMETHEUS_PATH"), MapperYAML: str("PROMETHEUS_MAPPER_YAML")}
	p.ResponseTimeMillis, _ = vals["PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS"].(bool)
	if p.Addr == "" {
		p.Addr = ":9090"
	}
	if p.Path == "" {
		p.Path = "/metrics"
	}
	if _, port, err := net.SplitHostPort(p.Addr); err != nil {
		bad("PROMETHEUS_ADDR=%q: want HOST:PORT or :PORT, such as :9090", p.Addr)
	} else if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		bad("PROMETHEUS_ADDR=%q: want a port from 0 to 65535", p.Addr)
	}
	if !strings.HasPrefix(p.Path, "/") || strings.ContainsAny(p.Path, " \t{}") {
		bad("PROMETHEUS_PATH=%q: want a path starting with /, such as /metrics", p.Path)
	}
	return p
}

// tracingOverridden are the OTEL_ variables that say what a TRACING_
// variable says, and which one decides instead under `sluice ratelimit`.
var tracingOverridden = []struct{ otel, by string }{
	{"OTEL_SDK_DISABLED", "TRACING_ENABLED"},
	{"OTEL_TRACES_EXPORTER", "TRACING_ENABLED"},
	{"OTEL_SERVICE_NAME", "TRACING_SERVICE_NAME"},
	{"OTEL_EXPORTER_OTLP_PROTOCOL", "TRACING_EXPORTER_PROTOCOL"},
	{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "TRACING_EXPORTER_PROTOCOL"},
	{"OTEL_TRACES_SAMPLER", "TRACING_SAMPLING_RATE"},
	{"OTEL_TRACES_SAMPLER_ARG", "TRACING_SAMPLING_RATE"},
}

// tracingFromEnv reads the TRACING_ variables; nil unless
// TRACING_ENABLED is true. Their values are checked either way. The
// OTEL_ variables that say the same are ignored, as envoyproxy/ratelimit
// ignores them, with a note saying so.
func tracingFromEnv(env map[string]string, vals map[string]any, bad func(string, ...any), notes *[]string) *Tracing {
	str := func(name string) string { s, _ := vals[name].(string); return s }
	t := &Tracing{ServiceName: str("TRACING_SERVICE_NAME"), ServiceNamespace: str("TRACING_SERVICE_NAMESPACE"), ServiceInstanceID: str("TRACING_SERVICE_INSTANCE_ID")}
	switch p := strings.ToLower(str("TRACING_EXPORTER_PROTOCOL")); p {
	case "http", "": // upstream takes empty for http
		t.Protocol = "http"
	case "grpc":
		t.Protocol = "grpc"
	default:
		bad("TRACING_EXPORTER_PROTOCOL=%q: want http or grpc", str("TRACING_EXPORTER_PROTOCOL"))
	}
	if raw, set := env["TRACING_SAMPLING_RATE"]; set {
		if rate, ok := vals["TRACING_SAMPLING_RATE"].(float64); ok {
			if !(rate >= 0 && rate <= 1) {
				bad("TRACING_SAMPLING_RATE=%q: want a number from 0 (no trace sampled) to 1 (every one)", raw)
			}
			t.SamplingRate = rate
		} // else parseVar said what is wrong
	} else {
		t.SamplingRate = 1
	}
	if on, _ := vals["TRACING_ENABLED"].(bool); !on {
		for _, name := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_TRACES_EXPORTER"} {
			if env[name] != "" && env[name] != "none" {
				*notes = append(*notes, fmt.Sprintf("%s is set but TRACING_ENABLED is not true: no spans are exported, as envoyproxy/ratelimit exports none; set TRACING_ENABLED=true to export them", name))
				break
			}
		}
		return nil
	}
	for _, o := range tracingOverridden {
		if v := env[o.otel]; v != "" {
			*notes = append(*notes, fmt.Sprintf("%s=%s: ignored, %s decides, as in envoyproxy/ratelimit", o.otel, v, o.by))
		}
	}
	return t
}

// mogrifiersFromEnv reads the mogrifiers named in list (comma-separated,
// as envconfig reads a list): DOG_STATSD_MOGRIFIER_<name>_PATTERN (a
// regular expression), _NAME and _TAGS (key:value pairs, comma-separated;
// $0, $1, … in the name and values stand for the match and its groups).
func mogrifiersFromEnv(env map[string]string, list string, bad func(string, ...any)) []Mogrifier {
	var ms []Mogrifier
	if strings.TrimSpace(list) == "" {
		return nil
	}
	for _, name := range strings.Split(list, ",") {
		prefix := "DOG_STATSD_MOGRIFIER_" + strings.ToUpper(name) + "_" // as envconfig reads it
		pattern, ok := env[prefix+"PATTERN"]
		if !ok || pattern == "" {
			bad("USE_DOG_STATSD_MOGRIFIERS names %q, but %sPATTERN is not set: want a regular expression", name, prefix)
			continue
		}
		re, err := regexp.Compile(pattern)
		if err != nil {
			bad("%sPATTERN=%q: not a regular expression: %v", prefix, pattern, err)
			continue
		}
		m := Mogrifier{Pattern: re, Name: env[prefix+"NAME"]}
		if m.Name == "" {
			bad("%sNAME is not set: want the name to send a matching stat as, such as ratelimit.$1", prefix)
			continue
		}
		if tags := env[prefix+"TAGS"]; tags != "" {
			for _, pair := range strings.Split(tags, ",") {
				k, v, ok := strings.Cut(pair, ":")
				if !ok || k == "" || v == "" {
					bad("%sTAGS=%q: %q is no key:value; want key:value pairs separated by commas, such as domain:$1", prefix, tags, pair)
					continue
				}
				m.Tags = append(m.Tags, [2]string{k, v})
			}
		}
		ms = append(ms, m)
	}
	return ms
}

// parseVar reads an environment value as envoyproxy/ratelimit's settings
// library reads it; a string is kept as written.
func parseVar(kind byte, s string) (any, error) {
	switch kind {
	case 'b':
		if s == "" {
			return false, nil
		}
		b, err := strconv.ParseBool(s)
		if err != nil {
			return nil, errors.New("want true or false")
		}
		return b, nil
	case 'i':
		if s == "" {
			return int64(0), nil
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return nil, errors.New("want a whole number")
		}
		return n, nil
	case 'd':
		if s == "" {
			return time.Duration(0), nil
		}
		if n, err := strconv.ParseInt(s, 10, 64); err == nil {
			return time.Duration(n), nil
		}
		d, err := time.ParseDuration(s)
		if err != nil {
			return nil, errors.New("want a duration such as 10s")
		}
		return d, nil
	case 'f':
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil, errors.New("want a number such as 0.8")
		}
		return f, nil
	}
	return s, nil
}

// Build defaults and validates a configuration built in code, as Parse
// does a file's; relative paths are read from dir. The error, when it is
// invalid, is an Errors listing every problem.
func Build(c *Config, dir string) (*Config, error) {
	d := &decoder{file: c.File, errs: new(Errors), lines: make(map[string]int), bad: make(map[string]bool)}
	c.Defaults()
	v := &validator{c: c, file: c.File, dir: dir, lines: d.lines, errs: d.errs, skip: d.reported}
	v.validate()
	c.env = newEnvValues(nil)
	if len(*d.errs) > 0 {
		return nil, d.errs.sorted()
	}
	return c, nil
}
