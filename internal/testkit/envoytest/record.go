package envoytest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
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

// Outcome is what one ShouldRateLimit answer decides: the overall code and,
// per descriptor, its code, limit, what remains and when the window resets.
type Outcome struct {
	Overall  string
	Statuses []Status
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
}

func (s Status) String() string {
	return fmt.Sprintf("%s[%s] remaining %d reset %ds", s.Code, s.Limit, s.Remaining, s.Reset)
}

func (o Outcome) String() string {
	parts := make([]string, len(o.Statuses))
	for i, s := range o.Statuses {
		parts[i] = s.String()
	}
	return o.Overall + " {" + strings.Join(parts, "; ") + "}"
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
	o := Outcome{Overall: resp.GetOverallCode().String()}
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
		o.Statuses = append(o.Statuses, s)
	}
	return o
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
