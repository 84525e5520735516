package envoyrls

import (
	"fmt"
	"math"
	"strconv"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluicehq/sluice/config"
)

// envoyproxyHeaders are the response headers envoyproxy/ratelimit adds
// with LIMIT_RESPONSE_HEADERS_ENABLED: of the descriptor that refused (the
// last one, when several did; a limit in quota mode, or every limit under
// QUOTA_MODE, does not count as refusing) or else of the one with the
// least remaining,
// among those with a current limit, its requests_per_unit, its
// limit_remaining and the whole seconds until its unit's window ends,
// under the names configured.
func (s *service) envoyproxyHeaders(rls *config.EnvoyRLS, ds []decision, sts []*rlsv3.RateLimitResponse_DescriptorStatus, quotaMode bool) []*corev3.HeaderValue {
	var best *rlsv3.RateLimitResponse_DescriptorStatus
	bestUnit := int64(0)
	least := uint32(math.MaxUint32)
	for i, st := range sts {
		if st.GetCurrentLimit() == nil {
			continue
		}
		l := ds[i].limit
		if st.GetLimitRemaining() < least {
			best, bestUnit, least = st, l.UnitSeconds, st.GetLimitRemaining()
		}
		if st.GetCode() == rlsv3.RateLimitResponse_OVER_LIMIT && !l.Quota && !quotaMode {
			best, bestUnit, least = st, l.UnitSeconds, 0
		}
	}
	if best == nil {
		return nil
	}
	return []*corev3.HeaderValue{
		{Key: rls.LimitHeader, Value: strconv.FormatUint(uint64(best.GetCurrentLimit().GetRequestsPerUnit()), 10)},
		{Key: rls.RemainingHeader, Value: strconv.FormatUint(uint64(best.GetLimitRemaining()), 10)},
		{Key: rls.ResetHeader, Value: strconv.FormatInt(bestUnit-s.now().Unix()%bestUnit, 10)},
	}
}

// dynamicMetadata is the dynamic_metadata of an answer as
// envoyproxy/ratelimit's RESPONSE_DYNAMIC_METADATA sets it: the domain,
// each descriptor (its entries as "key=value", its limit override and
// hits_addend when set), the request's hits_addend when not 0, and under
// "metadata" the metadata: of every limit that passed, merged (the first
// value of a name wins; mappings merge).
func dynamicMetadata(req *rlsv3.RateLimitRequest, ds []decision, sts []*rlsv3.RateLimitResponse_DescriptorStatus) *structpb.Struct {
	descs := make([]*structpb.Value, 0, len(req.GetDescriptors()))
	for _, d := range req.GetDescriptors() {
		entries := make([]*structpb.Value, len(d.GetEntries()))
		for i, e := range d.GetEntries() {
			entries[i] = structpb.NewStringValue(e.GetKey() + "=" + e.GetValue())
		}
		f := map[string]*structpb.Value{"entries": structpb.NewListValue(&structpb.ListValue{Values: entries})}
		if o := d.GetLimit(); o != nil {
			f["limit"] = structpb.NewStringValue(fmt.Sprint(o))
		}
		if h := d.GetHitsAddend(); h != nil {
			f["hitsAddend"] = structpb.NewNumberValue(float64(h.GetValue()))
		}
		descs = append(descs, structpb.NewStructValue(&structpb.Struct{Fields: f}))
	}
	fields := map[string]*structpb.Value{
		"domain":      structpb.NewStringValue(req.GetDomain()),
		"descriptors": structpb.NewListValue(&structpb.ListValue{Values: descs}),
	}
	if h := req.GetHitsAddend(); h != 0 {
		fields["hitsAddend"] = structpb.NewNumberValue(float64(h))
	}
	var merged *structpb.Struct
	for i := range ds {
		l := ds[i].limit
		if l == nil || l.Unlimited || l.Metadata == nil || sts[i].GetCode() != rlsv3.RateLimitResponse_OK {
			continue
		}
		if merged == nil {
			merged = &structpb.Struct{Fields: map[string]*structpb.Value{}}
		}
		mergeStruct(merged, l.Metadata)
	}
	if len(merged.GetFields()) > 0 {
		fields["metadata"] = structpb.NewStructValue(merged)
	}
	return &structpb.Struct{Fields: fields}
}

// mergeStruct adds src's fields to dst: a name dst lacks takes a copy of
// src's value, two mappings of one name merge, and otherwise dst's value
// stays. src, the configuration's, is never changed.
func mergeStruct(dst, src *structpb.Struct) {
	for k, v := range src.GetFields() {
		have, ok := dst.Fields[k]
		switch {
		case !ok:
			dst.Fields[k] = proto.Clone(v).(*structpb.Value)
		case have.GetStructValue() != nil && v.GetStructValue() != nil:
			mergeStruct(have.GetStructValue(), v.GetStructValue())
		}
	}
}
