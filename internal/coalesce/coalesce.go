// Package coalesce sends concurrent calls to a store together: the queue
// behind redisstore's coalescing of token bucket checks and algo's of the
// fixed window's. A call that finds a batch slot free and nothing queued
// goes at once, on its caller's goroutine, as it would without
// coalescing: a lone caller pays nothing for it. The others queue, and a
// flusher takes what queued while the slots were busy as its next batch.
// What a batch is on the wire (one script call, or one per Cluster slot
// in a pipeline) is the store's Send.
package coalesce

import (
	"context"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
)

// Options tunes a Batcher; see redisstore.Coalesce, whose fields these are.
type Options struct {
	MaxBatch    int           // calls in one batch; zero means 64
	MaxWait     time.Duration // a flusher's wait for more calls; zero never waits
	MaxInFlight int           // batches on their way at once; zero means 2
}

// Send decides ops as one batch and writes each op's result, or error, to
// res and errs (as long as ops).
type Send[O any] func(ctx context.Context, ops []O, res []sluice.Result, errs []error)

// A call is a queued op. Its state is guarded by the batcher's mutex.
type call[O any] struct {
	op       O
	deadline time.Time // zero: none
	taken    bool      // in a batch: it will be answered, even if its caller left
	res      sluice.Result
	err      error
	done     chan struct{}
	to       Answerer    // a sent op's (Send): answered through it, not done
	b        *Batcher[O] // its Batcher, for Withdraw: set once, when made
}

// An Answerer receives the answer of an op sent with Send, exactly once:
// on the goroutine of the flusher that decided it, or on the goroutine
// that sent or withdrew it when it was never sent to the store. Answer
// must not block.
type Answerer interface {
	Answer(res sluice.Result, err error)
}

// A Withdrawer withdraws an op sent with Send whose sender no longer
// waits for it: an op still queued is taken out and answered with err at
// once, so that nothing is spent for it; an op whose batch is on its way
// is answered by the batch; an op already answered is left alone.
type Withdrawer interface {
	Withdraw(a Answerer, err error)
}

// A Sender is a store whose checks can be sent without a goroutine of
// their caller's waiting in the store: the caller may leave at its
// deadline while the check goes on, and the store answers it through a.
// SendCheck returns false, having answered nothing, when it cannot send
// req this way (the caller then calls Check); otherwise a's Answer is
// called exactly once, maybe before SendCheck returns (then w is nil).
// ctx's deadline bounds the store call; its values may not reach the
// store, since a batch goes with a context of its own.
//
// Sends says, before a check is sent, whether SendCheck would send req
// (true) or return false: the caller bounds the checks it sends apart
// from the calls it makes on goroutines of its own, since a sent check
// waits in a queue and holds no connection while it waits. Its answer
// for a request does not change while the store is open.
type Sender interface {
	SendCheck(ctx context.Context, req sluice.Request, a Answerer) (w Withdrawer, ok bool)
	Sends(req sluice.Request) bool
}

// Batcher queues the ops of concurrent callers and sends them in batches.
type Batcher[O any] struct {
	send        Send[O]
	closedErr   error
	maxBatch    int
	maxWait     time.Duration
	maxInFlight int
	pool        sync.Pool // of *call[O]

	mu       sync.Mutex
	idle     sync.Cond  // signalled when inFlight drops to zero
	pending  []*call[O] // queued, oldest first, not yet in a batch
	inFlight int        // calls sent directly and flushers running
	closed   bool

	// A flusher's goroutine outlives its flush: it parks on wake for the
	// next one (at most maxInFlight of them exist, since a flush is only
	// started with a batch slot held), so that a flush starts no goroutine
	// and grows no stack (a call into go-redis runs deep). stop ends the
	// parked ones at Close.
	wake chan struct{}
	stop chan struct{}
}

// New returns a Batcher that sends through send; after Close, Do returns
// closedErr.
func New[O any](opts Options, closedErr error, send Send[O]) *Batcher[O] {
	b := &Batcher[O]{send: send, closedErr: closedErr, maxBatch: opts.MaxBatch, maxWait: opts.MaxWait, maxInFlight: opts.MaxInFlight}
	if b.maxBatch <= 0 {
		b.maxBatch = 64
	}
	if b.maxInFlight <= 0 {
		b.maxInFlight = 2
	}
	b.idle.L = &b.mu
	b.wake, b.stop = make(chan struct{}), make(chan struct{})
	b.pool.New = func() any { return &call[O]{done: make(chan struct{}, 1), b: b} }
	return b
}

// Do decides o, alone or in a batch. A caller that gives up while its op
// is still queued withdraws it, so that nothing it asked for is spent.
func (b *Batcher[O]) Do(ctx context.Context, o O) (sluice.Result, error) {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return sluice.Result{}, b.closedErr
	}
	if b.inFlight < b.maxInFlight && len(b.pending) == 0 && b.maxWait == 0 {
		// Nothing to gather: go directly, as without coalescing.
		b.inFlight++
		b.mu.Unlock()
		var res [1]sluice.Result
		var errs [1]error
		b.send(ctx, []O{o}, res[:], errs[:])
		b.mu.Lock()
		b.release()
		b.mu.Unlock()
		return res[0], errs[0]
	}
	c := b.enqueue(ctx, o, nil)
	b.mu.Unlock()
	select {
	case <-c.done:
		res, err := c.res, c.err
		b.pool.Put(c)
		return res, err
	case <-ctx.Done():
	}
	b.mu.Lock()
	if c.taken {
		// Its batch is on its way and will answer c: leave c to it and
		// to the garbage collector, never back in the pool.
		b.mu.Unlock()
		return sluice.Result{}, ctx.Err()
	}
	// Still queued: withdraw it, so that a check nobody waits for spends
	// no tokens.
	b.unqueue(c)
	b.mu.Unlock()
	b.pool.Put(c)
	return sluice.Result{}, ctx.Err()
}

// Send queues o for the next batch and returns at once, with what
// withdraws it; a's Answer gets its answer exactly once (at once, and w
// nil, when the Batcher is closed). Unlike Do, o never goes on the
// caller's goroutine: a flusher sends it, so that the caller may leave
// while it is on its way.
func (b *Batcher[O]) Send(ctx context.Context, o O, a Answerer) (w Withdrawer) {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		a.Answer(sluice.Result{}, b.closedErr)
		return nil
	}
	c := b.enqueue(ctx, o, a)
	b.mu.Unlock()
	return c
}

// enqueue queues o, answered through to (nil: through the call's done),
// with b.mu held, and starts a flusher when a batch slot is free.
func (b *Batcher[O]) enqueue(ctx context.Context, o O, to Answerer) *call[O] {
	c := b.pool.Get().(*call[O])
	c.op, c.res, c.err, c.taken, c.to = o, sluice.Result{}, nil, false, to
	c.deadline, _ = ctx.Deadline()
	b.pending = append(b.pending, c)
	if b.inFlight < b.maxInFlight {
		b.inFlight++
		b.startFlush()
	}
	return c
}

// unqueue takes c, not yet in a batch, out of the queue, with b.mu held.
func (b *Batcher[O]) unqueue(c *call[O]) {
	if i := slices.Index(b.pending, c); i >= 0 {
		b.pending = slices.Delete(b.pending, i, i+1)
	}
}

// Withdraw takes c out of the queue and answers it with err when it is
// still queued for a; see Withdrawer. c may have been answered and reused
// for another op since: then c.to is another's and nothing is done.
func (c *call[O]) Withdraw(a Answerer, err error) {
	b := c.b
	b.mu.Lock()
	if c.to != a || c.taken {
		b.mu.Unlock()
		return
	}
	b.unqueue(c)
	c.to = nil
	b.mu.Unlock()
	b.pool.Put(c)
	a.Answer(sluice.Result{}, err)
}

// answer hands a batch's result to c's caller.
func (b *Batcher[O]) answer(c *call[O]) {
	to := c.to
	if to == nil {
		c.done <- struct{}{}
		return
	}
	// c stays taken until it is reused, and is then another's (Send and
	// Do set to under the mutex): a late Withdraw of to finds nothing.
	res, err := c.res, c.err
	b.pool.Put(c)
	to.Answer(res, err)
}

// Queued returns how many ops wait in the queue.
func (b *Batcher[O]) Queued() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.pending)
}

// release gives back a batch slot, with b.mu held, and starts a flusher
// in its place for what queued meanwhile.
func (b *Batcher[O]) release() {
	if len(b.pending) > 0 {
		b.startFlush() // takes over the slot
		return
	}
	b.leave()
}

// leave gives back a batch slot for good, with b.mu held.
func (b *Batcher[O]) leave() {
	b.inFlight--
	if b.inFlight == 0 {
		b.idle.Broadcast()
	}
}

// next moves the next batch out of the queue into buf, with b.mu held.
// With the queue empty it gives back its flusher's slot and returns nil,
// in the same hold of the mutex, so that nothing queues unseen.
func (b *Batcher[O]) next(buf []*call[O]) []*call[O] {
	n := min(len(b.pending), b.maxBatch)
	if n == 0 {
		b.leave()
		return nil
	}
	batch := append(buf[:0], b.pending[:n]...)
	for _, c := range batch {
		c.taken = true
	}
	rest := copy(b.pending, b.pending[n:])
	clear(b.pending[rest:])
	b.pending = b.pending[:rest]
	return batch
}

// startFlush hands a flush, holding a batch slot, to a parked flusher, or
// starts one when none is parked.
func (b *Batcher[O]) startFlush() {
	select {
	case b.wake <- struct{}{}:
	default:
		go b.flusher()
	}
}

// buffers are a flusher's, reused from batch to batch: two batches (the
// one on its way and the next), and what a batch is sent with.
type buffers[O any] struct {
	batch [2][]*call[O]
	ops   []O
	res   []sluice.Result
	errs  []error
}

// flusher flushes, then the flushes handed to it, until Close.
func (b *Batcher[O]) flusher() {
	var buf buffers[O]
	for {
		b.flush(&buf)
		select {
		case <-b.wake:
		case <-b.stop:
			return
		}
	}
}

// flush holds a batch slot: it sends batches from the queue, one after the
// other, until the queue is empty. It takes the next batch before it
// answers the last, so that the store is not kept waiting for the answers.
func (b *Batcher[O]) flush(buf *buffers[O]) {
	if b.maxWait > 0 {
		wait(b.maxWait)
	}
	b.mu.Lock()
	batch := b.next(buf.batch[0])
	b.mu.Unlock()
	for turn := 1; batch != nil; turn++ {
		b.sendBatch(batch, buf)
		b.mu.Lock()
		next := b.next(buf.batch[turn%2])
		b.mu.Unlock()
		for i, c := range batch {
			batch[i] = nil // the buffer holds on to no call
			b.answer(c)
		}
		buf.batch[(turn+1)%2] = batch[:0]
		batch = next
	}
}

// wait lets d pass. A timer is rounded up to about a millisecond when the
// process has nothing else to run (Go parks in epoll with a timeout in
// ms), far more than the tens of microseconds MaxWait is for: shorter
// waits yield the processor in a loop instead.
func wait(d time.Duration) {
	if d >= time.Millisecond {
		time.Sleep(d)
		return
	}
	for end := time.Now().Add(d); time.Now().Before(end); {
		runtime.Gosched()
	}
}

// sendBatch sends a batch and writes each call's result. Its deadline is
// the latest of its calls', none if one of them has none: a caller that
// gives up earlier returns on its own.
func (b *Batcher[O]) sendBatch(batch []*call[O], buf *buffers[O]) {
	ctx := context.Background()
	var latest time.Time
	for _, c := range batch {
		if c.deadline.IsZero() {
			latest = time.Time{}
			break
		}
		if c.deadline.After(latest) {
			latest = c.deadline
		}
	}
	if !latest.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, latest)
		defer cancel()
	}
	n := len(batch)
	ops := slices.Grow(buf.ops[:0], n)[:n]
	res := slices.Grow(buf.res[:0], n)[:n]
	errs := slices.Grow(buf.errs[:0], n)[:n]
	for i, c := range batch {
		ops[i], res[i], errs[i] = c.op, sluice.Result{}, nil
	}
	b.send(ctx, ops, res, errs)
	for i, c := range batch {
		c.res, c.err = res[i], errs[i]
	}
	var zero O
	for i := range ops {
		ops[i], errs[i] = zero, nil // hold on to nothing of the batch
	}
	buf.ops, buf.res, buf.errs = ops, res, errs
}

// Close stops queueing and waits until every queued op is answered.
func (b *Batcher[O]) Close() {
	b.mu.Lock()
	wasClosed := b.closed
	b.closed = true
	for b.inFlight > 0 {
		b.idle.Wait()
	}
	b.mu.Unlock()
	if !wasClosed {
		close(b.stop) // no flush starts once closed and idle
	}
}

// A Group is the ops of one Cluster slot, in their order, and their
// places in the batch.
type Group[O any] struct {
	Ops []O
	At  []int
}

// BySlot splits ops into groups of one slot each (slot gives an op's), in
// order of first appearance: the script calls of a batch on a Cluster,
// where one script may touch one slot.
func BySlot[O any](ops []O, slot func(O) uint16) []Group[O] {
	index := map[uint16]int{}
	var groups []Group[O]
	for i, o := range ops {
		s := slot(o)
		g, ok := index[s]
		if !ok {
			g = len(groups)
			index[s] = g
			groups = append(groups, Group[O]{})
		}
		groups[g].Ops = append(groups[g].Ops, o)
		groups[g].At = append(groups[g].At, i)
	}
	return groups
}

// Answer writes a group's results and errors to their places in the
// batch's.
func (g Group[O]) Answer(gres []sluice.Result, gerrs []error, res []sluice.Result, errs []error) {
	for j, k := range g.At {
		res[k], errs[k] = gres[j], gerrs[j]
	}
}
