package redisstore

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/coalesce"
)

// Coalesce tunes the coalescing of concurrent checks, on by default
// (Options.DisableCoalescing turns it off): checks that arrive while
// others are in flight go to Redis together, in one script call per
// batch. On a Cluster, where one script may only touch one slot,
// a batch is a script call per slot, all sent in one pipeline: one round
// trip. Each master has a queue of its own, so a batch holds the keys of
// one master and a master that stops answering holds up only its keys. A client that is not a *redis.Client (a ring, or a
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
// while the slots were busy as its next batch. A check sent with
// Store.SendCheck (as the resilient layer sends them, without a worker)
// always queues, and a flusher answers it.
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

// sender sends a coalesced batch of a Store: one script call on one
// server; on a Cluster (or a client not known to be one server), a script
// call per slot, pipelined when the client can.
type sender struct {
	s        *Store
	bySlot   bool                   // a script call per Cluster slot: not known to be one server
	pipeline func() redis.Pipeliner // sends those calls at once; nil: one after the other
}

// newBatcher returns the store's queue: on a Cluster, one per master, so
// that a master that stops answering (paused, or dead until its replica is
// promoted) holds up only the checks of its own keys.
func newBatcher(s *Store, c Coalesce) coalesce.Queue[op] {
	return coalesce.NewQueue(coalesce.Options{MaxBatch: c.MaxBatch, MaxWait: c.MaxWait, MaxInFlight: c.MaxInFlight}, ErrClosed, newSender(s).send,
		s.client, func(o op) string { return s.Key(o.key) })
}

func newSender(s *Store) *sender {
	snd := &sender{s: s}
	switch c := s.client.(type) {
	case *redis.Client: // one server (or a Sentinel's master): a batch is one call
	case pipeliner: // a Cluster, a ring, or a client wrapped in something else
		snd.bySlot, snd.pipeline = true, c.Pipeline
	default:
		snd.bySlot = true
	}
	return snd
}

// pipeliner is a client that pipelines, as every go-redis client does.
type pipeliner interface {
	Pipeline() redis.Pipeliner
}

// send decides a batch, one script call per Cluster slot, and writes each
// op's result.
func (snd *sender) send(ctx context.Context, ops []op, res []sluice.Result, errs []error) {
	if !snd.bySlot {
		snd.sendGroup(ctx, ops, res, errs)
		return
	}
	groups := coalesce.BySlot(ops, func(o op) uint16 { return Slot(snd.s.Key(o.key)) })
	if len(groups) == 1 || snd.pipeline == nil {
		for _, g := range groups {
			gres, gerrs := make([]sluice.Result, len(g.Ops)), make([]error, len(g.Ops))
			snd.sendGroup(ctx, g.Ops, gres, gerrs)
			g.Answer(gres, gerrs, res, errs)
		}
		return
	}
	snd.sendSlots(ctx, groups, res, errs)
}

func (snd *sender) sendGroup(ctx context.Context, ops []op, res []sluice.Result, errs []error) {
	err := snd.s.runBatch(ctx, ops, res)
	for i := range errs {
		errs[i] = err
	}
}

// sendSlots sends a script call per Cluster slot in one pipeline, which
// the Cluster client splits into one round trip per master, all at once:
// keys spread over many slots still share round trips.
func (snd *sender) sendSlots(ctx context.Context, groups []coalesce.Group[op], res []sluice.Result, errs []error) {
	calls := make([]scriptCall, len(groups))
	cmds := make([]*redis.Cmd, len(groups))
	pipe := snd.pipeline()
	for i, g := range groups {
		calls[i] = snd.s.prepare(g.Ops)
		cmds[i] = calls[i].script.EvalSha(ctx, pipe, calls[i].keys, calls[i].nums)
	}
	_, _ = pipe.Exec(ctx) // each command carries its own error
	for i, g := range groups {
		reply, err := cmds[i].Text()
		if redis.HasErrorPrefix(err, "NOSCRIPT") { // a master that has not seen the script yet
			reply, err = calls[i].script.Eval(ctx, snd.s.client, calls[i].keys, calls[i].nums).Text()
		}
		gres, gerrs := make([]sluice.Result, len(g.Ops)), make([]error, len(g.Ops))
		err = calls[i].parse(reply, err, g.Ops, gres)
		for j := range gerrs {
			gerrs[j] = err
		}
		g.Answer(gres, gerrs, res, errs)
	}
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
