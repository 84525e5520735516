package envoyrls_test

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// rejections returns sluice_server_rejections_total of the envoy_rls
// listener for reason, from the admin listener's /metrics.
func (s *served) rejections(t testing.TB, reason string) int {
	t.Helper()
	return s.metric(t, `sluice_server_rejections_total{listener="envoy_rls",reason="`+reason+`"}`)
}

// metric returns the value of series (a name and its labels) from the
// admin listener's /metrics; 0 where it has none.
func (s *served) metric(t testing.TB, series string) int {
	t.Helper()
	_, admin := s.g.Addrs()
	resp, err := http.Get("http://" + admin.String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	metrics, _ := io.ReadAll(resp.Body)
	_, v, found := strings.Cut(string(metrics), "\n"+series+" ")
	if !found {
		return 0
	}
	v, _, _ = strings.Cut(v, "\n")
	n, err := strconv.Atoi(v)
	if err != nil {
		t.Fatalf("%s %q", series, v)
	}
	return n
}

// envoy_rls.max_descriptors and max_entries: a call beyond either gets
// INVALID_ARGUMENT naming the option, and is counted; a call at both
// bounds is decided.
func TestCallCaps(t *testing.T) {
	s := serveRLS(t, "max_descriptors: 2, max_entries: 3", "", map[string]string{"flood.yaml": floodDomain})
	call := func(descs ...*ratelimitv3.RateLimitDescriptor) error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err := s.rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "flood", Descriptors: descs})
		return err
	}
	three := desc("tenant", "a", "b", "c", "d", "e")
	if err := call(three, three); err != nil {
		t.Fatalf("2 descriptors of 3 entries: %v", err)
	}
	for _, tc := range []struct {
		descs  []*ratelimitv3.RateLimitDescriptor
		want   string
		reason string
	}{
		{[]*ratelimitv3.RateLimitDescriptor{three, three, three}, "3 descriptors; want at most 2 (envoy_rls.max_descriptors)", "descriptors"},
		{[]*ratelimitv3.RateLimitDescriptor{three, desc("tenant", "a", "b", "c", "d", "e", "f", "g")}, "a descriptor of 4 entries; want at most 3 (envoy_rls.max_entries)", "entries"},
	} {
		err := call(tc.descs...)
		if status.Code(err) != codes.InvalidArgument || status.Convert(err).Message() != tc.want {
			t.Errorf("%v; want INVALID_ARGUMENT %q", err, tc.want)
		}
		if n := s.rejections(t, tc.reason); n != 1 {
			t.Errorf("rejections %s: %d, want 1", tc.reason, n)
		}
	}
}

// twoDomains serves domains a and b, two slots each (domain_wait 50ms),
// on a Redis of its own without coalescing (timeout 5s, on_error open),
// and returns the Redis, the service and a call of a domain for a user.
func twoDomains(t *testing.T) (*redistest.Server, *served, func(domain, user string) error) {
	t.Helper()
	srv := redistest.Start(t)
	s := serveRLS(t, "max_in_flight_per_domain: 2, domain_wait: 50ms",
		"store: {type: redis, on_error: open, redis: {url: \""+srv.URL()+"\", timeout: 5s, coalesce: false}}\n",
		map[string]string{"a.yaml": "domain: a\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 1000}\n",
			"b.yaml": "domain: b\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 1000}\n"})
	call := func(domain, user string) error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, err := s.rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("user", user)}})
		return err
	}
	return srv, s, call
}

// envoy_rls.max_in_flight_per_domain: while Redis is paused and domain b
// is called too, two calls of domain a hold both of a's slots, waiting for
// the store (timeout 5s); a third call of a is refused with
// RESOURCE_EXHAUSTED once domain_wait (50ms) passed, before the store
// answers the others, and a call of domain b, which has slots of its own,
// is decided (on_error: open). Before the bound the third call waited for
// the store like the others.
func TestDomainSlots(t *testing.T) {
	srv, s, call := twoDomains(t)
	if err := call("a", "warm"); err != nil {
		t.Fatal(err)
	}
	// b is called all along, with a descriptor of no limit (answered
	// without the store): a is not alone. The calls of a come once one
	// of b's was answered.
	keepCalling(t, s, "b")
	srv.Pause()
	defer srv.Resume()
	// Three calls of a at once: two take its slots and wait for the
	// store; the third is answered first, refused.
	results := make(chan error, 3)
	for _, u := range []string{"u1", "u2", "u3"} {
		go func() {
			err := call("a", u)
			results <- err
		}()
	}
	if err := <-results; status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("the first of 3 calls of domain a (2 slots) to be answered: %v; want RESOURCE_EXHAUSTED", err)
	}
	if n := s.rejections(t, "in_flight_per_domain"); n != 1 {
		t.Errorf("rejections in_flight_per_domain: %d, want 1", n)
	}
	if err := call("b", "u1"); err != nil {
		t.Errorf("domain b while a's slots are held: %v; want its answer", err)
	}
	srv.Resume()
	for range 2 {
		if err := <-results; err != nil {
			t.Errorf("a call that held a slot: %v", err)
		}
	}
}

// keepCalling calls domain with a descriptor that no limit names, one
// call at a time, until t ends, so that domain is called within every
// second; it returns once the first call was answered.
func keepCalling(t *testing.T, s *served, domain string) {
	t.Helper()
	stop, stopped, first := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		defer close(stopped)
		for i := 0; ; i++ {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			_, err := s.rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("no limit", "x")}})
			cancel()
			if i == 0 {
				first <- err
			} else if err != nil {
				t.Errorf("a call of %s: %v", domain, err)
			}
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() {
		close(stop)
		<-stopped
	})
	if err := <-first; err != nil {
		t.Fatalf("the first call of %s: %v", domain, err)
	}
}

// A domain alone (no other domain called within the last second) is not
// held to max_in_flight_per_domain: while Redis is paused, three calls of
// a, which has two slots, all wait for the store, and none is refused
// after domain_wait (50ms); all three are decided once Redis answers.
// Held to its slots, the third was refused. Once another domain is
// called, a's calls are held to its slots again (TestDomainSlots).
func TestDomainAloneIsNotHeld(t *testing.T) {
	srv, s, call := twoDomains(t)
	// a alone, for more than a second: b's warm-up call is long past.
	if err := call("b", "warm"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond)
	if err := call("a", "warm"); err != nil {
		t.Fatal(err)
	}
	srv.Pause()
	defer srv.Resume()
	results := make(chan error, 3)
	for _, u := range []string{"u1", "u2", "u3"} {
		go func() { results <- call("a", u) }()
	}
	// Held to its slots, the third call was refused 50ms after it came;
	// ten times that without an answer is enough to see it was not (on a
	// machine so slow that the calls had not come yet, this proves
	// nothing, and fails nothing).
	select {
	case err := <-results:
		t.Fatalf("a call of a, alone, answered while Redis is paused: %v; want it waiting for the store", err)
	case <-time.After(500 * time.Millisecond):
	}
	if n := s.rejections(t, "in_flight_per_domain"); n != 0 {
		t.Errorf("rejections in_flight_per_domain: %d, want 0", n)
	}
	srv.Resume()
	for range 3 {
		if err := <-results; err != nil {
			t.Errorf("a call of a, alone: %v; want its answer", err)
		}
	}
}
