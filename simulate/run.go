package simulate

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
)

// Result is what one algorithm did with one scenario on one backend.
type Result struct {
	Algorithm string `json:"algorithm"`
	Backend   string `json:"backend"` // "memory" or "redis"

	Admitted int `json:"admitted"`
	Delayed  int `json:"delayed"` // admitted but held (leaky bucket)
	Denied   int `json:"denied"`

	// Worst1s and WorstWindow are the most requests one key had admitted
	// (for the leaky bucket: sent on, after their delay) in any 1 s and
	// any window W; Bound1s and BoundWindow are what the algorithm
	// guarantees (-1: no bound derived).
	Worst1s     int `json:"worst_1s"`
	Bound1s     int `json:"bound_1s"`
	WorstWindow int `json:"worst_window"`
	BoundWindow int `json:"bound_window"`

	// VsExactPct is the admitted count's difference from the exact sliding
	// log's on the same traffic, in percent; DifferPct the share of
	// requests decided otherwise than the exact log decided them.
	VsExactPct float64 `json:"vs_exact_pct"`
	DifferPct  float64 `json:"differ_pct"`

	// BytesPerKey is the state's memory per key held at the end: measured
	// heap in process, MEMORY USAGE on Redis. Keys is how many were held.
	BytesPerKey float64 `json:"bytes_per_key"`
	Keys        int     `json:"keys"`

	// NsPerCheck is the wall time of one check, store call included: on
	// Redis, mostly the round trip. ServerNsPerCheck (Redis only) is the
	// script's own time in the server, from INFO commandstats.
	NsPerCheck       float64 `json:"ns_per_check"`
	ServerNsPerCheck float64 `json:"server_ns_per_check,omitempty"`

	// AgreesWithMemory (Redis only) counts the requests the Redis script
	// decided exactly as the in-memory store did.
	AgreesWithMemory *int `json:"agrees_with_memory,omitempty"`

	decisions []bool
	delays    []int64
	perBin    []int
}

// simClock is the simulated clock every store of a run reads.
type simClock struct{ us atomic.Int64 }

func (c *simClock) Now() time.Time { return time.UnixMicro(c.us.Load()) }

type runner struct {
	rule  sluice.Rule
	tr    traffic
	bin   int64 // µs per chart bin
	first int64
	redis *redis.Client
	tag   string // makes this run's Redis keys its own
}

// memory runs the traffic through the in-memory store of name, then
// measures the memory of its state (see bytesPerKey).
func (ru *runner) memory(name string) (*Result, error) {
	clock := &simClock{}
	clock.us.Store(ru.first)
	s, err := algo.Memory(name, algo.MemoryOptions{Now: clock.Now, SweepInterval: -1})
	if err != nil {
		return nil, err
	}
	defer s.Close()
	res, err := ru.run(name, "memory", s, clock)
	if err != nil {
		return nil, err
	}
	res.BytesPerKey, res.Keys = ru.bytesPerKey(name)
	return res, nil
}

// bytesPerKey measures the heap that the in-memory state of name takes
// per key at the end of the traffic. The heap of one key is too small to
// measure alone, so the last two windows of traffic are sent again for
// enough copies of every key to hold measureKeys or more; the heap freed by
// dropping that store, less what dropping an empty one frees, divided by
// the keys it held, is the figure.
func (ru *runner) bytesPerKey(name string) (float64, int) {
	ev := ru.tr.events
	last := ev[len(ev)-1].at
	from := last - 2*algo.Window(ru.rule).Microseconds()
	copies := max(1, (measureKeys+len(ru.tr.keys)-1)/len(ru.tr.keys))
	reqs := make([]sluice.Request, len(ru.tr.keys)*copies)
	rules := []sluice.Rule{ru.rule}
	for i, k := range ru.tr.keys {
		for c := range copies {
			reqs[i*copies+c] = sluice.Request{Key: k + "#" + strconv.Itoa(c), Cost: 1, Rules: rules}
		}
	}
	clock := &simClock{}
	clock.us.Store(max(ru.first, from))
	build := func() algo.Store {
		s, _ := algo.Memory(name, algo.MemoryOptions{Now: clock.Now, SweepInterval: -1})
		return s
	}
	var keys int
	retainedBy(build, nil) // warms up what a first store sets up once
	empty := retainedBy(build, nil)
	full := retainedBy(build, func(s algo.Store) {
		for _, e := range ev {
			if e.at < from {
				continue
			}
			clock.us.Store(e.at)
			for c := range copies {
				s.Check(context.Background(), reqs[int(e.key)*copies+c])
			}
		}
		keys = s.(interface{ Len() int }).Len()
	})
	if keys == 0 {
		return 0, 0
	}
	return max(0, float64(full-empty)/float64(keys)), keys
}

// retainedBy builds a store, runs use on it (when not nil), and returns
// the bytes of heap that dropping the store frees.
func retainedBy(build func() algo.Store, use func(algo.Store)) int64 {
	s := build()
	if use != nil {
		use(s)
	}
	with := heapAlloc()
	s.Close() // the last use: from here s is no root of the heap
	return with - heapAlloc()
}

// measureKeys is how many keys the memory measurement holds at least;
// tests lower it to run faster.
var measureKeys = 2000

func heapAlloc() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// onRedis runs the traffic through name's script in client-clock mode and
// measures MEMORY USAGE of its keys (a sample of them when there are
// many), then deletes them.
func (ru *runner) onRedis(ctx context.Context, name string) (*Result, error) {
	clock := &simClock{}
	clock.us.Store(ru.first)
	s, err := algo.Redis(name, ru.redis, algo.RedisOptions{Prefix: "sluice-simulate:" + ru.tag + ":", Now: clock.Now, ExpiryMargin: time.Minute})
	if err != nil {
		return nil, err
	}
	callsBefore, usecBefore := scriptStats(ctx, ru.redis)
	res, err := ru.run(name, "redis", s, clock)
	if err != nil {
		return nil, err
	}
	if calls, usec := scriptStats(ctx, ru.redis); calls > callsBefore {
		res.ServerNsPerCheck = 1000 * float64(usec-usecBefore) / float64(calls-callsBefore)
	}
	var total int64
	step := max(1, len(ru.tr.keys)/200)
	for i := 0; i < len(ru.tr.keys); i += step {
		key := algo.RedisKey(s, ru.tr.keys[i])
		if n, err := ru.redis.MemoryUsage(ctx, key).Result(); err == nil {
			total += n
			res.Keys++
		}
	}
	if res.Keys > 0 {
		res.BytesPerKey = float64(total) / float64(res.Keys)
	}
	for i := 0; i < len(ru.tr.keys); i += 500 {
		var del []string
		for _, k := range ru.tr.keys[i:min(i+500, len(ru.tr.keys))] {
			del = append(del, algo.RedisKey(s, k))
		}
		ru.redis.Del(ctx, del...)
	}
	return res, nil
}

// run sends every event to s at its simulated time and records the
// decisions; the wall time of the loop gives the cost per check.
func (ru *runner) run(name, backend string, s sluice.Store, clock *simClock) (*Result, error) {
	ctx := context.Background()
	ev := ru.tr.events
	res := &Result{Algorithm: name, Backend: backend, decisions: make([]bool, len(ev)), delays: make([]int64, len(ev))}
	reqs := make([]sluice.Request, len(ru.tr.keys))
	rules := []sluice.Rule{ru.rule}
	for i, k := range ru.tr.keys {
		reqs[i] = sluice.Request{Key: k, Cost: 1, Rules: rules}
	}
	began := time.Now()
	for i, e := range ev {
		clock.us.Store(e.at)
		r, err := s.Check(ctx, reqs[e.key])
		if err != nil {
			return nil, fmt.Errorf("%s on %s: %w", name, backend, err)
		}
		res.decisions[i] = r.Allowed
		res.delays[i] = r.Delay.Microseconds()
	}
	if len(ev) > 0 {
		res.NsPerCheck = float64(time.Since(began).Nanoseconds()) / float64(len(ev))
	}
	return res, nil
}

// measure fills in the figures that follow from the decisions: counts,
// worst intervals per key, the comparison with the exact log, and the
// chart's bins.
func (ru *runner) measure(res *Result, exact *Result) {
	ev := ru.tr.events
	w := algo.Window(ru.rule)
	perKey := make([][]int64, len(ru.tr.keys))
	var last int64
	if len(ev) > 0 {
		last = ev[len(ev)-1].at
	}
	res.perBin = make([]int, (last-ru.first)/ru.bin+1)
	for i, e := range ev {
		if !res.decisions[i] {
			res.Denied++
			continue
		}
		res.Admitted++
		if res.delays[i] > 0 {
			res.Delayed++
		}
		sent := e.at + res.delays[i]
		perKey[e.key] = append(perKey[e.key], sent)
		if b := (sent - ru.first) / ru.bin; b < int64(len(res.perBin)) {
			res.perBin[b]++
		}
	}
	for _, times := range perKey {
		slices.Sort(times)
		res.Worst1s = max(res.Worst1s, worstIn(times, 1_000_000))
		res.WorstWindow = max(res.WorstWindow, worstIn(times, w.Microseconds()))
	}
	res.Bound1s = bounds(res.Algorithm, ru.rule, 1, w.Seconds())
	res.BoundWindow = bounds(res.Algorithm, ru.rule, w.Seconds(), w.Seconds())
	exactAdmitted, differ := 0, 0
	for i := range ev {
		if exact.decisions[i] {
			exactAdmitted++
		}
		if res.decisions[i] != exact.decisions[i] {
			differ++
		}
	}
	if exactAdmitted > 0 {
		res.VsExactPct = 100 * float64(res.Admitted-exactAdmitted) / float64(exactAdmitted)
	}
	res.DifferPct = 100 * float64(differ) / float64(len(ev))
}

// scriptStats sums the calls and the microseconds of EVALSHA and EVAL in
// INFO commandstats (zeros when the server does not say).
func scriptStats(ctx context.Context, client *redis.Client) (calls, usec int64) {
	info, err := client.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, 0
	}
	for line := range strings.Lines(info) {
		name, fields, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || (name != "cmdstat_evalsha" && name != "cmdstat_eval") {
			continue
		}
		for f := range strings.SplitSeq(fields, ",") {
			k, v, _ := strings.Cut(f, "=")
			n, _ := strconv.ParseInt(v, 10, 64)
			switch k {
			case "calls":
				calls += n
			case "usec":
				usec += n
			}
		}
	}
	return calls, usec
}
