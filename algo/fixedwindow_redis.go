package algo

import (
	"context"
	_ "embed"
	"encoding/binary"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/coalesce"
	"github.com/sluicehq/sluice/redisstore"
)

// fixed_window.lua is lean: the generic scripts (common.lua) parse rates,
// compute windows, build the report and define helpers on every call,
// which made the fixed window's script take 27–37 µs of Redis's time
// against envoyproxy/ratelimit's 3–5 µs of INCRBY and EXPIRE. This one
// gets the windows from the client and returns the state it leaves, and
// the client reports from it with fixedWindowReport, the report the
// in-memory store gives: one definition of every answer.
var (
	//go:embed fixed_window.lua
	fixedWindowLua    string
	fixedWindowScript = redis.NewScript(fixedWindowLua)
)

// fixedWindowRedis is the fixed window on Redis: the keys of redisStore
// (one string per caller, every rule's window in it, an expiry on every
// write), decided by fixed_window.lua in one round trip. Concurrent checks
// are coalesced as the token bucket's are (redisstore.Coalesce, the same
// queue): a batch is one script call that decides its ops one after the
// other, a call per Cluster slot, pipelined, on a Cluster; the answers
// are those of separate calls in arrival order.
type fixedWindowRedis struct {
	client   redis.Scripter
	prefix   string // includes the algorithm's name
	now      func() time.Time
	marginMs int64
	batcher  coalesce.Queue[fwOp] // nil: every op in a call of its own; on a Cluster, a queue per master
	counters coalesce.Queue[fwOp] // the counter ops' own queue (fixedwindow_counter.go); nil with batcher

	bySlot   bool                   // a script call per Cluster slot: not known to be one server
	pipeline func() redis.Pipeliner // sends those calls at once; nil: one after the other

	// The counters of sluice.Request.WindowKey (fixedwindow_counter.go).
	pipe      func() redis.Pipeliner     // nil: the client cannot send them
	jitter    int64                      // RedisOptions.ExpiryJitter, in seconds
	batches   chan *counterBatch         // kept for the next batches (counterBatch)
	reuseCmds bool                       // a batch reuses the commands of one before it: a *redis.Client
	expiries  atomic.Pointer[expiryMemo] // the counters' expiries it gave (fixedwindow_expiry.go)
	remade    func(n int)                // RedisOptions.CountersRemade; nil: none
}

func newFixedWindowRedis(client redis.Scripter, prefix string, opts RedisOptions, marginMs int64) *fixedWindowRedis {
	s := &fixedWindowRedis{client: client, prefix: prefix, now: opts.Now, marginMs: marginMs, jitter: int64(opts.ExpiryJitter / time.Second), remade: opts.CountersRemade}
	if c, ok := client.(interface{ Pipeline() redis.Pipeliner }); ok {
		s.pipe = c.Pipeline
		s.batches = make(chan *counterBatch, counterBatches)
	}
	switch c := client.(type) {
	case *redis.Client: // one server (or a Sentinel's master): a batch is one call
		s.reuseCmds = true
	case interface{ Pipeline() redis.Pipeliner }: // a Cluster, a ring, a wrapped client
		s.bySlot, s.pipeline = true, c.Pipeline
	default:
		s.bySlot = true
	}
	if !opts.DisableCoalescing {
		var c redisstore.Coalesce
		if opts.Coalesce != nil {
			c = *opts.Coalesce
		}
		s.batcher = coalesce.NewQueue(coalesce.Options{MaxBatch: c.MaxBatch, MaxWait: c.MaxWait, MaxInFlight: c.MaxInFlight},
			redisstore.ErrClosed, s.send, client, s.opKey)
		// The counters queue apart from the script's ops, so that a batch
		// is one round trip, and with one batch in flight unless told
		// otherwise: their commands cost Redis less than the read and the
		// write of a round trip, so a batch twice as large (what queues
		// while the one before is on its way) halves what Redis spends on
		// round trips per decision, and Redis, idle between two batches,
		// is not what bounds the decisions (counterInFlight).
		cc := coalesce.Options{MaxBatch: c.MaxBatch, MaxWait: c.MaxWait, MaxInFlight: c.MaxInFlight}
		if cc.MaxInFlight <= 0 {
			cc.MaxInFlight = counterInFlight
		}
		s.counters = coalesce.NewQueue(cc, redisstore.ErrClosed, s.sendCounters, client, s.opKey)
	}
	return s
}

// fwOp is one check or adjustment on its way to the script.
type fwOp struct {
	key    string
	kind   string // "c" check, "d" check counting a denied cost, "a" adjust
	amount int64  // cost, or delta when adjusting
	rules  []sluice.Rule
	// counter, when not empty, is the Redis key of a WindowKey check's
	// counter (its window's start included); now is when it was made
	// (Unix µs) and start its window's start.
	counter    string
	now, start int64
}

// opKey is the Redis key that o reads and writes.
func (s *fixedWindowRedis) opKey(o fwOp) string {
	if o.counter != "" {
		return o.counter
	}
	return s.Key(o.key)
}

func (s *fixedWindowRedis) Algorithm() string { return FixedWindow }

// Close stops coalescing, after every check queued is answered; later
// calls return redisstore.ErrClosed. It does not close the Redis client.
func (s *fixedWindowRedis) Close() error {
	if s.batcher != nil {
		s.batcher.Close()
		s.counters.Close()
	}
	return nil
}

// Key returns the Redis key that holds a caller key's windows.
func (s *fixedWindowRedis) Key(key string) string { return redisKey(s.prefix, key) }

// Check decides req in one round trip.
func (s *fixedWindowRedis) Check(ctx context.Context, req sluice.Request) (sluice.Result, error) {
	o, err := s.checkOp(req)
	if err != nil {
		return sluice.Result{}, err
	}
	return s.run(ctx, o)
}

// checkOp returns the op of req's check.
func (s *fixedWindowRedis) checkOp(req sluice.Request) (fwOp, error) {
	if err := validate(FixedWindow, req); err != nil {
		return fwOp{}, err
	}
	o := fwOp{key: req.Key, kind: "c", amount: req.Cost, rules: req.Rules}
	if req.CountDenied {
		o.kind = "d"
		if req.WindowKey != "" && len(req.Rules) == 1 {
			s.counterOp(&o, req.WindowKey)
		}
	}
	return o, nil
}

// Adjust charges (delta > 0) or refunds (delta < 0) key's windows, or,
// for a request of WindowKey (and CountDenied, one rule) as its check
// was, the counter of WindowKey in the current window that the check
// counted in.
func (s *fixedWindowRedis) Adjust(ctx context.Context, req sluice.Request, delta int64) (sluice.Result, error) {
	if err := sluice.ValidateAdjust(req.Key, req.Rules); err != nil {
		return sluice.Result{}, err
	}
	o := fwOp{key: req.Key, kind: "a", amount: delta, rules: req.Rules}
	if req.CountDenied && req.WindowKey != "" && len(req.Rules) == 1 {
		s.counterOp(&o, req.WindowKey)
	}
	return s.run(ctx, o)
}

// SendCheck sends req's check to its coalescing queue without waiting
// for it (coalesce.Sender); false when the store does not coalesce.
func (s *fixedWindowRedis) SendCheck(ctx context.Context, req sluice.Request, a coalesce.Answerer) (coalesce.Withdrawer, bool) {
	if s.batcher == nil {
		return nil, false
	}
	o, err := s.checkOp(req)
	if err != nil {
		a.Answer(sluice.Result{}, err)
		return nil, true
	}
	if o.counter != "" {
		return s.counters.Send(ctx, o, a), true
	}
	return s.batcher.Send(ctx, o, a), true
}

var _ coalesce.Sender = (*fixedWindowRedis)(nil)

// Sends says whether SendCheck sends a check: whether the store
// coalesces.
func (s *fixedWindowRedis) Sends(sluice.Request) bool { return s.batcher != nil }

func (s *fixedWindowRedis) run(ctx context.Context, o fwOp) (sluice.Result, error) {
	if s.batcher != nil {
		if o.counter != "" {
			return s.counters.Do(ctx, o)
		}
		return s.batcher.Do(ctx, o)
	}
	var res [1]sluice.Result
	err := s.runBatch(ctx, []fwOp{o}, res[:])
	return res[0], err
}

func (s *fixedWindowRedis) sendGroup(ctx context.Context, ops []fwOp, res []sluice.Result, errs []error) {
	err := s.runBatch(ctx, ops, res)
	for i := range errs {
		errs[i] = err
	}
}

// send decides a coalesced batch: one script call, or one per Cluster
// slot, pipelined when the client can.
func (s *fixedWindowRedis) send(ctx context.Context, ops []fwOp, res []sluice.Result, errs []error) {
	if s.splitCounters(ctx, ops, res, errs) {
		return
	}
	if !s.bySlot {
		s.sendGroup(ctx, ops, res, errs)
		return
	}
	groups := coalesce.BySlot(ops, func(o fwOp) uint16 { return redisstore.Slot(s.opKey(o)) })
	if len(groups) == 1 {
		s.sendGroup(ctx, ops, res, errs)
		return
	}
	if s.pipeline == nil {
		for _, g := range groups {
			gres, gerrs := make([]sluice.Result, len(g.Ops)), make([]error, len(g.Ops))
			s.sendGroup(ctx, g.Ops, gres, gerrs)
			g.Answer(gres, gerrs, res, errs)
		}
		return
	}
	cmds := make([]*redis.Cmd, len(groups))
	nums := make([][]byte, len(groups))
	keys := make([][]string, len(groups))
	pipe := s.pipeline()
	for i, g := range groups {
		keys[i], nums[i] = s.prepare(g.Ops)
		cmds[i] = fixedWindowScript.EvalSha(ctx, pipe, keys[i], nums[i])
	}
	_, _ = pipe.Exec(ctx) // each command carries its own error
	for i, g := range groups {
		reply, err := cmds[i].Text()
		if redis.HasErrorPrefix(err, "NOSCRIPT") { // a master that has not seen the script yet
			reply, err = fixedWindowScript.Eval(ctx, s.client, keys[i], nums[i]).Text()
		}
		gres, gerrs := make([]sluice.Result, len(g.Ops)), make([]error, len(g.Ops))
		err = parseFixedWindow(reply, err, g.Ops, gres)
		for j := range gerrs {
			gerrs[j] = err
		}
		g.Answer(gres, gerrs, res, errs)
	}
}

// runBatch decides ops in one script call, in order, and writes their
// results to res. On a Cluster their keys must share a slot.
func (s *fixedWindowRedis) runBatch(ctx context.Context, ops []fwOp, res []sluice.Result) error {
	if len(ops) == 1 && ops[0].counter != "" {
		var errs [1]error
		s.sendCounters(ctx, ops, res, errs[:])
		return errs[0]
	}
	keys, nums := s.prepare(ops)
	reply, err := fixedWindowScript.Run(ctx, s.client, keys, nums).Text()
	return parseFixedWindow(reply, err, ops, res)
}

// Kinds of op, as fixed_window.lua reads them.
var fwKinds = map[string]float64{"c": 0, "d": 1, "a": 2}

// prepare builds the script's keys and its packed numbers (see
// fixed_window.lua): every number a little-endian float64, exact for
// these whole numbers below 2^53 (a larger delta saturates either way).
func (s *fixedWindowRedis) prepare(ops []fwOp) ([]string, []byte) {
	n := 2
	for _, o := range ops {
		n += 3 + 2*len(o.rules)
	}
	keys := make([]string, len(ops))
	nums := make([]byte, 0, 8*n)
	now := -1.0 // the server's TIME
	if s.now != nil {
		now = float64(s.now().UnixMicro())
	}
	nums = appendFloat(appendFloat(nums, now), float64(s.marginMs))
	for i, o := range ops {
		keys[i] = s.Key(o.key)
		nums = appendFloat(nums, fwKinds[o.kind])
		nums = appendFloat(nums, float64(o.amount))
		nums = appendFloat(nums, float64(len(o.rules)))
		for _, r := range o.rules {
			nums = appendFloat(appendFloat(nums, float64(window(r))), float64(r.Burst))
		}
	}
	return keys, nums
}

func appendFloat(b []byte, f float64) []byte {
	return binary.LittleEndian.AppendUint64(b, math.Float64bits(f))
}

// parseFixedWindow reports each op from the state the script returned
// (allowed, then t, start and count per rule, packed doubles), as the
// in-memory store does.
func parseFixedWindow(reply string, err error, ops []fwOp, res []sluice.Result) error {
	if err != nil {
		return fmt.Errorf("algo: %s on redis: %w", FixedWindow, err)
	}
	want := 0
	for _, o := range ops {
		want += 8 * (1 + 3*len(o.rules))
	}
	if len(reply) != want {
		return fmt.Errorf("algo: %s script returned %d bytes, want %d", FixedWindow, len(reply), want)
	}
	next := func() int64 {
		f := math.Float64frombits(binary.LittleEndian.Uint64([]byte(reply[:8])))
		reply = reply[8:]
		return int64(f)
	}
	var st [sluice.MaxRules]fixedWindow
	var ts [sluice.MaxRules]int64
	for i, o := range ops {
		allowed := next() == 1
		for j := range o.rules {
			ts[j] = next()
			st[j].start = next()
			st[j].count = next()
		}
		cost := o.amount
		if o.kind == "a" {
			cost = 0
		}
		res[i], _ = fixedWindowReport(st[:len(o.rules)], o.rules, ts[:len(o.rules)], allowed, cost)
	}
	return nil
}
