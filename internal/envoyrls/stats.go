package envoyrls

import (
	"strings"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/rlsstats"
)

// record counts a call's decisions in envoyproxy/ratelimit's statsd
// stats (USE_STATSD, `sluice ratelimit`): per descriptor that a limit
// decided, under the key envoyproxy/ratelimit names it by; and the call's
// store failure and global shadow mode. Unlimited, replaced and
// unmatched descriptors count nothing, as there.
func (s *service) record(rls *config.EnvoyRLS, req *rlsv3.RateLimitRequest, ds []decision, resp *rlsv3.RateLimitResponse) {
	st := s.stats
	top := rls.Domains()[req.GetDomain()]
	if top == nil {
		for range ds {
			st.DomainNotFound(req.GetDomain())
		}
	}
	storeFailed := false
	for i := range ds {
		d := &ds[i]
		if d.limit == nil || d.limit.Unlimited {
			continue
		}
		var l *rlsstats.Limit
		switch {
		case d.override:
			l = st.ForKey(overrideStatsKey(req.GetDomain(), req.GetDescriptors()[i]))
		case d.limit.DynamicStats:
			l = st.ForKey(dynamicStatsKey(req.GetDomain(), top, d.limit, req.GetDescriptors()[i]))
		default:
			l = st.ForLimit(rls, d.limit)
		}
		if d.storeErr {
			storeFailed = true
			st.Hits(l, d.hits)
			continue
		}
		n := int64(d.limit.RequestsPerUnit)
		// The call's hits, those STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT
		// spared too, as there; after is the window's count.
		st.Record(l, d.hits, d.limit.RequestsPerUnit, n-min(n, max(0, d.res.Remaining)), d.over, d.limit.Shadow)
	}
	if storeFailed {
		st.RedisError()
	}
	if rls.Upstream != nil && rls.Upstream.ShadowMode && resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT {
		st.GlobalShadowMode()
	}
}

// overrideStatsKey is the stats key of a descriptor limit override, as
// envoyproxy/ratelimit makes it: the domain and each entry's key, or
// key_value, joined by dots.
func overrideStatsKey(domain string, d *ratelimitv3.RateLimitDescriptor) string {
	var b strings.Builder
	b.WriteString(domain)
	for _, e := range d.GetEntries() {
		b.WriteByte('.')
		b.WriteString(e.GetKey())
		if e.GetValue() != "" {
			b.WriteByte('_')
			b.WriteString(e.GetValue())
		}
	}
	return b.String()
}

// dynamicStatsKey is the stats key of l, whose key is made from the
// call's values, as envoyproxy/ratelimit's GetLimit makes it: under
// detailed_metric every entry's key_value (the wildcard value of one
// matched under share_threshold, and then key alone for an empty value);
// otherwise the file's key, where a descriptor with value_to_metric
// matched by its key alone or by a wildcard (without share_threshold)
// takes the call's value.
func dynamicStatsKey(domain string, top *config.RLSDescriptor, l *config.RLSLimit, d *ratelimitv3.RateLimitDescriptor) string {
	entries := d.GetEntries()
	var b strings.Builder
	b.WriteString(domain)
	shared := make([]string, len(entries)) // share_threshold's wildcard value, by entry
	anyShared := false
	var levels []string // the value_to_metric key's parts
	node := top
	for i, e := range entries {
		final := e.GetKey() + "_" + e.GetValue()
		var next *config.RLSDescriptor
		wildKey := ""
		if node != nil {
			next = node.Children[final]
			if next == nil {
				next, wildKey = node.Wildcard(final)
			}
		}
		exact := next != nil
		if next == nil && node != nil {
			next = node.Children[e.GetKey()]
		}
		part := e.GetKey()
		switch {
		case next == nil:
		case wildKey != "" && next.Shared != "":
			shared[i], anyShared = next.Shared, true
			part += "_" + next.Shared
		case wildKey != "" && next.ValueToMetric:
			part += "_" + e.GetValue()
		case wildKey != "":
			part += "_" + strings.TrimPrefix(wildKey, e.GetKey()+"_")
		case exact, next.ValueToMetric:
			if e.GetValue() != "" {
				part += "_" + e.GetValue()
			}
		}
		levels = append(levels, part)
		if next == nil || len(next.Children) == 0 {
			break
		}
		node = next
	}
	for i, e := range entries {
		if !l.DetailedMetric {
			break
		}
		b.WriteByte('.')
		switch {
		case !anyShared:
			b.WriteString(e.GetKey() + "_" + e.GetValue())
		case shared[i] != "":
			b.WriteString(e.GetKey() + "_" + shared[i])
		case e.GetValue() != "":
			b.WriteString(e.GetKey() + "_" + e.GetValue())
		default:
			b.WriteString(e.GetKey())
		}
	}
	if !l.DetailedMetric {
		for _, p := range levels {
			b.WriteByte('.')
			b.WriteString(p)
		}
	}
	return b.String()
}
