// Package rlsstats sends the statsd stats that envoyproxy/ratelimit sends,
// under its names and with its meaning, for `sluice ratelimit`
// (USE_STATSD): per descriptor ratelimit.service.rate_limit.<key>.
// total_hits, over_limit, near_limit, within_limit and shadow_mode; per
// unknown domain <domain>.domain_not_found; the call counters
// ratelimit.service.call.should_rate_limit.redis_error and service_error;
// ratelimit.service.config_load_success, config_load_error and
// global_shadow_mode; per gRPC method ratelimit_server.<method>.
// total_requests and the timer response_time. With USE_PROMETHEUS the
// same stats are served for Prometheus instead, through
// prometheus/statsd_exporter's mapping, as there (promSink). It counts with envoyproxy/ratelimit's own stats
// library (github.com/lyft/gostats), so that the tags of EXTRA_TAGS
// (".__key=value" after each name) and the flush (the counts since the
// last flush, none of zero) are the same, and writes that client's wire
// form through a sink of its own (netSink), which has no goroutine and
// closes: Close sends the last counts and leaves nothing running.
//
// Nothing here is on a call's path beyond atomic adds: the counters of a
// descriptor file's limit are made once per loaded configuration and
// found by pointer without a lock; only names made from a request's
// values (descriptor limit overrides, detailed_metric, value_to_metric,
// an unknown domain) are built per call, and at most MaxDynamic of those
// are kept.
package rlsstats

import (
	"fmt"
	"log/slog"
	"math"
	"net"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	gostats "github.com/lyft/gostats"

	"github.com/sluicehq/sluice/config"
)

// MaxDynamic bounds the names made from requests' values that are kept
// (a descriptor limit override, detailed_metric, value_to_metric, an
// unknown domain): past it, a new such name is not counted, so that a
// client sending ever new values cannot grow the process without bound.
const MaxDynamic = 10_000

// Stats sends envoyproxy/ratelimit's stats. A nil *Stats sends nothing:
// every method may be called on it.
type Stats struct {
	store  gostats.Store
	sink   closingSink
	prom   *promSink     // the sink, with USE_PROMETHEUS; else nil
	server gostats.Scope // ratelimit_server: the gRPC calls
	rl     gostats.Scope // ratelimit.service.rate_limit
	ratio  float32
	cancel chan struct{}
	done   chan struct{}
	once   sync.Once

	redisError, serviceError         gostats.Counter
	configLoadSuccess, configLoadErr gostats.Counter
	globalShadowMode                 gostats.Counter

	methods sync.Map // gRPC full method name → *Method
	nMeth   atomic.Int64

	cache   atomic.Pointer[limitCache]
	dynamic sync.Map // name → *Limit
	nDyn    atomic.Int64
	maxDyn  int64 // MaxDynamic
}

// closingSink is a gostats sink that Close stops: what it holds is sent
// (a statsd's) and nothing of it runs after.
type closingSink interface {
	gostats.Sink
	Close()
}

// limitCache holds the counters of one configuration's limits, by
// pointer, so that a call finds them without building a name.
type limitCache struct {
	rls *config.EnvoyRLS
	m   sync.Map // *config.RLSLimit → *Limit
}

// Limit is the counters of one stats key.
type Limit struct {
	totalHits, overLimit, nearLimit, withinLimit, shadowMode gostats.Counter
}

// New starts sending the stats of s, flushed every s.FlushInterval until
// Close: to s.Addr over s.Protocol (tcp or udp), or, with s.Prometheus,
// served for Prometheus on a listener of their own. log receives the
// client's errors (a statsd that does not answer), at debug level. A
// Prometheus mapping file that does not load, or an address that cannot
// be listened on, is an error that names its variable.
func New(s config.Statsd, log *slog.Logger) (st *Stats, err error) {
	if log == nil {
		log = slog.Default()
	}
	if s.FlushInterval <= 0 {
		return nil, fmt.Errorf("rlsstats: flush interval %v: want a positive duration", s.FlushInterval)
	}
	var sink closingSink
	var prom *promSink
	if s.Prometheus != nil {
		if prom, err = newPromSink(*s.Prometheus, log); err != nil {
			return nil, fmt.Errorf("rlsstats: %w", err)
		}
		sink = prom
	} else {
		host, port, err := net.SplitHostPort(s.Addr)
		if err != nil {
			return nil, fmt.Errorf("rlsstats: %w", err)
		}
		p, err := strconv.Atoi(port)
		if err != nil {
			return nil, fmt.Errorf("rlsstats: port %q: %w", port, err)
		}
		if p < 0 || p > 65535 {
			return nil, fmt.Errorf("rlsstats: port %d: want 0 to 65535", p)
		}
		switch s.Protocol {
		case "tcp", "tcp4", "tcp6", "udp", "udp4", "udp6":
		default:
			return nil, fmt.Errorf("rlsstats: protocol %q: want tcp or udp", s.Protocol)
		}
		ns := newSink(s.Protocol, net.JoinHostPort(host, port), log)
		sink = ns
		if s.Dog {
			sink = &dogSink{netSink: ns, mogrifiers: s.Mogrifiers}
		}
	}
	store := gostats.NewStore(sink, false)
	service := store.ScopeWithTags("ratelimit", s.Tags).Scope("service")
	call := service.Scope("call.should_rate_limit")
	st = &Stats{
		store:             store,
		sink:              sink,
		prom:              prom,
		server:            store.ScopeWithTags("ratelimit_server", s.Tags),
		rl:                service.Scope("rate_limit"),
		ratio:             float32(s.NearLimitRatio),
		maxDyn:            MaxDynamic,
		cancel:            make(chan struct{}),
		done:              make(chan struct{}),
		redisError:        call.NewCounter("redis_error"),
		serviceError:      call.NewCounter("service_error"),
		configLoadSuccess: service.NewCounter("config_load_success"),
		configLoadErr:     service.NewCounter("config_load_error"),
		globalShadowMode:  service.NewCounter("global_shadow_mode"),
	}
	go st.run(s.FlushInterval)
	return st, nil
}

// PrometheusAddr is where the Prometheus listener listens (USE_PROMETHEUS);
// nil without one.
func (s *Stats) PrometheusAddr() net.Addr {
	if s == nil || s.prom == nil {
		return nil
	}
	return s.prom.Addr()
}

// Method is the stats of one gRPC method, as envoyproxy/ratelimit's
// interceptor keeps them: ratelimit_server.<method>.total_requests and
// the timer ratelimit_server.<method>.response_time, in whole
// milliseconds.
type Method struct {
	total gostats.Counter
	time  gostats.Timer
}

// ForMethod returns the stats of the gRPC method fullMethod
// ("/package.Service/Method", named by its last part, as there); nil past
// maxMethods names (the server's methods are far fewer).
func (s *Stats) ForMethod(fullMethod string) *Method {
	if s == nil {
		return nil
	}
	if v, ok := s.methods.Load(fullMethod); ok {
		return v.(*Method)
	}
	if s.nMeth.Add(1) > maxMethods {
		s.nMeth.Add(-1)
		return nil
	}
	name := fullMethod[strings.LastIndexByte(fullMethod, '/')+1:]
	v, loaded := s.methods.LoadOrStore(fullMethod, &Method{total: s.server.NewCounter(name + ".total_requests"), time: s.server.NewTimer(name + ".response_time")})
	if loaded {
		s.nMeth.Add(-1)
	}
	return v.(*Method)
}

const maxMethods = 64

// Called counts one call of the method that took took.
func (m *Method) Called(took time.Duration) {
	if m != nil {
		m.total.Inc()
		m.time.AddValue(float64(took.Milliseconds()))
	}
}

func (s *Stats) run(every time.Duration) {
	defer close(s.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.cancel:
			s.store.Flush()
			return
		case <-t.C:
			s.store.Flush()
		}
	}
}

// Close flushes what was counted since the last flush, writes it to the
// statsd (or gives up on it within about two seconds when the statsd does
// not answer), closes the connection and stops: when it returns, nothing
// of s runs.
func (s *Stats) Close() {
	if s == nil {
		return
	}
	s.once.Do(func() { close(s.cancel) })
	<-s.done
	s.sink.Close()
}

// Flush sends what was counted since the last flush now.
func (s *Stats) Flush() {
	if s != nil {
		s.store.Flush()
	}
}

// ConfigLoad counts a load of the configuration: config_load_success, or
// config_load_error when it failed.
func (s *Stats) ConfigLoad(ok bool) {
	switch {
	case s == nil:
	case ok:
		s.configLoadSuccess.Inc()
	default:
		s.configLoadErr.Inc()
	}
}

// RedisError counts a call that the store failed
// (call.should_rate_limit.redis_error).
func (s *Stats) RedisError() {
	if s != nil {
		s.redisError.Inc()
	}
}

// ServiceError counts a call refused as invalid
// (call.should_rate_limit.service_error).
func (s *Stats) ServiceError() {
	if s != nil {
		s.serviceError.Inc()
	}
}

// GlobalShadowMode counts a call over its limits answered OK by
// SHADOW_MODE.
func (s *Stats) GlobalShadowMode() {
	if s != nil {
		s.globalShadowMode.Inc()
	}
}

// DomainNotFound counts a descriptor of a domain no file names
// (rate_limit.<domain>.domain_not_found).
func (s *Stats) DomainNotFound(domain string) {
	if s == nil {
		return
	}
	if c := s.dyn(domain, ".domain_not_found"); c != nil {
		c.totalHits.Inc()
	}
}

// ForLimit returns the counters of l, a limit of the descriptor files of
// rls, under the key envoyproxy/ratelimit names it by (l.StatsKey). It
// builds them once per configuration; later calls take no lock and
// allocate nothing.
func (s *Stats) ForLimit(rls *config.EnvoyRLS, l *config.RLSLimit) *Limit {
	if s == nil {
		return nil
	}
	c := s.cache.Load()
	if c == nil || c.rls != rls {
		fresh := &limitCache{rls: rls}
		if s.cache.CompareAndSwap(c, fresh) {
			c = fresh
		} else {
			c = s.cache.Load()
			if c.rls != rls { // a call of another configuration won
				c = fresh
			}
		}
	}
	if v, ok := c.m.Load(l); ok {
		return v.(*Limit)
	}
	v, _ := c.m.LoadOrStore(l, s.newLimit(l.StatsKey))
	return v.(*Limit)
}

// ForKey returns the counters of key, a name made from a request's
// values (envoyproxy/ratelimit's unsanitized key, "domain.key_value…");
// nil past MaxDynamic such names.
func (s *Stats) ForKey(key string) *Limit {
	if s == nil {
		return nil
	}
	if v, ok := s.dynamic.Load(key); ok {
		return v.(*Limit)
	}
	if s.nDyn.Add(1) > s.maxDyn {
		s.nDyn.Add(-1)
		return nil
	}
	v, loaded := s.dynamic.LoadOrStore(key, s.newLimit(key))
	if loaded {
		s.nDyn.Add(-1)
	}
	return v.(*Limit)
}

// dyn is a counter of a dynamic name (in its totalHits).
func (s *Stats) dyn(name, suffix string) *Limit {
	key := "\x00" + name + suffix // apart from ForKey's names
	if v, ok := s.dynamic.Load(key); ok {
		return v.(*Limit)
	}
	if s.nDyn.Add(1) > s.maxDyn {
		s.nDyn.Add(-1)
		return nil
	}
	v, loaded := s.dynamic.LoadOrStore(key, &Limit{totalHits: s.rl.NewCounter(Sanitize(name) + suffix)})
	if loaded {
		s.nDyn.Add(-1)
	}
	return v.(*Limit)
}

func (s *Stats) newLimit(key string) *Limit {
	k := Sanitize(key)
	return &Limit{
		totalHits:   s.rl.NewCounter(k + ".total_hits"),
		overLimit:   s.rl.NewCounter(k + ".over_limit"),
		nearLimit:   s.rl.NewCounter(k + ".near_limit"),
		withinLimit: s.rl.NewCounter(k + ".within_limit"),
		shadowMode:  s.rl.NewCounter(k + ".shadow_mode"),
	}
}

// Record counts one descriptor's decision as envoyproxy/ratelimit's
// limiter does: cost hits in total_hits; when over the limit, in
// over_limit (and shadow_mode when the limit is in shadow mode); else in
// within_limit, and those past NEAR_LIMIT_RATIO of the limit (after, the
// window's count with these hits) in near_limit. One difference: when a
// call of several hits (hits_addend) crosses the limit, all of them count
// as over_limit, where envoyproxy/ratelimit counts those below the limit
// as near_limit (sluice's store does not say the count past the limit).
func (s *Stats) Record(l *Limit, cost int64, limit uint32, after int64, over, shadow bool) {
	if s == nil || l == nil || cost < 0 {
		return
	}
	n := uint64(cost)
	l.totalHits.Add(n)
	if over {
		l.overLimit.Add(n)
		if shadow {
			l.shadowMode.Add(n)
		}
		return
	}
	near := int64(math.Floor(float64(float32(limit) * s.ratio)))
	if after > near {
		if before := after - cost; before >= near {
			l.nearLimit.Add(n)
		} else {
			l.nearLimit.Add(uint64(after - near))
		}
	}
	l.withinLimit.Add(n)
}

// dottedQuad is an IPv4 address in a stat name, whose dots
// envoyproxy/ratelimit turns into underscores.
var dottedQuad = regexp.MustCompile(`\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}`)

var colonPipe = strings.NewReplacer(":", "_", "|", "_")

// Sanitize is a stats key as envoyproxy/ratelimit writes it in a stat's
// name: ':' and '|' become '_', and so do the dots of an IPv4 address.
func Sanitize(key string) string {
	return dottedQuad.ReplaceAllStringFunc(colonPipe.Replace(key), func(ip string) string {
		return strings.ReplaceAll(ip, ".", "_")
	})
}

// Hits counts cost hits in total_hits alone, for a descriptor whose
// decision the store failed (envoyproxy/ratelimit counts the hits before
// it asks Redis, then fails the call).
func (s *Stats) Hits(l *Limit, cost int64) {
	if s != nil && l != nil && cost > 0 {
		l.totalHits.Add(uint64(cost))
	}
}
