package coalesce

import (
	"context"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// flushers counts the goroutines parked in or running a flusher of this
// package.
func flushers() int {
	buf := make([]byte, 1<<20)
	return strings.Count(string(buf[:runtime.Stack(buf, true)]), "coalesce.(*Batcher[...]).flusher")
}

// A flusher outlives its flush and takes the next one (at most
// MaxInFlight of them exist, however many batches were sent), and Close
// ends them all.
func TestFlushersAreReusedAndEndAtClose(t *testing.T) {
	send := func(ctx context.Context, ops []int, res []sluice.Result, errs []error) {
		time.Sleep(100 * time.Microsecond) // let the others queue
		for i := range res {
			res[i] = sluice.Result{Allowed: true}
		}
	}
	const maxInFlight = 2
	b := New(Options{MaxInFlight: maxInFlight}, errClosed, send)
	ctx := context.Background()
	for round := range 20 {
		var wg sync.WaitGroup
		for i := range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if res, err := b.Do(ctx, i); err != nil || !res.Allowed {
					t.Errorf("round %d, op %d: %+v %v", round, i, res, err)
				}
			}()
		}
		wg.Wait()
		if n := flushers(); n > maxInFlight {
			t.Fatalf("round %d: %d flushers, want at most MaxInFlight %d", round, n, maxInFlight)
		}
	}
	if n := flushers(); n == 0 {
		t.Fatal("no flusher parked after the batches: each flush started a goroutine of its own")
	}
	b.Close()
	deadline := time.Now().Add(10 * time.Second)
	for flushers() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d flushers still there after Close", flushers())
		}
		time.Sleep(time.Millisecond)
	}
	if _, err := b.Do(ctx, 1); err != errClosed {
		t.Fatalf("Do after Close: %v, want %v", err, errClosed)
	}
}

// answers records what Answer was given, and how often.
type answers struct {
	mu  sync.Mutex
	n   int
	res sluice.Result
	err error
	got chan struct{}
}

func newAnswers() *answers { return &answers{got: make(chan struct{}, 1)} }

func (a *answers) Answer(res sluice.Result, err error) {
	a.mu.Lock()
	a.n++
	a.res, a.err = res, err
	a.mu.Unlock()
	select {
	case a.got <- struct{}{}:
	default:
	}
}

func (a *answers) times() (int, sluice.Result, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.n, a.res, a.err
}

// gate is a Send whose batches wait until the test opens them, and that
// records every op it sent.
type gate struct {
	open chan struct{}
	in   chan struct{} // a batch has begun
	mu   sync.Mutex
	sent []int
}

func newGate() *gate { return &gate{open: make(chan struct{}), in: make(chan struct{}, 16)} }

func (g *gate) send(ctx context.Context, ops []int, res []sluice.Result, errs []error) {
	select {
	case g.in <- struct{}{}:
	default:
	}
	<-g.open
	g.mu.Lock()
	g.sent = append(g.sent, ops...)
	g.mu.Unlock()
	for i, o := range ops {
		res[i] = sluice.Result{Allowed: true, Remaining: int64(o)}
	}
}

func (g *gate) ops() []int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]int(nil), g.sent...)
}

func waitAnswer(t *testing.T, a *answers, what string) {
	t.Helper()
	select {
	case <-a.got:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: no answer within 10s", what)
	}
}

// An op sent with Send is sent by a flusher, never on its sender's
// goroutine, and answered exactly once; one withdrawn while queued is
// answered at once with the error given and never reaches the store; one
// withdrawn while its batch is on its way is answered by the batch; a
// late Withdraw, after the answer and the call's reuse by another op,
// touches nothing.
func TestSendAndWithdraw(t *testing.T) {
	g := newGate()
	b := New(Options{MaxInFlight: 1}, errClosed, g.send)
	ctx := context.Background()

	first := newAnswers()
	wFirst := b.Send(ctx, 1, first) // returns at once: the flusher waits at the gate
	<-g.in                          // its batch is on its way
	second, third := newAnswers(), newAnswers()
	wSecond := b.Send(ctx, 2, second) // queued behind it
	b.Send(ctx, 3, third)
	if q := b.Queued(); q != 2 {
		t.Fatalf("queued %d, want 2", q)
	}

	wSecond.Withdraw(second, context.Canceled)
	if n, _, err := second.times(); n != 1 || err != context.Canceled {
		t.Fatalf("withdrawn while queued: answered %d times, %v; want once, at once, with context.Canceled", n, err)
	}
	wFirst.Withdraw(first, context.Canceled) // on its way: the batch answers it
	if n, _, _ := first.times(); n != 0 {
		t.Fatal("an op whose batch is on its way was answered by Withdraw")
	}

	close(g.open)
	waitAnswer(t, first, "op 1")
	waitAnswer(t, third, "op 3")
	for name, a := range map[string]*answers{"op 1": first, "op 3": third} {
		if n, res, err := a.times(); n != 1 || err != nil || !res.Allowed {
			t.Errorf("%s: answered %d times: %+v %v", name, n, res, err)
		}
	}
	if got := g.ops(); len(got) != 2 || got[0] != 1 || got[1] != 3 {
		t.Fatalf("the store was sent %v, want [1 3]: a withdrawn op was sent", got)
	}

	// The calls are reused: a late Withdraw of an answered op must not
	// take out another's.
	for i := range 50 {
		a, late := newAnswers(), newAnswers()
		w := b.Send(ctx, 10+i, late)
		waitAnswer(t, late, "late op")
		w2 := b.Send(ctx, 100+i, a)
		w.Withdraw(late, context.Canceled)
		waitAnswer(t, a, "op after a late Withdraw")
		if n, _, err := a.times(); n != 1 || err != nil {
			t.Fatalf("round %d: a late Withdraw of another op answered this one: %d times, %v", i, n, err)
		}
		w2.Withdraw(a, context.Canceled) // answered: nothing happens
		if n, _, _ := a.times(); n != 1 {
			t.Fatalf("round %d: Withdraw after the answer answered again", i)
		}
		if n, _, _ := late.times(); n != 1 {
			t.Fatalf("round %d: the late op answered %d times", i, n)
		}
	}

	b.Close()
	closed := newAnswers()
	if w := b.Send(ctx, 7, closed); w != nil {
		t.Error("Send after Close returned a Withdrawer")
	}
	if n, _, err := closed.times(); n != 1 || err != errClosed {
		t.Fatalf("Send after Close: answered %d times, %v; want once with %v", n, err, errClosed)
	}
}

// Many senders and withdrawers at once: every op is answered exactly
// once, and what the store counted is exactly what was answered without
// an error.
func TestSendAnswersEachOpOnce(t *testing.T) {
	var mu sync.Mutex
	counted := map[int]int{}
	send := func(ctx context.Context, ops []int, res []sluice.Result, errs []error) {
		runtime.Gosched()
		mu.Lock()
		for i, o := range ops {
			counted[o]++
			res[i] = sluice.Result{Allowed: true}
		}
		mu.Unlock()
	}
	b := New(Options{MaxInFlight: 2, MaxBatch: 8}, errClosed, send)
	const senders, each = 8, 500
	all := make([][]*answers, senders)
	var wg sync.WaitGroup
	for s := range senders {
		all[s] = make([]*answers, each)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				a := newAnswers()
				all[s][i] = a
				w := b.Send(context.Background(), s*each+i, a)
				if i%3 == 0 {
					w.Withdraw(a, context.Canceled)
				}
			}
		}()
	}
	wg.Wait()
	b.Close() // waits for every queued op
	withdrawn := 0
	for s := range senders {
		for i, a := range all[s] {
			n, _, err := a.times()
			if n != 1 {
				t.Fatalf("op %d answered %d times", s*each+i, n)
			}
			mu.Lock()
			c := counted[s*each+i]
			mu.Unlock()
			switch {
			case err == nil && c != 1:
				t.Fatalf("op %d answered by the store but sent %d times", s*each+i, c)
			case err != nil && c != 0:
				t.Fatalf("op %d withdrawn (%v) but sent %d times", s*each+i, err, c)
			case err != nil:
				withdrawn++
			}
		}
	}
	t.Logf("%d of %d ops withdrawn before their batch", withdrawn, senders*each)
}
