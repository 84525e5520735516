package redisstore

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
)

// Coalesce turns on the coalescing of concurrent checks: checks that
// arrive while others are queued or in flight go to Redis together, in one
// script call per batch (per Cluster slot on a Cluster, since one script
// may only touch one slot there). The script decides them one after the
// other, exactly as separate calls would: coalescing changes no answer,
// only the number of round trips and script invocations.
type Coalesce struct {
	// MaxBatch caps the checks in one script call; zero means 64.
	MaxBatch int

	// MaxWait is how long a batch may wait for more checks once it has
	// one. Zero (the default) never waits: a batch is whatever queued up
	// while earlier batches were in flight, so a lone check goes at once.
	// Tens of microseconds gather more under a steady load.
	MaxWait time.Duration

	// MaxInFlight caps the batches on their way at once; zero means 4.
	MaxInFlight int
}

// ErrClosed is returned by a coalescing Store after Close.
var ErrClosed = errors.New("redisstore: store closed")

type call struct {
	op       op
	deadline time.Time // zero: none
	res      sluice.Result
	err      error
	done     chan struct{}
}

var callPool = sync.Pool{New: func() any { return &call{done: make(chan struct{}, 1)} }}

type batcher struct {
	mu       sync.RWMutex // held for reading while queueing; Close takes it to stop queueing
	closed   bool
	s        *Store
	queue    chan *call
	maxBatch int
	maxWait  time.Duration
	inFlight chan struct{}
	cluster  bool
	stop     chan struct{}
	loops    sync.WaitGroup
	flushes  sync.WaitGroup
}

func newBatcher(s *Store, c Coalesce, client Scripter) *batcher {
	b := &batcher{s: s, maxBatch: c.MaxBatch, maxWait: c.MaxWait, stop: make(chan struct{})}
	if b.maxBatch <= 0 {
		b.maxBatch = 64
	}
	n := c.MaxInFlight
	if n <= 0 {
		n = 4
	}
	b.inFlight = make(chan struct{}, n)
	b.queue = make(chan *call, 4*b.maxBatch)
	_, b.cluster = client.(*redis.ClusterClient)
	b.loops.Add(1)
	go b.loop()
	return b
}

func (b *batcher) do(ctx context.Context, o op) (sluice.Result, error) {
	c := callPool.Get().(*call)
	c.op, c.res, c.err = o, sluice.Result{}, nil
	c.deadline, _ = ctx.Deadline()
	b.mu.RLock()
	if b.closed {
		b.mu.RUnlock()
		callPool.Put(c)
		return sluice.Result{}, ErrClosed
	}
	select {
	case b.queue <- c:
		b.mu.RUnlock()
	case <-ctx.Done():
		b.mu.RUnlock()
		callPool.Put(c)
		return sluice.Result{}, ctx.Err()
	}
	select {
	case <-c.done:
		res, err := c.res, c.err
		callPool.Put(c)
		return res, err
	case <-ctx.Done():
		// The batch still holds c and will answer it: leave c to it
		// and to the garbage collector, never back in the pool.
		return sluice.Result{}, ctx.Err()
	}
}

func (b *batcher) loop() {
	defer b.loops.Done()
	var timer *time.Timer
	if b.maxWait > 0 {
		timer = time.NewTimer(time.Hour)
		timer.Stop()
	}
	for {
		var first *call
		select {
		case first = <-b.queue:
		case <-b.stop:
			// Nothing is queued after stop: answer what is left.
			for {
				select {
				case c := <-b.queue:
					c.err = ErrClosed
					c.done <- struct{}{}
				default:
					b.flushes.Wait()
					return
				}
			}
		}
		batch := []*call{first}
		if timer != nil {
			timer.Reset(b.maxWait)
		}
	gather:
		for len(batch) < b.maxBatch {
			if timer == nil {
				select {
				case c := <-b.queue:
					batch = append(batch, c)
				default:
					break gather
				}
				continue
			}
			select {
			case c := <-b.queue:
				batch = append(batch, c)
			case <-timer.C:
				break gather
			}
		}
		if timer != nil && !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		b.inFlight <- struct{}{}
		b.flushes.Add(1)
		go b.flush(batch)
	}
}

// flush sends a batch, one script call per Cluster slot, and answers it.
func (b *batcher) flush(batch []*call) {
	defer b.flushes.Done()
	defer func() { <-b.inFlight }()
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
	groups := [][]*call{batch}
	if b.cluster {
		groups = bySlot(b.s, batch)
	}
	var wg sync.WaitGroup
	for _, g := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b.send(ctx, g)
		}()
	}
	wg.Wait()
}

func (b *batcher) send(ctx context.Context, g []*call) {
	ops := make([]op, len(g))
	res := make([]sluice.Result, len(g))
	for i, c := range g {
		ops[i] = c.op
	}
	err := b.s.runBatch(ctx, ops, res)
	for i, c := range g {
		c.res, c.err = res[i], err
		c.done <- struct{}{}
	}
}

func (b *batcher) close() {
	b.mu.Lock()
	if !b.closed {
		b.closed = true
		close(b.stop)
	}
	b.mu.Unlock()
	b.loops.Wait()
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
