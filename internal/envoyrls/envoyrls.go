// Package envoyrls is sluice's front door for Envoy's global rate limit
// service: envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit
// over gRPC, with the gRPC health service, on a listener of its own.
//
// It decides nothing itself. The descriptor files (envoyproxy/ratelimit's,
// read by package config) compile to policies without a pattern, one per
// rate_limit, added to the gateway's one decision core (decide.Core); a
// call is translated into (policy, key, cost) per descriptor and decided
// by decide.Core.Decide, which every front door goes through (the proxy,
// the middleware, /v1/check, /v1/authz), so that store, algorithms,
// failure policy (on_error) and headers are the same everywhere. This
// package imports neither httplimit nor a JWT library (a test holds it to
// that): the RateLimit fields come from the Decider's FieldsOf. The translation
// follows envoyproxy/ratelimit's main of July 2026: the same matching of
// descriptors (value, then a wildcard value with a '*' anywhere, then the
// key alone; a limit applies only where the request's last entry lands),
// a request's own limit override, the same fixed window per unit aligned
// to the Unix epoch, counting a refused hit too, and the same replaces,
// unlimited, shadow_mode, quota_mode, metadata, response headers and
// dynamic metadata. Buckets are one per distinct list of entries, or per
// wildcard under share_threshold, where envoyproxy/ratelimit's counter
// names may merge two lists (docs/envoy.md); under `sluice ratelimit` the
// counters on Redis are named as there, merges included, so that the two
// can share one Redis (match). Two things need no store:
// unlimited, and requests_per_unit 0, which refuses every hit.
package envoyrls

import (
	"context"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/internal/rlsstats"
)

// Source returns what a call decides with: the envoy_rls section of the
// running configuration (its descriptor trees) and the Decider compiled
// from the same configuration, swapped together on reload.
type Source func() (*config.EnvoyRLS, Decider)

// Decider is what a call decides with: the decision core, and the
// rendering of the RateLimit fields that the HTTP front doors send, so
// that response_headers_to_add read as the proxy's headers would
// (*httplimit.Limiter is one).
type Decider interface {
	Core() *decide.Core
	FieldsOf(rules *decide.Rules, res sluice.Result, elapsed time.Duration) http.Header
}

// service implements RateLimitServiceServer.
type service struct {
	rlsv3.UnimplementedRateLimitServiceServer
	source Source
	log    *slog.Logger
	now    func() time.Time
	// stats: envoyproxy/ratelimit's statsd stats (`sluice ratelimit`
	// with USE_STATSD); nil: none.
	stats *rlsstats.Stats
	// tracer: spans of the calls (tracing.go); nil: none.
	tracer trace.Tracer
}

// decision is what one descriptor of a call comes to.
type decision struct {
	limit  *config.RLSLimit // nil: no limit applies
	key    string
	cost   int64
	hits   int64 // the call's hits, for the stats: cost before spareWhenOver
	res    sluice.Result
	rules  *decide.Rules // the rules decided with, for the fields
	over   bool          // over the limit (shadow and quota mode included)
	failed bool          // the store failed and on_error decided
	// storeErr: the store failed (on_error decided, open or closed).
	storeErr bool
	// override: the limit is the request's own (a descriptor limit
	// override), decided by counting in config.RLSOverridePolicy.
	override bool
}

// ShouldRateLimit decides every descriptor of req, in order, within a
// span when tracing is on (tracing.go).
func (s *service) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	if s.tracer != nil {
		return s.traced(ctx, req, spanGRPC, nil)
	}
	return s.shouldRateLimit(ctx, req)
}

func (s *service) shouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	start := time.Now()
	if req.GetDomain() == "" {
		s.stats.ServiceError()
		return nil, status.Error(codes.InvalidArgument, "rate limit domain must not be empty")
	}
	descs := req.GetDescriptors() // at most Options.MaxDescriptors, of MaxEntries each (Server.bound)
	if len(descs) == 0 {
		s.stats.ServiceError()
		return nil, status.Error(codes.InvalidArgument, "rate limit descriptor list must not be empty")
	}
	rls, lim := s.source()
	top := rls.Domains()[req.GetDomain()]
	var buf [4]decision
	ds := buf[:0]
	if len(descs) > len(buf) {
		ds = make([]decision, 0, len(descs))
	}
	var replaced map[string]bool
	names := counterNames{domain: req.GetDomain()}
	if rls.Upstream != nil {
		names.upstream, names.prefix = true, rls.Upstream.CacheKeyPrefix
	}
	for _, d := range descs {
		l, key, override := match(top, d, names)
		if override && l == nil {
			s.stats.ServiceError()
			return nil, status.Errorf(codes.InvalidArgument, "a descriptor limit override of unit %v; want SECOND, MINUTE, HOUR, DAY, WEEK, MONTH or YEAR", d.GetLimit().GetUnit())
		}
		if l != nil && len(l.Replaces) > 0 {
			if replaced == nil {
				replaced = make(map[string]bool)
			}
			for _, name := range l.Replaces {
				replaced[name] = true
			}
		}
		cost := hitsAddend(req, d)
		ds = append(ds, decision{limit: l, key: key, cost: cost, hits: cost, override: override})
	}
	// A call of one descriptor (Envoy's usual) gets its response, the
	// list of statuses and its status in one allocation.
	var one *oneAnswer
	var resp *rlsv3.RateLimitResponse
	if len(ds) == 1 {
		one = new(oneAnswer)
		resp = &one.resp
		resp.Statuses = one.statuses[:]
	} else {
		resp = &rlsv3.RateLimitResponse{Statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(ds))}
	}
	resp.OverallCode = rlsv3.RateLimitResponse_OK
	// As envoyproxy/ratelimit's main: the answer is OVER_LIMIT when a
	// limit outside quota mode is, or when every limit in quota mode is
	// (its January 2026 commit never refused for a quota limit).
	// QUOTA_MODE (`sluice ratelimit`) puts every descriptor in quota
	// mode, one without a limit too (it passes), as there.
	global := rls.Upstream != nil && rls.Upstream.QuotaMode
	for i := range ds {
		if l := ds[i].limit; l != nil && !l.Unlimited && l.Name != "" && replaced[l.Name] {
			ds[i].limit = nil
		}
	}
	if rls.Upstream != nil && rls.Upstream.StopIncrementWhenOver && len(ds) > 1 {
		s.spareWhenOver(ctx, lim.Core(), ds)
	}
	var quotas, quotasOver int
	for i := range ds {
		d := &ds[i]
		switch {
		case d.limit == nil:
			resp.Statuses[i] = &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
			if global {
				quotas++
			}
			continue
		case d.limit.Unlimited:
			resp.Statuses[i] = &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK, LimitRemaining: math.MaxUint32}
			continue
		}
		s.decide(ctx, lim.Core(), d)
		if d.override {
			overrideOutcome(d)
		}
		var sb *statusBlock
		if one != nil {
			sb = &one.status
		}
		st := s.status(d, sb)
		resp.Statuses[i] = st
		quota := d.limit.Quota || global
		if quota {
			quotas++
		}
		if st.Code == rlsv3.RateLimitResponse_OVER_LIMIT {
			if quota {
				quotasOver++
			} else {
				resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
			}
		}
	}
	if quotas > 0 && quotas == quotasOver {
		resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	over := resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT
	switch rls.ResponseHeaders {
	case "envoyproxy":
		resp.ResponseHeadersToAdd = s.envoyproxyHeaders(rls, ds, resp.Statuses, global)
	case "none":
	default:
		resp.ResponseHeadersToAdd = s.headers(lim, ds, over, time.Since(start))
	}
	if rls.DynamicMetadata {
		resp.DynamicMetadata = dynamicMetadata(req, ds, resp.Statuses)
	}
	if s.stats != nil {
		s.record(rls, req, ds, resp)
	}
	asUpstream(rls.Upstream, resp)
	return resp, nil
}

// spareWhenOver is STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT as
// envoyproxy/ratelimit's Redis cache does it: it first reads the count of
// every descriptor's fixed window (a check of cost 0), and when one of
// them, this call's hits added, would be over its limit, only those are
// counted: the others are decided at cost 0, so the call takes nothing of
// the limits it passed (their remaining says so). A limit of sluice's
// other algorithms, which count no refused hit, takes no part. A read
// that fails counts as not over.
func (s *service) spareWhenOver(ctx context.Context, core *decide.Core, ds []decision) {
	near := make([]bool, len(ds))
	anyNear := false
	for i := range ds {
		d := &ds[i]
		if d.limit == nil || d.limit.Unlimited || !d.limit.Counted {
			continue
		}
		if d.limit.Policy == "" { // requests_per_unit: 0
			near[i] = d.cost > 0
		} else {
			peek := *d
			peek.cost = 0
			s.decide(ctx, core, &peek)
			count := max(0, peek.res.Limit-peek.res.Remaining)
			near[i] = !peek.failed && count+d.cost > int64(d.limit.RequestsPerUnit)
		}
		anyNear = anyNear || near[i]
	}
	if !anyNear {
		return
	}
	for i := range ds {
		if l := ds[i].limit; l != nil && !l.Unlimited && l.Counted && !near[i] {
			ds[i].cost = 0
		}
	}
}

// overrideOutcome decides d, a descriptor of a request's own limit, from
// what its override policy counted: over when the window's count, this
// hit included, passes the request's requests_per_unit, as
// envoyproxy/ratelimit's counter does.
func overrideOutcome(d *decision) {
	if d.failed || d.over {
		return
	}
	count := max(0, d.res.Limit-d.res.Remaining)
	n := int64(d.limit.RequestsPerUnit)
	d.over = count > n
	d.res.Limit, d.res.Remaining = n, max(0, n-count)
}

// counterNames say how a descriptor's key is written (match): as
// envoyproxy/ratelimit names its counters under `sluice ratelimit`
// (upstream), else sluice's own way.
type counterNames struct {
	upstream bool
	prefix   string // CACHE_KEY_PREFIX
	domain   string
}

// start begins a key.
func (n counterNames) start(b []byte) []byte {
	if n.upstream {
		return append(append(append(b, n.prefix...), n.domain...), '_')
	}
	return appendPart(append(b, "sluice:rls:"...), n.domain)
}

// entry adds an entry's key and value to a key.
func (n counterNames) entry(b []byte, key, value string) []byte {
	if n.upstream {
		return append(append(append(append(b, key...), '_'), value...), '_')
	}
	return appendPart(appendPart(b, key), value)
}

// end closes a key of the limit of policy.
func (n counterNames) end(b []byte, policy string) []byte {
	if n.upstream {
		return b
	}
	return append(appendPart(b, policy), ':')
}

// match finds the limit of descriptor d in the domain's tree top as
// envoyproxy/ratelimit does, and the key of its bucket, which also names
// its counters on Redis (decide.Policy.WindowKey; the store adds the
// window's start): the domain, every entry's key and value (or the
// wildcard value under share_threshold). Under `sluice ratelimit` the key
// is envoyproxy/ratelimit's counter name (CACHE_KEY_PREFIX, the domain,
// then each key and value, every one followed by '_'), so that the two
// can share one Redis and count together; it merges what that name
// merges (docs/envoy.md). Otherwise each part is length-prefixed and the
// limit's policy closes the key, so that no two lists of entries, and no
// two limits, share a counter. A descriptor that carries its own limit
// (Envoy's descriptor limit override) takes it in a domain that has a
// file, whatever the file says, as there; override reports that.
func match(top *config.RLSDescriptor, d *ratelimitv3.RateLimitDescriptor, names counterNames) (limit *config.RLSLimit, key string, override bool) {
	if top == nil {
		return nil, "", false
	}
	entries := d.GetEntries()
	var kb [160]byte
	if o := d.GetLimit(); o != nil {
		unit := o.GetUnit().String()
		secs := unitSeconds[unit]
		if secs == 0 {
			return nil, "", true // refused by the caller
		}
		k := names.start(kb[:0])
		for _, e := range entries {
			k = names.entry(k, e.GetKey(), e.GetValue())
		}
		policy := config.RLSOverridePolicy(unit)
		return &config.RLSLimit{Policy: policy, Unit: unit, UnitSeconds: secs, RequestsPerUnit: o.GetRequestsPerUnit(), Counted: true}, string(names.end(k, policy)), true
	}
	k := names.start(kb[:0])
	var fb [128]byte
	node := top
	for i, e := range entries {
		final := append(append(append(fb[:0], e.GetKey()...), '_'), e.GetValue()...)
		next := node.Children[string(final)]
		wild := false
		if next == nil {
			next, _ = node.Wildcard(string(final))
			wild = next != nil
		}
		if next == nil {
			next = node.Children[e.GetKey()]
		}
		value := e.GetValue()
		if wild && next.Shared != "" {
			value = next.Shared
		}
		k = names.entry(k, e.GetKey(), value)
		if next != nil && next.Limit != nil && i == len(entries)-1 {
			limit = next.Limit
		}
		if next == nil || len(next.Children) == 0 {
			break
		}
		node = next
	}
	if limit == nil {
		return nil, "", false
	}
	return limit, string(names.end(k, limit.Policy)), false
}

// unitSeconds is the length of each unit of a descriptor limit override.
var unitSeconds = map[string]int64{
	"SECOND": 1, "MINUTE": 60, "HOUR": 3600, "DAY": 86400,
	"WEEK": 7 * 86400, "MONTH": 30 * 86400, "YEAR": 365 * 86400,
}

func appendPart(b []byte, s string) []byte {
	b = strconv.AppendInt(b, int64(len(s)), 10)
	b = append(b, ':')
	return append(b, s...)
}

// hitsAddend is the cost of descriptor d: its own hits_addend when set
// (0 only asks), else the request's, where 0 means 1.
func hitsAddend(req *rlsv3.RateLimitRequest, d *ratelimitv3.RateLimitDescriptor) int64 {
	if h := d.GetHitsAddend(); h != nil {
		return int64(min(h.GetValue(), sluice.MaxBurst+1))
	}
	return max(1, int64(req.GetHitsAddend()))
}

// decide asks the decision core about d (Core.Decide, by name), the one
// place this front door does, and acts on what it says to do. A
// refusal of envoyproxy/ratelimit's fixed window is counted by that same
// call, as its INCRBY counts every hit (the policy's CountDenied, set by
// package config); a cost beyond the limit is a refusal.
func (s *service) decide(ctx context.Context, core *decide.Core, d *decision) {
	if d.limit.Policy == "" { // requests_per_unit: 0
		d.over = d.cost > 0
		return
	}
	v := core.Decide(ctx, d.limit.Policy, decide.Attributes{Identity: d.key}, d.cost)
	d.res, d.rules = v.Result, v.Rules
	d.storeErr = v.Outcome == decide.FailedOpen || v.Outcome == decide.FailedClosed
	switch v.Act {
	case decide.Pass: // a shadow denial, or served open while the store fails
		d.over = v.Outcome == decide.ShadowDenied
	case decide.Deny:
		d.over = true
	case decide.FailClosed:
		d.over, d.failed = true, true
		d.res = sluice.Result{RetryAfter: time.Second}
	case decide.Invalid: // a cost beyond the limit (sluice.ErrCostExceedsBurst)
		d.over = true
	}
}

// statusBlock is a DescriptorStatus with its limit and its duration, to
// allocate them at once.
type statusBlock struct {
	st    rlsv3.RateLimitResponse_DescriptorStatus
	limit rlsv3.RateLimitResponse_RateLimit
	reset durationpb.Duration
}

// oneAnswer is the response of a call of one descriptor, with its list
// of statuses and its status, to allocate them at once.
type oneAnswer struct {
	resp     rlsv3.RateLimitResponse
	statuses [1]*rlsv3.RateLimitResponse_DescriptorStatus
	status   statusBlock
}

// status is the DescriptorStatus of a decided descriptor, written in m
// (a new one when m is nil).
func (s *service) status(d *decision, m *statusBlock) *rlsv3.RateLimitResponse_DescriptorStatus {
	l := d.limit
	if m == nil {
		m = new(statusBlock) // the status, its limit and its duration in one allocation
	}
	m.limit.Name, m.limit.RequestsPerUnit, m.limit.Unit = l.Name, l.RequestsPerUnit, unitOf(l.Unit)
	st := &m.st
	st.Code, st.CurrentLimit = rlsv3.RateLimitResponse_OK, &m.limit
	if !d.over {
		st.LimitRemaining = uint32(min(max(0, d.res.Remaining), math.MaxUint32))
	}
	if d.over && !l.Shadow {
		st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	m.reset.Seconds = s.resetSeconds(d)
	st.DurationUntilReset = &m.reset
	return st
}

// resetSeconds is duration_until_reset in whole seconds: the end of the
// current window for envoyproxy/ratelimit's fixed window (from the
// store's clock when the decision says it, else from ours, as when the
// store failed and this process's own bucket decided), the time until
// the bucket is whole again for sluice's other algorithms, and a second
// when the store failed and on_error refused.
func (s *service) resetSeconds(d *decision) int64 {
	switch {
	case d.failed && d.over:
		return max(1, ceilSeconds(d.res.RetryAfter))
	case d.limit.Policy != "" && !d.failed && !(d.limit.Counted && d.res.DecidedBy == sluice.ByLocal):
		reset := d.res.ResetAfter
		if d.over && !d.limit.Counted { // a window ends when it ends
			reset = max(reset, d.res.RetryAfter)
		}
		if reset > 0 {
			return ceilSeconds(reset)
		}
		if !d.limit.Counted {
			return 0
		}
	}
	u := d.limit.UnitSeconds
	return u - s.now().Unix()%u
}

func ceilSeconds(d time.Duration) int64 {
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return s
}

var units = map[string]rlsv3.RateLimitResponse_RateLimit_Unit{
	"SECOND": rlsv3.RateLimitResponse_RateLimit_SECOND,
	"MINUTE": rlsv3.RateLimitResponse_RateLimit_MINUTE,
	"HOUR":   rlsv3.RateLimitResponse_RateLimit_HOUR,
	"DAY":    rlsv3.RateLimitResponse_RateLimit_DAY,
	"WEEK":   rlsv3.RateLimitResponse_RateLimit_WEEK,
	"MONTH":  rlsv3.RateLimitResponse_RateLimit_MONTH,
	"YEAR":   rlsv3.RateLimitResponse_RateLimit_YEAR,
}

func unitOf(name string) rlsv3.RateLimitResponse_RateLimit_Unit { return units[name] }

// headers are the response_headers_to_add of a call, as the middleware
// would send them: the RateLimit headers of the descriptor that refused
// (the one that makes the client wait longest) or, when none did, of the
// one closest to its limit, and Retry-After when refused. Shadow and
// quota limits add none.
func (s *service) headers(lim Decider, ds []decision, over bool, elapsed time.Duration) []*corev3.HeaderValue {
	best := -1
	for i := range ds {
		d := &ds[i]
		if d.limit == nil || d.limit.Unlimited || d.limit.Shadow || d.limit.Quota {
			continue
		}
		if over != d.over {
			continue
		}
		if best < 0 || (over && wait(d) > wait(&ds[best])) || (!over && d.res.Remaining < ds[best].res.Remaining) {
			best = i
		}
	}
	if best < 0 {
		return nil
	}
	d := &ds[best]
	var h http.Header
	switch {
	case d.limit.Policy != "" && !d.failed && d.res.Limit > 0 && !d.override:
		if fa, ok := lim.(fieldAppender); ok {
			buf := fieldBufs.Get().(*[len(rateLimitFields)]decide.Field)
			fs := fa.AppendFields(buf[:0], d.rules, d.res, elapsed)
			for i := range fs {
				if fs[i].Name == xReset {
					fs[i].Value = strconv.FormatInt(s.resetSeconds(d), 10)
				}
			}
			out := fieldValues(fs)
			*buf = [len(rateLimitFields)]decide.Field{} // holds no value of this call's
			fieldBufs.Put(buf)
			return out
		}
		h = lim.FieldsOf(d.rules, d.res, elapsed)
		if _, ok := h[xReset]; ok {
			// Seconds until the window resets, as envoyproxy/ratelimit's
			// reset header counts, not the Unix time of sluice's proxy.
			h[xReset] = []string{strconv.FormatInt(s.resetSeconds(d), 10)}
		}
	case over:
		h = http.Header{"Retry-After": {strconv.FormatInt(max(1, s.resetSeconds(d)), 10)}}
	}
	return headerValues(h)
}

var xReset = http.CanonicalHeaderKey("X-RateLimit-Reset")

func wait(d *decision) time.Duration { return max(d.res.RetryAfter, d.res.ResetAfter) }

// headerValues turns h into Envoy's header list, in lower case, in the
// order of fieldNames (the names Limiter.Fields sets).
func headerValues(h http.Header) []*corev3.HeaderValue {
	n := 0
	for _, f := range fieldNames {
		n += len(h[f.canonical])
	}
	if n == 0 {
		return nil
	}
	vals, out := headerList(n)
	out = out[:0]
	for _, f := range fieldNames {
		for _, v := range h[f.canonical] {
			hv := &vals[len(out)]
			hv.Key, hv.Value = f.lower, v
			out = append(out, hv)
		}
	}
	return out
}

// headerList returns n header values and a list of n pointers to fill
// with them: for the RateLimit fields of both standards (the default),
// with or without Retry-After, in one allocation of the size two would
// take, else in two.
func headerList(n int) ([]corev3.HeaderValue, []*corev3.HeaderValue) {
	type hv = corev3.HeaderValue
	switch n {
	case 5:
		b := new(struct {
			v [5]hv
			p [5]*hv
		})
		return b.v[:], b.p[:]
	case 6:
		b := new(struct {
			v [6]hv
			p [6]*hv
		})
		return b.v[:], b.p[:]
	}
	return make([]hv, n), make([]*hv, n)
}

// fieldBufs holds the buffers a call's fields are listed in: one on the
// stack would escape to the heap through the fieldAppender interface, a
// 288-byte allocation a call.
var fieldBufs = sync.Pool{New: func() any { return new([len(rateLimitFields)]decide.Field) }}

// fieldAppender is a Decider that lists the fields FieldsOf returns
// without a map, in the order of fieldNames (*httplimit.Limiter is one).
type fieldAppender interface {
	AppendFields(dst []decide.Field, rules *decide.Rules, res sluice.Result, elapsed time.Duration) []decide.Field
}

// fieldValues turns fs, in the order of fieldNames, into Envoy's header
// list, in lower case, as headerValues does.
func fieldValues(fs []decide.Field) []*corev3.HeaderValue {
	if len(fs) == 0 {
		return nil
	}
	vals, out := headerList(len(fs))
	for i, f := range fs {
		vals[i].Key, vals[i].Value = lowerName(f.Name), f.Value
		out[i] = &vals[i]
	}
	return out
}

// lowerName is the lower-case name of one of fieldNames.
func lowerName(canonical string) string {
	for _, f := range fieldNames {
		if f.canonical == canonical {
			return f.lower
		}
	}
	return strings.ToLower(canonical)
}

// rateLimitFields are the header names Limiter.Fields may set, as it sets
// them.
var rateLimitFields = [...]string{"RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset", "RateLimit-Policy", "RateLimit",
	"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "Retry-After"}

// fieldNames are rateLimitFields in canonical form and in lower case.
var fieldNames = func() []struct{ canonical, lower string } {
	var out []struct{ canonical, lower string }
	for _, n := range rateLimitFields {
		out = append(out, struct{ canonical, lower string }{http.CanonicalHeaderKey(n), strings.ToLower(n)})
	}
	return out
}()
