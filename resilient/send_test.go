package resilient_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/coalesce"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/resilient"
)

// sender is a store that sends its checks through a coalescing queue
// (coalesce.Sender), as the fixed window's counters on Redis do: a
// flusher decides each batch in a memory store once the test opens the
// gate (a closed gate is a Redis that answers nothing). Its Check counts
// the calls that went the worker's way.
type sender struct {
	mem     *memstore.Store
	queue   *coalesce.Batcher[sluice.Request]
	gate    chan struct{}
	entered chan struct{} // a batch is on its way
	checks  atomic.Int64  // calls of Check
	sent    atomic.Int64  // checks decided by a batch
}

func newSender(t *testing.T, maxInFlight int) *sender {
	s := &sender{mem: memstore.New(memstore.Options{}), gate: make(chan struct{}), entered: make(chan struct{}, 64)}
	s.queue = coalesce.New(coalesce.Options{MaxInFlight: maxInFlight}, errors.New("closed"), s.send)
	t.Cleanup(func() {
		s.open()
		s.queue.Close()
	})
	return s
}

var gateOnce sync.Map

func (s *sender) open() {
	if _, done := gateOnce.LoadOrStore(s, true); !done {
		close(s.gate)
	}
}

func (s *sender) send(ctx context.Context, reqs []sluice.Request, res []sluice.Result, errs []error) {
	select {
	case s.entered <- struct{}{}:
	default:
	}
	<-s.gate
	for i, r := range reqs {
		res[i], errs[i] = s.mem.Check(ctx, r)
		s.sent.Add(1)
	}
}

func (s *sender) SendCheck(ctx context.Context, req sluice.Request, a coalesce.Answerer) (coalesce.Withdrawer, bool) {
	return s.queue.Send(ctx, req, a), true
}

func (s *sender) Sends(sluice.Request) bool { return true }

func (s *sender) Check(ctx context.Context, req sluice.Request) (sluice.Result, error) {
	s.checks.Add(1)
	return s.mem.Check(ctx, req)
}

func (s *sender) Adjust(ctx context.Context, req sluice.Request, delta int64) (sluice.Result, error) {
	return s.mem.Adjust(ctx, req, delta)
}

// checkConcurrently checks req each times from each of goroutines, and
// returns how many were allowed. Each must be decided by the store or its
// denial cache.
func checkConcurrently(t *testing.T, s *resilient.Store, req sluice.Request, goroutines, each int) (allowed int64) {
	var wg sync.WaitGroup
	var n atomic.Int64
	for range goroutines {
		wg.Go(func() {
			for range each {
				res, d, err := s.CheckDecision(ctx, req)
				if err != nil || (d.Source != resilient.FromStore && d.Source != resilient.FromDenialCache) {
					t.Errorf("%+v %+v %v", res, d, err)
					return
				}
				if res.Allowed {
					n.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return n.Load()
}

// workers counts the resilient layer's worker goroutines.
func workers() int {
	buf := make([]byte, 1<<20)
	return strings.Count(string(buf[:runtime.Stack(buf, true)]), "resilient.(*Store).work(")
}

// A store that sends its checks itself (coalesce.Sender) is called
// without a worker: the check is queued from the caller's goroutine and
// answered by the store's flusher, and decided as before.
func TestSentCheckNeedsNoWorker(t *testing.T) {
	snd := newSender(t, 1)
	snd.open()
	s := newStore(t, snd, resilient.Options{Timeout: time.Second})
	rules := []sluice.Rule{{Rate: 1, Burst: 5}}
	allowed := checkConcurrently(t, s, sluice.Request{Key: "k", Cost: 1, Rules: rules}, 8, 10)
	if n := snd.checks.Load(); n != 0 {
		t.Errorf("%d checks went to the store's Check on a worker, want all sent", n)
	}
	if n := workers(); n != 0 {
		t.Errorf("%d resilient workers running, want none", n)
	}
	if a := allowed; a < 5 || a > 6 { // burst 5, plus at most a second's refill
		t.Errorf("%d of 80 allowed on a bucket of burst 5", a)
	}
	// Adjustments still go the worker's way.
	if _, err := s.Adjust(ctx, sluice.Request{Key: "k", Rules: rules}, -1); err != nil {
		t.Fatal(err)
	}
}

// A sent check whose store does not answer is left at its caller's
// deadline and decided by the failure policy. A check whose batch is on
// its way keeps its slot until the store answers (the bound on checks
// sent, MaxSent, holds); one still queued behind it is withdrawn when its
// caller leaves, so its slot is free at once and nothing is spent for it.
func TestSentCheckLeavesAtTheDeadline(t *testing.T) {
	// One worker slot: the sent checks' two slots are their own.
	opts := resilient.Options{
		OnError: resilient.Open, Timeout: time.Minute, MaxInFlight: 1, MaxSent: 2, QueueWait: time.Millisecond, FailureThreshold: 1000,
	}
	rules := []sluice.Rule{{Rate: 1, Burst: 100}}
	req := func(key string) sluice.Request { return sluice.Request{Key: key, Cost: 1, Rules: rules} }
	// short is a check whose caller leaves after 20ms.
	short := func(s *resilient.Store, key string) (sluice.Result, resilient.Report, error) {
		c, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		defer cancel()
		return s.CheckDecision(c, req(key))
	}
	// hang sends key's check and waits until its batch is on its way (the
	// store's gate closed); the check returns once the gate opens.
	hang := func(s *resilient.Store, snd *sender, key string) (done chan resilient.Report) {
		done = make(chan resilient.Report, 1)
		go func() {
			_, d, _ := s.CheckDecision(ctx, req(key))
			done <- d
		}()
		select {
		case <-snd.entered:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s's batch never went", key)
		}
		return done
	}

	snd := newSender(t, 1) // one batch on its way at a time
	s := newStore(t, snd, opts)
	a := hang(s, snd, "a")
	// b, c, d: queued behind a's batch, withdrawn when their callers
	// leave. Were b's slot still held, c would find both slots taken (a's
	// and b's) and be decided as busy.
	for _, key := range []string{"b", "c", "d"} {
		res, d, err := short(s, key)
		if err != nil || d.Source != resilient.FromOpen || d.Reason == resilient.ReasonBusy || !res.Allowed {
			t.Fatalf("%s, queued behind a hung batch: %+v %+v %v; want decided by the open policy at its deadline, not busy", key, res, d, err)
		}
	}

	// A check on its way keeps its slot until the store answers: on a
	// store of one slot, with x's batch hung, y is busy.
	snd1 := newSender(t, 1)
	opts1 := opts
	opts1.MaxInFlight, opts1.MaxSent = 8, 1
	s1 := newStore(t, snd1, opts1)
	x := hang(s1, snd1, "x")
	if _, d, _ := short(s1, "y"); d.Reason != resilient.ReasonBusy {
		t.Fatalf("y, with x's batch on its way: %+v; want busy: x's slot was given back before the store answered", d)
	}

	snd.open()
	snd1.open()
	for name, done := range map[string]chan resilient.Report{"a": a, "x": x} {
		if d := <-done; d.Source != resilient.FromStore {
			t.Errorf("%s, answered once the gate opened: %+v", name, d)
		}
	}
	for _, st := range []*resilient.Store{s, s1} {
		if _, d, err := st.CheckDecision(ctx, req("z")); err != nil || d.Source != resilient.FromStore {
			t.Errorf("after the gate opened: %+v %v", d, err)
		}
	}
	// The withdrawn checks spent nothing; a's batch was on its way, so the
	// store decided it.
	for key, want := range map[string]int64{"a": 99, "b": 100, "c": 100, "d": 100} {
		if got, _ := snd.mem.Check(ctx, sluice.Request{Key: key, Cost: 0, Rules: rules}); got.Remaining != want {
			t.Errorf("%s: %d tokens left, want %d", key, got.Remaining, want)
		}
	}
	if n := snd.checks.Load() + snd1.checks.Load(); n != 0 {
		t.Errorf("%d checks went to Check on a worker", n)
	}
}

// Checks sent to a store that queues them are bounded by MaxSent, not by
// MaxInFlight (which bounds the calls on workers, each holding one of the
// store client's connections): with one worker slot and a batch on its
// way that the store does not answer, 40 more checks queue for the next
// batch instead of being decided as busy, and the store decides all of
// them, two batches, once it answers. Held to MaxInFlight, 39 of them
// were busy and a batch carried one check.
func TestSentChecksBoundedApart(t *testing.T) {
	ctx := context.Background()
	snd := newSender(t, 1) // one batch on its way at a time
	s := newStore(t, snd, resilient.Options{OnError: resilient.Open, Timeout: time.Minute, MaxInFlight: 1, QueueWait: time.Millisecond, FailureThreshold: 1000})
	rules := []sluice.Rule{{Rate: 1, Burst: 100}}
	const n = 40
	reports := make(chan resilient.Report, n+1)
	check := func(key string) {
		_, d, err := s.CheckDecision(ctx, sluice.Request{Key: key, Cost: 1, Rules: rules})
		if err != nil {
			t.Errorf("%s: %v", key, err)
		}
		reports <- d
	}
	go check("first")
	select {
	case <-snd.entered: // first's batch is on its way, unanswered
	case <-time.After(10 * time.Second):
		t.Fatal("the first batch never went")
	}
	for i := range n {
		go check(fmt.Sprint("k", i))
	}
	// The 40 are queued once the queue holds them all: wait for that,
	// not for a time.
	deadline := time.Now().Add(30 * time.Second)
	for snd.queue.Queued() < n && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if q := snd.queue.Queued(); q != n {
		t.Fatalf("%d checks queued behind the batch on its way, want %d", q, n)
	}
	snd.open()
	for range n + 1 {
		if d := <-reports; d.Source != resilient.FromStore {
			t.Errorf("a check: %+v; want decided by the store", d)
		}
	}
	if got := snd.sent.Load(); got != n+1 {
		t.Errorf("the store decided %d checks, want %d", got, n+1)
	}
	if n := snd.checks.Load(); n != 0 {
		t.Errorf("%d checks went to Check on a worker", n)
	}
}
