package coalesce

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
)

// maxShards bounds the Batchers of a Sharded. Shards are the masters of a
// Cluster, a handful; a name past the bound shares the overflow shard.
const maxShards = 1024

// Sharded keeps a Batcher per part of the store (a Cluster master), so
// that a part that stops answering holds up only the ops that go to it:
// a batch never mixes the ops of two masters (a pipeline answers when its
// slowest master does), and one master's batches in flight never take the
// batch slots of another's. The part of an op is what shard says; an op
// whose part changes (a failover moved its slot) simply queues on the new
// part's Batcher from then on, and the client routes each call by its
// own current slot map whatever the queue, so no answer depends on it.
type Sharded[O any] struct {
	opts      Options
	closedErr error
	send      Send[O]
	shard     func(O) string

	batchers sync.Map // part name -> *Batcher[O]
	mu       sync.Mutex
	n        int
	closed   bool
}

// NewSharded returns a Sharded whose Batchers send through send.
func NewSharded[O any](opts Options, closedErr error, send Send[O], shard func(O) string) *Sharded[O] {
	return &Sharded[O]{opts: opts, closedErr: closedErr, send: send, shard: shard}
}

// Do decides o on the Batcher of its part.
func (s *Sharded[O]) Do(ctx context.Context, o O) (sluice.Result, error) {
	b := s.batcher(s.shard(o))
	if b == nil {
		return sluice.Result{}, s.closedErr
	}
	return b.Do(ctx, o)
}

// batcher returns the Batcher of part name, made on first use; nil after
// Close.
func (s *Sharded[O]) batcher(name string) *Batcher[O] {
	if b, ok := s.batchers.Load(name); ok {
		return b.(*Batcher[O])
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	if b, ok := s.batchers.Load(name); ok {
		return b.(*Batcher[O])
	}
	if s.n >= maxShards {
		name = "\x00overflow"
		if b, ok := s.batchers.Load(name); ok {
			return b.(*Batcher[O])
		}
	}
	b := New(s.opts, s.closedErr, s.send)
	s.batchers.Store(name, b)
	s.n++
	return b
}

// Send queues o on the Batcher of its part; see Batcher.Send.
func (s *Sharded[O]) Send(ctx context.Context, o O, a Answerer) Withdrawer {
	b := s.batcher(s.shard(o))
	if b == nil {
		a.Answer(sluice.Result{}, s.closedErr)
		return nil
	}
	return b.Send(ctx, o, a)
}

// Queued returns how many ops wait in the queues of every part.
func (s *Sharded[O]) Queued() int {
	n := 0
	s.batchers.Range(func(_, b any) bool {
		n += b.(*Batcher[O]).Queued()
		return true
	})
	return n
}

// Close stops queueing on every part and waits until every queued op is
// answered.
func (s *Sharded[O]) Close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.batchers.Range(func(_, b any) bool {
		b.(*Batcher[O]).Close()
		return true
	})
}

// ClusterMaster returns, for a Cluster client, a function that names the
// master of a Redis key's slot from the client's cached slot map (it never
// loads the map: a key whose master is not known yet is in part ""); nil
// for any other client.
func ClusterMaster(client any) func(key string) string {
	cc, ok := client.(*redis.ClusterClient)
	if !ok {
		return nil
	}
	cached, cancel := context.WithCancel(context.Background())
	cancel()
	return func(key string) string {
		c, err := cc.MasterForKey(cached, key)
		if err != nil {
			return ""
		}
		return c.Options().Addr
	}
}

// Queue is a Batcher, or a Sharded one on a Cluster.
type Queue[O any] interface {
	Do(ctx context.Context, o O) (sluice.Result, error)
	Send(ctx context.Context, o O, a Answerer) Withdrawer
	Queued() int
	Close()
}

// NewQueue returns the queue of a store on client: on a Cluster client a
// Batcher per master (by the master of the Redis key that redisKey names
// for an op), so that one master that stops answering never holds up the
// checks of the others; otherwise one Batcher.
func NewQueue[O any](opts Options, closedErr error, send Send[O], client any, redisKey func(O) string) Queue[O] {
	if master := ClusterMaster(client); master != nil {
		return NewSharded(opts, closedErr, send, func(o O) string { return master(redisKey(o)) })
	}
	return New(opts, closedErr, send)
}
