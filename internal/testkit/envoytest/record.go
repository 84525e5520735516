package envoytest

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Client calls ShouldRateLimit on one service over gRPC.
type Client struct {
	Name string // what the test calls the service, in messages
	rls  rlsv3.RateLimitServiceClient
}

// Dial returns a client of the rate limit service at addr, closed when the
// test ends.
func Dial(t testing.TB, name, addr string) *Client {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("envoytest: dial %s at %s: %v", name, addr, err)
	}
	t.Cleanup(func() { conn.Close() })
	return &Client{Name: name, rls: rlsv3.NewRateLimitServiceClient(conn)}
}

// Outcome is every field of one ShouldRateLimit answer: the overall code,
// per descriptor its code, limit, what remains, when the window resets and
// its quota bucket, the response headers to add, the request headers to
// add, the dynamic metadata, the raw body and the answer's quota.
type Outcome struct {
	Overall  string
	Statuses []Status
	// Headers are response_headers_to_add as "name: value", in order;
	// RequestHeaders request_headers_to_add.
	Headers        []string
	RequestHeaders []string
	// Metadata is dynamic_metadata as JSON with sorted names, each
	// descriptor's "limit" (a protobuf text whose spacing varies by
	// design) with its spaces collapsed; "" without it.
	Metadata string
	Body     string // raw_body
	Quota    string // the answer's quota, as text; "" without one
}

// Status is one descriptor's part of an answer.
type Status struct {
	Code      string
	Limit     string // "name: 4/MINUTE"; "" when no limit applied
	Remaining uint32
	// Reset is duration_until_reset rounded up to whole seconds:
	// envoyproxy/ratelimit computes it from the Unix time in whole seconds
	// (unit − now mod unit), the ceiling of the exact time left.
	Reset int64
	Quota string // the descriptor's quota bucket, as text; "" without one
}

func (s Status) String() string {
	q := ""
	if s.Quota != "" {
		q = " quota " + s.Quota
	}
	return fmt.Sprintf("%s[%s] remaining %d reset %ds%s", s.Code, s.Limit, s.Remaining, s.Reset, q)
}

func (o Outcome) String() string {
	parts := make([]string, len(o.Statuses))
	for i, s := range o.Statuses {
		parts[i] = s.String()
	}
	out := o.Overall + " {" + strings.Join(parts, "; ") + "}"
	if len(o.Headers) > 0 {
		out += " headers " + strings.Join(o.Headers, ", ")
	}
	if len(o.RequestHeaders) > 0 {
		out += " request headers " + strings.Join(o.RequestHeaders, ", ")
	}
	if o.Metadata != "" {
		out += " metadata " + o.Metadata
	}
	if o.Body != "" {
		out += fmt.Sprintf(" body %q", o.Body)
	}
	if o.Quota != "" {
		out += " quota " + o.Quota
	}
	return out
}

// Diff returns how got differs from want, field by field; nil when they
// agree. A duration until reset, in a status or in a response header whose
// name ends in "reset", may differ by up to slack seconds: the two answers
// were given at different moments of one window.
func Diff(want, got Outcome, slack int64) []string {
	var out []string
	add := func(field string, w, g any) { out = append(out, fmt.Sprintf("%s: want %v, got %v", field, w, g)) }
	if want.Overall != got.Overall {
		add("overall_code", want.Overall, got.Overall)
	}
	if len(want.Statuses) != len(got.Statuses) {
		add("statuses", len(want.Statuses), len(got.Statuses))
	} else {
		for i, w := range want.Statuses {
			g := got.Statuses[i]
			if d := w.Reset - g.Reset; d < -slack || d > slack {
				add(fmt.Sprintf("statuses[%d].duration_until_reset (slack %ds)", i, slack), w.Reset, g.Reset)
			}
			w.Reset, g.Reset = 0, 0
			if w != g {
				add(fmt.Sprintf("statuses[%d]", i), w, g)
			}
		}
	}
	if !headersMatch(want.Headers, got.Headers, slack) {
		add("response_headers_to_add", want.Headers, got.Headers)
	}
	if !slices.Equal(want.RequestHeaders, got.RequestHeaders) {
		add("request_headers_to_add", want.RequestHeaders, got.RequestHeaders)
	}
	if want.Metadata != got.Metadata {
		add("dynamic_metadata", want.Metadata, got.Metadata)
	}
	if want.Body != got.Body {
		add("raw_body", want.Body, got.Body)
	}
	if want.Quota != got.Quota {
		add("quota", want.Quota, got.Quota)
	}
	return out
}

func headersMatch(want, got []string, slack int64) bool {
	if len(want) != len(got) {
		return false
	}
	for i := range want {
		wn, wv, _ := strings.Cut(want[i], ": ")
		gn, gv, _ := strings.Cut(got[i], ": ")
		if wn != gn {
			return false
		}
		if strings.HasSuffix(strings.ToLower(wn), "reset") {
			w, err1 := strconv.ParseInt(wv, 10, 64)
			g, err2 := strconv.ParseInt(gv, 10, 64)
			if err1 == nil && err2 == nil && w-g >= -slack && w-g <= slack {
				continue
			}
		}
		if wv != gv {
			return false
		}
	}
	return true
}

// Record sends one request and returns what its answer decides.
func (c *Client) Record(ctx context.Context, req *rlsv3.RateLimitRequest) (Outcome, error) {
	resp, err := c.rls.ShouldRateLimit(ctx, req)
	if err != nil {
		return Outcome{}, fmt.Errorf("%s: ShouldRateLimit: %w", c.Name, err)
	}
	return outcomeOf(resp), nil
}

func outcomeOf(resp *rlsv3.RateLimitResponse) Outcome {
	o := Outcome{Overall: resp.GetOverallCode().String(), Body: string(resp.GetRawBody())}
	for _, st := range resp.GetStatuses() {
		s := Status{Code: st.GetCode().String(), Remaining: st.GetLimitRemaining()}
		if l := st.GetCurrentLimit(); l != nil {
			s.Limit = fmt.Sprintf("%s: %d/%s", l.GetName(), l.GetRequestsPerUnit(), l.GetUnit())
		}
		if d := st.GetDurationUntilReset(); d != nil {
			s.Reset = d.GetSeconds()
			if d.GetNanos() > 0 {
				s.Reset++
			}
		}
		if q := st.GetQuota(); q != nil {
			s.Quota = oneLine(q)
		}
		o.Statuses = append(o.Statuses, s)
	}
	for _, h := range resp.GetResponseHeadersToAdd() {
		o.Headers = append(o.Headers, h.GetKey()+": "+h.GetValue())
	}
	for _, h := range resp.GetRequestHeadersToAdd() {
		o.RequestHeaders = append(o.RequestHeaders, h.GetKey()+": "+h.GetValue())
	}
	if m := resp.GetDynamicMetadata(); m != nil {
		v := m.AsMap()
		if ds, ok := v["descriptors"].([]any); ok {
			for _, d := range ds {
				if d, ok := d.(map[string]any); ok {
					if l, ok := d["limit"].(string); ok {
						d["limit"] = strings.Join(strings.Fields(l), " ")
					}
				}
			}
		}
		b, _ := json.Marshal(v) // sorted names
		o.Metadata = string(b)
	}
	if q := resp.GetQuota(); q != nil {
		o.Quota = oneLine(q)
	}
	return o
}

// oneLine renders a message as text on one line, its spacing collapsed.
func oneLine(m proto.Message) string {
	return strings.Join(strings.Fields(prototext.Format(m)), " ")
}

// Descriptor returns a descriptor of the key/value pairs given in order:
// Descriptor("source_cluster", "proxy", "destination_cluster", "mock").
func Descriptor(pairs ...string) *commonv3.RateLimitDescriptor {
	if len(pairs)%2 != 0 {
		panic("envoytest.Descriptor: pairs of key and value expected")
	}
	d := &commonv3.RateLimitDescriptor{}
	for i := 0; i < len(pairs); i += 2 {
		d.Entries = append(d.Entries, &commonv3.RateLimitDescriptor_Entry{Key: pairs[i], Value: pairs[i+1]})
	}
	return d
}

// WithHits returns d with its own hits_addend, which takes precedence over
// the request's (0 checks without counting).
func WithHits(d *commonv3.RateLimitDescriptor, hits uint64) *commonv3.RateLimitDescriptor {
	d.HitsAddend = wrapperspb.UInt64(hits)
	return d
}

// WithLimit returns d with a limit of its own (Envoy's descriptor limit
// override) of n requests per unit (SECOND, MINUTE, …).
func WithLimit(d *commonv3.RateLimitDescriptor, n uint32, unit string) *commonv3.RateLimitDescriptor {
	d.Limit = &commonv3.RateLimitDescriptor_RateLimitOverride{
		RequestsPerUnit: n,
		Unit:            typev3.RateLimitUnit(typev3.RateLimitUnit_value[unit]),
	}
	return d
}

// Request returns a request of the domain with the descriptors given and
// the request-wide hits_addend (0 counts as 1).
func Request(domain string, hits uint32, descs ...*commonv3.RateLimitDescriptor) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: domain, HitsAddend: hits, Descriptors: descs}
}

// Run sends the requests in order, each to every client in turn before the
// next request, and returns each client's outcomes and the wall-clock span
// from before the first call to after the last answer.
func Run(ctx context.Context, clients []*Client, reqs []*rlsv3.RateLimitRequest) (outcomes [][]Outcome, start, end time.Time, err error) {
	outcomes = make([][]Outcome, len(clients))
	start = time.Now()
	for _, req := range reqs {
		for i, c := range clients {
			o, err := c.Record(ctx, req)
			if err != nil {
				return nil, start, time.Now(), err
			}
			outcomes[i] = append(outcomes[i], o)
		}
	}
	return outcomes, start, time.Now(), nil
}

// unitSeconds is the length of each unit's fixed window.
var unitSeconds = map[string]int64{"SECOND": 1, "MINUTE": 60, "HOUR": 3600, "DAY": 86400, "WEEK": 604800, "MONTH": 2592000, "YEAR": 31536000}

// Straddles reports whether the span from start to end crossed the boundary
// of a fixed window of any unit a limit in the outcomes has, so that the
// services may have counted in different windows: such a run says nothing
// and is run again.
func Straddles(start, end time.Time, outcomes ...[]Outcome) bool {
	for _, os := range outcomes {
		for _, o := range os {
			for _, s := range o.Statuses {
				_, unit, ok := strings.Cut(s.Limit, "/")
				if !ok {
					continue
				}
				if n := unitSeconds[unit]; n > 0 && start.Unix()/n != end.Unix()/n {
					return true
				}
			}
		}
	}
	return false
}

// WaitWindowStart sleeps until just after the next second boundary, and
// past the next minute boundary when fewer than margin remain before it,
// so a short sequence fits in one second and one minute.
func WaitWindowStart(margin time.Duration) {
	now := time.Now()
	next := now.Truncate(time.Second).Add(time.Second)
	if minute := now.Truncate(time.Minute).Add(time.Minute); minute.Sub(now) < margin {
		next = minute
	}
	time.Sleep(time.Until(next) + 5*time.Millisecond)
}

// AsMain drops from an answer of r the dynamic metadata that upstream's
// main no longer sends and sluice does not (quotaModeEnabled and
// quotaModeViolations, sent by the January 2026 commit); other releases'
// answers are returned as they are.
func (r Release) AsMain(o Outcome) Outcome {
	if r.Version != January.Version || o.Metadata == "" {
		return o
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(o.Metadata), &m); err != nil {
		return o
	}
	delete(m, "quotaModeEnabled")
	delete(m, "quotaModeViolations")
	b, _ := json.Marshal(m)
	o.Metadata = string(b)
	return o
}
