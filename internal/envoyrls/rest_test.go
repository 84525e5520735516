package envoyrls

import (
	"context"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/internal/testkit/slowstore"
	"github.com/sluicehq/sluice/memstore"
)

// A domain's calls rest in their slot (domainSlots.rest) only while the
// domain is beyond its share and another domain was called within
// otherDomainWithin: restFactor times the call's time, at most the wait;
// never without a factor. TestDomainFlood (internal/e2e) shows what it is
// for: it fails with envoy_rls.busy_domain_rest: -1 (no pacing).
func TestBusyDomainRest(t *testing.T) {
	d := &domainSlots{max: 1, wait: time.Second, restFactor: 4, n: make(map[string]*domain)}
	ctx := context.Background()
	a := d.take(t, ctx, "a")
	if got := d.rest("a", a, 10*time.Millisecond); got != 0 {
		t.Errorf("a within its share, alone: rest %v; want 0", got)
	}
	// A second call of a, alone, goes on without a slot: a is beyond its
	// share.
	second, held := d.acquire(ctx, "a")
	if second != a || held {
		t.Fatalf("a second call of a, alone: entry %p, holding a slot %v; want a's entry %p, no slot", second, held, a)
	}
	if got := d.rest("a", a, 10*time.Millisecond); got != 0 {
		t.Errorf("a beyond its share, no other domain called: rest %v; want 0", got)
	}
	d.release("b", d.take(t, ctx, "b"), true)
	if got := d.rest("a", a, 10*time.Millisecond); got != 40*time.Millisecond {
		t.Errorf("a beyond its share, b just called: rest %v; want 4 × 10ms", got)
	}
	if got := d.rest("a", a, 400*time.Millisecond); got != time.Second {
		t.Errorf("a call of 400ms: rest %v; want the wait, 1s", got)
	}
	d.mu.Lock()
	d.seen("a", time.Now()) // a called again: b is now second in recent
	d.mu.Unlock()
	if got := d.rest("a", a, 10*time.Millisecond); got != 40*time.Millisecond {
		t.Errorf("a called after b: rest %v; want 40ms", got)
	}
	d.mu.Lock()
	d.recent[1].at = time.Now().Add(-2 * otherDomainWithin)
	d.mu.Unlock()
	if got := d.rest("a", a, 10*time.Millisecond); got != 0 {
		t.Errorf("b last called %v ago: rest %v; want 0", 2*otherDomainWithin, got)
	}
	off := &domainSlots{max: 1, wait: time.Second, n: make(map[string]*domain)}
	x := off.take(t, ctx, "x")
	x.users.Add(1) // as if a second call of x waited
	off.release("y", off.take(t, ctx, "y"), true)
	if got := off.rest("x", x, 10*time.Millisecond); got != 0 {
		t.Errorf("no rest factor: rest %v; want 0", got)
	}
	d.release("a", second, false)
	d.release("a", a, true)
	if n := a.users.Load(); n != 0 || len(a.slots) != 0 {
		t.Errorf("a once its calls ended: %d users, %d slots held; want none", n, len(a.slots))
	}
}

// TestBusyDomainRestLeavesOutTheStore: a paced call rests for its own
// time, what it took less what its decisions waited on the store: a
// domain whose calls wait on Redis keeps no CPU busy while it waits, and
// is not held back for it. Counting the store's 100ms, the call would
// rest 64 × 100ms; its own time is a small part of that.
func TestBusyDomainRestLeavesOutTheStore(t *testing.T) {
	const storeWait, factor = 100 * time.Millisecond, 64
	paced := func(storeWait time.Duration, waits bool) (took, own time.Duration) {
		t.Helper()
		core, err := decide.New(decide.Config{
			Store:      slowstore.Store{Store: memstore.New(memstore.Options{SweepInterval: -1}), Wait: storeWait},
			Policies:   []decide.Policy{{Name: "p", Cost: 1, Authenticated: []sluice.Rule{{Rate: 1, Burst: 100}}}},
			StoreWaits: waits,
		})
		if err != nil {
			t.Fatal(err)
		}
		return pacedCall(t, core, factor)
	}
	took, own := paced(storeWait, true)
	// Counted with the store, the rest alone would be 6.4s. Its own time
	// is the handler's setup and the decision's CPU: on a busy machine a
	// few milliseconds, resting 64 times that.
	if took >= factor*storeWait/2 {
		t.Errorf("the call took %v with a store wait of %v (setup %v): it rested for the store's time too; want under %v", took, storeWait, own, factor*storeWait/2)
	}
	t.Logf("took %v: the store's %v, setup %v", took, storeWait, own)
	// A store that does not wait (the memory store's calls are CPU): its
	// time is the call's own, and rests 64 times over.
	const cpu = 10 * time.Millisecond
	if took, _ := paced(cpu, false); took < (factor+1)*cpu {
		t.Errorf("a call whose store's %v is its own work took %v; want at least %v, resting %d times it", cpu, took, (factor+1)*cpu, factor)
	}

	// A stream (tap's context) carries the StoreTime itself.
	st := &stream{Context: context.Background()}
	if got := st.Value(decide.StoreTimeKey{}); got != &st.storeTime {
		t.Errorf("a stream's StoreTime: %v; want its own", got)
	}
}

// pacedCall makes one call of domain a through bound while a is beyond
// its share and b is called, deciding with core; it returns how long the
// call took and how long the handler's setup took.
func pacedCall(t *testing.T, core *decide.Core, factor int) (took, own time.Duration) {
	t.Helper()
	p := core.Lookup("p")
	s := &Server{opts: Options{MaxDescriptors: 64, MaxEntries: 32, Rejected: func(string) {}},
		domains: domainSlots{max: 1, wait: time.Hour, restFactor: factor, n: make(map[string]*domain)}}
	req := &rlsv3.RateLimitRequest{Domain: "a", Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}}
	handler := func(ctx context.Context, _ any) (any, error) {
		start := time.Now()
		// As if a second call of a waited for its slot (a beyond its
		// share), and b were called: a is paced.
		s.domains.mu.Lock()
		s.domains.n["a"].users.Add(1)
		s.domains.mu.Unlock()
		b, held := s.domains.acquire(ctx, "b")
		s.domains.release("b", b, held)
		own = time.Since(start)
		v := core.DecideFor(ctx, p, &decide.Subject{Caller: decide.Caller{ID: "k"}, Authenticated: true, Cost: 1})
		return v, v.Err
	}
	start := time.Now()
	if _, err := s.bound(context.Background(), req, nil, handler); err != nil {
		t.Fatal(err)
	}
	took = time.Since(start)
	s.domains.mu.Lock()
	users := s.domains.n["a"]
	s.domains.mu.Unlock()
	if users == nil || users.users.Load() != 1 {
		t.Fatalf("domain a after the call: %+v; want the one user the test added", users)
	}
	return took, own
}
