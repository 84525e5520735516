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
