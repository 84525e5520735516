package main

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/bench"
)

// The above-floor ratio is what each service adds to the empty handler,
// sluice's over envoy's: 30 µs over 60 µs here, whatever both cost in all.
func TestAboveFloor(t *testing.T) {
	if got := aboveFloor(50, 80, 20); got != 0.5 {
		t.Fatalf("aboveFloor(50, 80, 20) = %v, want 0.5", got)
	}
}

// loadRun is a load run of d decisions in one second that cost the service
// cpu µs and Redis redis µs each.
func loadRun(d int64, cpu, redis float64) envoyRun {
	per := func(us float64) time.Duration { return time.Duration(us * float64(d) * 1e3) }
	return envoyRun{RLSResult: bench.RLSResult{Decisions: d, Elapsed: time.Second}, cpu: per(cpu), redisCPU: per(redis),
		cmdUsec: int64(redis/10) * d, reads: d}
}

// The targets of issue 26 are read off the best rounds: each verdict
// follows its figure across the bound, and the scaling targets say
// whether they could be judged.
func TestTargets26(t *testing.T) {
	rs := []envoyResult{
		{workload: "hot", callers: 1, floor: loadRun(6000, 100, 0), sluice: loadRun(3000, 200, 35), envoy: loadRun(2500, 300, 40), redisRounds: []float64{0.875, 1.1, 0.954}},
		{workload: "hot", callers: 32, floor: loadRun(30000, 20, 0), sluice: loadRun(20000, 39, 5), envoy: loadRun(9000, 80, 20)},
		{workload: "hot", callers: 128, floor: loadRun(30000, 20, 0), sluice: loadRun(22000, 45, 11), envoy: loadRun(9000, 80, 20)},
		{workload: "hot", callers: 512, floor: loadRun(30000, 20, 0), sluice: loadRun(21000, 30, 4), envoy: loadRun(9000, 80, 20)},
		{workload: "uniform100k", callers: 1, floor: loadRun(6000, 100, 0), sluice: loadRun(3000, 200, 41), envoy: loadRun(2500, 300, 40)},
	}
	var b strings.Builder
	printTargets26(&b, rs, false)
	out := b.String()
	for _, want := range []string{
		"- hot, 1 caller: Redis CPU a decision 0.88× envoy's, at most 1×: met (in commands 0.75×; decisions a read 1.00 and 1.00; round by round 0.88, 1.10, 0.95)\n",
		"- hot, 32 callers: CPU above the floor 0.32× envoy's, at most ⅓: met; Redis CPU 0.25×, at most ½: met\n",
		"- hot, 128 callers: CPU above the floor 0.42× envoy's, at most ⅓: NOT met; Redis CPU 0.55×, at most ½: NOT met\n",
		"- uniform100k, 1 caller: Redis CPU a decision 1.02× envoy's, at most 1×: NOT met (in commands 1.00×",
		"- hot, 128 → 512 callers: 22000 → 21000 decisions/s, no loss: NOT met (not judged: the load generator shares the services' cores (-cpus-load))\n",
		"- hot, 32 callers: decisions/s 0.67× the floor's, at least 0.7×: NOT met (not judged",
		"- hot, 128 callers: decisions/s 0.73× the floor's, at least 0.7×: met (not judged",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
	b.Reset()
	printTargets26(&b, rs, true)
	if !strings.Contains(b.String(), "no loss: NOT met (judged)\n") {
		t.Errorf("pinned: the scaling targets are judged:\n%s", b.String())
	}
}

// Redis's time in commands is the difference of every command's but the
// INFO calls' own, commands that appeared between the two included.
func TestCommandUsec(t *testing.T) {
	before := map[string]bench.CommandStat{"incrby": {Calls: 10, Usec: 30}, "info": {Calls: 2, Usec: 100}}
	after := map[string]bench.CommandStat{"incrby": {Calls: 20, Usec: 60}, "expire": {Calls: 1, Usec: 2}, "info": {Calls: 4, Usec: 300}}
	if got := commandUsec(before, after); got != 32 {
		t.Fatalf("commandUsec = %d, want 32", got)
	}
}
