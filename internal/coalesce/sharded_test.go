package coalesce

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

var errClosed = errors.New("closed")

// An op of a part whose store stopped answering holds up only the ops of
// that part: the other part's ops are answered while the first is stuck,
// and a batch never holds ops of two parts.
func TestShardedPartsDoNotWaitForEachOther(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	var mixed []string
	send := func(ctx context.Context, ops []string, res []sluice.Result, errs []error) {
		for _, o := range ops {
			if o[0] != ops[0][0] {
				mu.Lock()
				mixed = append(mixed, fmt.Sprint(ops))
				mu.Unlock()
			}
		}
		if ops[0][0] == 's' {
			<-release
		}
		for i := range res {
			res[i] = sluice.Result{Allowed: true}
		}
	}
	q := NewSharded(Options{MaxInFlight: 1}, errClosed, send, func(o string) string { return o[:1] })
	var stuck sync.WaitGroup
	for i := range 4 {
		stuck.Go(func() { _, _ = q.Do(context.Background(), fmt.Sprintf("s%d", i)) })
	}
	for start := time.Now(); q.Queued() < 3; time.Sleep(time.Millisecond) {
		if time.Since(start) > 10*time.Second {
			t.Fatalf("%d ops queued behind the stuck one, want 3", q.Queued())
		}
	}
	var fast sync.WaitGroup
	for i := range 50 {
		fast.Go(func() {
			if r, err := q.Do(context.Background(), fmt.Sprintf("f%d", i)); err != nil || !r.Allowed {
				t.Errorf("f%d: %v %v", i, r, err)
			}
		})
	}
	done := make(chan struct{})
	go func() { fast.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second): // generous: they need no store time at all
		close(release)
		t.Fatal("the ops of the answering part waited for the stuck part")
	}
	close(release)
	stuck.Wait()
	q.Close()
	if len(mixed) > 0 {
		t.Errorf("batches mixed parts: %v", mixed)
	}
	if _, err := q.Do(context.Background(), "f"); !errors.Is(err, errClosed) {
		t.Errorf("after Close: %v, want the closed error", err)
	}
}

// The parts are bounded: names past maxShards share one queue.
func TestShardedBoundsItsParts(t *testing.T) {
	send := func(ctx context.Context, ops []int, res []sluice.Result, errs []error) {}
	q := NewSharded(Options{}, errClosed, send, func(o int) string { return fmt.Sprint(o) })
	for i := range 3 * maxShards {
		if _, err := q.Do(context.Background(), i); err != nil {
			t.Fatal(err)
		}
	}
	n := 0
	q.batchers.Range(func(_, _ any) bool { n++; return true })
	if n > maxShards+1 {
		t.Errorf("%d queues after %d names, want at most %d", n, 3*maxShards, maxShards+1)
	}
	q.Close()
}
