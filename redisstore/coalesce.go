package redisstore

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
)

// Coalesce tunes the coalescing of concurrent checks, on by default
// (Options.DisableCoalescing turns it off): checks that arrive while
// others are in flight go to Redis together, in one script call per
// batch. On a Cluster, where one script may only touch one slot,
// a batch is a script call per slot, all sent in one pipeline: one round
// trip per master. A client that is not a *redis.Client (a ring, or a
// client wrapped in something else) is treated as a Cluster. The script
// decides the checks of one key together, against one read and one write
// of the key, one after the other in the order they arrived, exactly as
// separate calls at that instant would: coalescing changes no answer,
// only the number of round trips, script invocations and bucket reads
// and writes.
//
// A check that finds a batch slot free and nothing queued goes at once, on
// its caller's goroutine, as it would without coalescing: a lone caller
// pays nothing for it. The others queue, and a flusher takes what queued
// while the slots were busy as its next batch.
type Coalesce struct {
	// MaxBatch caps the checks in one script call; zero means 64. Redis
	// runs a script alone, so a batch holds every other client of the
	// server for its length: about 5 µs a check on a small machine.
	MaxBatch int

	// MaxWait is how long a flusher waits for more checks before it takes
	// its batch. Zero (the default) never waits: a batch is whatever queued
	// up while earlier batches were in flight. Tens of microseconds gather
	// more under a steady load; then every check queues, a lone one too.
	MaxWait time.Duration

	// MaxInFlight caps the batches on their way at once, a check sent
	// directly counting as one; zero means 2. One batch in flight leaves
	// Redis idle while the next is on the network; two keep it busy, and
	// more split the queue into smaller batches.
	MaxInFlight int
}

// ErrClosed is returned by a coalescing Store after Close.
var ErrClosed = errors.New("redisstore: store closed")

// A call is a queued check. Its state is guarded by the batcher's mutex.
type call struct {
	op       op
	deadline time.Time // zero: none
	taken    bool      // in a batch: it will be answered, even if its caller left
	res      sluice.Result
	err      error
	done     chan struct{}
}

var callPool = sync.Pool{New: func() any { return &call{done: make(chan struct{}, 1)} }}

type batcher struct {
	s           *Store
	maxBatch    int
	maxWait     time.Duration
	maxInFlight int
	bySlot      bool                   // a script call per Cluster slot: not known to be one server
	pipeline    func() redis.Pipeliner // sends those calls at once; nil: one after the other

	mu       sync.Mutex
	idle     sync.Cond // signalled when inFlight drops to zero
	pending  []*call   // queued, oldest first, not yet in a batch
	inFlight int       // checks sent directly and flushers running
	closed   bool
}

func newBatcher(s *Store, c Coalesce, client Scripter) *batcher {
	b := &batcher{s: s, maxBatch: c.MaxBatch, maxWait: c.MaxWait, maxInFlight: c.MaxInFlight}
	if b.maxBatch <= 0 {
		b.maxBatch = 64
	}
	if b.maxInFlight <= 0 {
		b.maxInFlight = 2
	}
	b.idle.L = &b.mu
	switch c := client.(type) {
	case *redis.Client: // one server (or a Sentinel's master): a batch is one call
	case pipeliner: // a Cluster, a ring, or a client wrapped in something else
		b.bySlot, b.pipeline = true, c.Pipeline
	default:
		b.bySlot = true
	}
	return b
}

func (b *batcher) do(ctx context.Context, o op) (sluice.Result, error) {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return sluice.Result{}, ErrClosed
	}
	if b.inFlight < b.maxInFlight && len(b.pending) == 0 && b.maxWait == 0 {
		// Nothing to gather: go directly, as without coalescing.
		b.inFlight++
		b.mu.Unlock()
		var res [1]sluice.Result
		err := b.s.runBatch(ctx, []op{o}, res[:])
		b.mu.Lock()
		b.release()
		b.mu.Unlock()
		return res[0], err
	}
	c := callPool.Get().(*call)
	c.op, c.res, c.err, c.taken = o, sluice.Result{}, nil, false
	c.deadline, _ = ctx.Deadline()
	b.pending = append(b.pending, c)
	if b.inFlight < b.maxInFlight {
		b.inFlight++
		go b.flush()
	}
	b.mu.Unlock()
	select {
	case <-c.done:
		res, err := c.res, c.err
		callPool.Put(c)
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
	if i := slices.Index(b.pending, c); i >= 0 {
		b.pending = slices.Delete(b.pending, i, i+1)
	}
	b.mu.Unlock()
	callPool.Put(c)
	return sluice.Result{}, ctx.Err()
}

// release gives back a batch slot, with b.mu held, and starts a flusher
// in its place for what queued meanwhile.
func (b *batcher) release() {
	if len(b.pending) > 0 {
		go b.flush() // takes over the slot
		return
	}
	b.leave()
}

// leave gives back a batch slot for good, with b.mu held.
func (b *batcher) leave() {
	b.inFlight--
	if b.inFlight == 0 {
		b.idle.Broadcast()
	}
}

// next moves the next batch out of the queue, with b.mu held. With the
// queue empty it gives back its flusher's slot and returns nil, in the
// same hold of the mutex, so that nothing queues unseen.
func (b *batcher) next() []*call {
	n := min(len(b.pending), b.maxBatch)
	if n == 0 {
		b.leave()
		return nil
	}
	batch := make([]*call, n)
	copy(batch, b.pending)
	for _, c := range batch {
		c.taken = true
	}
	rest := copy(b.pending, b.pending[n:])
	clear(b.pending[rest:])
	b.pending = b.pending[:rest]
	return batch
}

// flush holds a batch slot: it sends batches from the queue, one after the
// other, until the queue is empty. It takes the next batch before it
// answers the last, so that Redis is not kept waiting for the answers.
func (b *batcher) flush() {
	if b.maxWait > 0 {
		wait(b.maxWait)
	}
	b.mu.Lock()
	batch := b.next()
	b.mu.Unlock()
	for batch != nil {
		b.send(batch)
		b.mu.Lock()
		next := b.next()
		b.mu.Unlock()
		for _, c := range batch {
			c.done <- struct{}{}
		}
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

// send decides a batch, one script call per Cluster slot, and writes each
// call's result. Its deadline is the latest of its calls', none if one of
// them has none: a caller that gives up earlier returns on its own.
func (b *batcher) send(batch []*call) {
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
	if !b.bySlot {
		b.sendGroup(ctx, batch)
		return
	}
	b.sendSlots(ctx, bySlot(b.s, batch))
}

// pipeliner is a client that pipelines, as every go-redis client does.
type pipeliner interface {
	Pipeline() redis.Pipeliner
}

func (b *batcher) sendGroup(ctx context.Context, g []*call) {
	res := make([]sluice.Result, len(g))
	err := b.s.runBatch(ctx, opsOf(g), res)
	for i, c := range g {
		c.res, c.err = res[i], err
	}
}

// sendSlots sends a script call per Cluster slot in one pipeline, which
// the Cluster client splits into one round trip per master, all at once:
// keys spread over many slots still share round trips. A client that
// cannot pipeline gets the calls one after the other.
func (b *batcher) sendSlots(ctx context.Context, groups [][]*call) {
	if len(groups) == 1 || b.pipeline == nil {
		for _, g := range groups {
			b.sendGroup(ctx, g)
		}
		return
	}
	calls := make([]scriptCall, len(groups))
	ops := make([][]op, len(groups))
	cmds := make([]*redis.Cmd, len(groups))
	pipe := b.pipeline()
	for i, g := range groups {
		ops[i] = opsOf(g)
		calls[i] = b.s.prepare(ops[i])
		cmds[i] = calls[i].script.EvalSha(ctx, pipe, calls[i].keys, calls[i].nums)
	}
	_, _ = pipe.Exec(ctx) // each command carries its own error
	for i, g := range groups {
		reply, err := cmds[i].Text()
		if redis.HasErrorPrefix(err, "NOSCRIPT") { // a master that has not seen the script yet
			reply, err = calls[i].script.Eval(ctx, b.s.client, calls[i].keys, calls[i].nums).Text()
		}
		res := make([]sluice.Result, len(g))
		err = calls[i].parse(reply, err, ops[i], res)
		for j, c := range g {
			c.res, c.err = res[j], err
		}
	}
}

func opsOf(g []*call) []op {
	ops := make([]op, len(g))
	for i, c := range g {
		ops[i] = c.op
	}
	return ops
}

// close stops queueing and waits until every queued check is answered.
func (b *batcher) close() {
	b.mu.Lock()
	b.closed = true
	for b.inFlight > 0 {
		b.idle.Wait()
	}
	b.mu.Unlock()
}

func bySlot(s *Store, batch []*call) [][]*call {
	index := map[uint16]int{}
	var groups [][]*call
	for _, c := range batch {
		slot := Slot(s.Key(c.op.key))
		i, ok := index[slot]
		if !ok {
			i = len(groups)
			index[slot] = i
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], c)
	}
	return groups
}

// Slot returns the Redis Cluster hash slot of key: CRC16 (XModem) of the
// key's hash tag, the part between the first "{" and the next "}" when
// that is not empty, else of the whole key, modulo 16384.
func Slot(key string) uint16 {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for k := 0; k < len(key); k++ {
		crc ^= uint16(key[k]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc % 16384
}
