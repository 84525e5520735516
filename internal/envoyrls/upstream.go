package envoyrls

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/rlsstats"
)

// UpstreamServiceName is the name envoyproxy/ratelimit reports its health
// under, which probes written for it ask for.
const UpstreamServiceName = "ratelimit"

// asUpstream applies what envoyproxy/ratelimit's environment asks of an
// answer that the envoy_rls settings do not say (`sluice ratelimit`):
// SHADOW_MODE turns an OVER_LIMIT overall code into OK (the statuses keep
// theirs). Nothing without up.
func asUpstream(up *config.Upstream, resp *rlsv3.RateLimitResponse) {
	if up != nil && up.ShadowMode {
		resp.OverallCode = rlsv3.RateLimitResponse_OK
	}
}

// maxJSONBytes bounds a /json request body.
const maxJSONBytes = 64 << 10

// JSONHandler serves envoyproxy/ratelimit's POST /json: a
// RateLimitRequest in protobuf's JSON form, decided as the gRPC service
// decides it, answered in the same form: 200 (OK), 429 (OVER_LIMIT), 400
// for a request that does not read, that is over the listener's caps
// (envoy_rls.max_descriptors, max_entries) or that the service refuses.
// stats, when not nil, counts the calls as the gRPC service's; tracer,
// when not nil, traces each in a POST /json span (tracing.go).
func JSONHandler(source Source, log *slog.Logger, stats *rlsstats.Stats, tracer trace.Tracer) http.Handler {
	svc := &service{source: source, log: log, now: time.Now, stats: stats, tracer: tracer}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxJSONBytes))
		var req rlsv3.RateLimitRequest
		if err == nil {
			err = protojson.Unmarshal(body, &req)
		}
		if e, _ := source(); err == nil && e != nil {
			// The gRPC listener's caps hold here too (its guard).
			maxD, maxE := e.MaxDescriptors, e.MaxEntries
			if maxD <= 0 || maxE <= 0 { // a configuration that did not go through validation
				maxD, maxE = config.DefaultRLSMaxDescriptors, config.DefaultRLSMaxEntries
			}
			_, err = overCaps(&req, maxD, maxE)
		}
		var resp *rlsv3.RateLimitResponse
		if err == nil {
			if tracer != nil {
				resp, err = svc.traced(r.Context(), &req, spanJSON, r.Header)
			} else {
				resp, err = svc.shouldRateLimit(r.Context(), &req)
			}
		}
		if err != nil {
			http.Error(w, http.StatusText(http.StatusBadRequest), http.StatusBadRequest)
			return
		}
		out, err := protojson.Marshal(resp)
		if err != nil {
			http.Error(w, http.StatusText(http.StatusInternalServerError), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
			w.WriteHeader(http.StatusTooManyRequests)
		}
		_, _ = w.Write(out)
	})
}

// Dump writes the limits of rls as envoyproxy/ratelimit's /rlconfig does,
// one a line: the full key (domain, then each level's key_value, joined
// by dots), the unit, requests_per_unit, shadow_mode and quota_mode. The
// lines are sorted (there, in map order).
func Dump(w io.Writer, rls *config.EnvoyRLS) {
	var lines []string
	var walk func(prefix string, d *config.RLSDescriptor)
	walk = func(prefix string, d *config.RLSDescriptor) {
		if l := d.Limit; l != nil {
			unit := l.Unit
			if unit == "" {
				unit = "UNKNOWN"
			}
			lines = append(lines, fmt.Sprintf("%s: unit=%s requests_per_unit=%d, shadow_mode: %t, quota_mode: %t\n",
				prefix, unit, l.RequestsPerUnit, l.Shadow, l.Quota))
		}
		for key, child := range d.Children {
			walk(prefix+"."+key, child)
		}
	}
	for domain, top := range rls.Domains() {
		walk(domain, top)
	}
	slices.Sort(lines)
	_, _ = io.WriteString(w, strings.Join(lines, ""))
}
