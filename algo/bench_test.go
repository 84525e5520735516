package algo

import (
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testkit/fakeclock"
)

// A check on a key that exists allocates nothing, for every algorithm:
// run with -benchmem. The clock moves 1 ms a check against a 1000/s rule,
// so the keys stay busy and the sliding log keeps a full window.
func BenchmarkMemoryCheck(b *testing.B) {
	rules := []sluice.Rule{{Rate: 1000, Burst: 100}}
	for _, name := range Names() {
		b.Run(name, func(b *testing.B) {
			c := fakeclock.New(time.UnixMicro(edge))
			s, _ := Memory(name, MemoryOptions{Now: c.Now, SweepInterval: -1})
			defer s.Close()
			reqs := make([]sluice.Request, 64)
			for i := range reqs {
				reqs[i] = sluice.Request{Key: "user-" + strconv.Itoa(i), Cost: 1, Rules: rules}
				s.Check(ctx, reqs[i])
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				c.AdvanceMicros(1000 / 64)
				s.Check(ctx, reqs[i%len(reqs)])
			}
		})
	}
}

// A flood of new keys at the cap: every check evicts a key, remembers what
// it owed and looks up the new key's records (run with -benchmem).
func BenchmarkMemoryFloodAtCap(b *testing.B) {
	rules := []sluice.Rule{{Rate: 5.0 / 60, Burst: 5}}
	for _, name := range Names()[1:] {
		b.Run(name, func(b *testing.B) {
			c := fakeclock.New(time.UnixMicro(edge))
			s, _ := Memory(name, MemoryOptions{Now: c.Now, SweepInterval: -1, MaxKeys: 10_000})
			defer s.Close()
			key := make([]byte, 0, 24)
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				c.AdvanceMicros(1)
				key = strconv.AppendInt(append(key[:0], "flood-"...), int64(i), 10)
				s.Check(ctx, sluice.Request{Key: string(key), Cost: 1, Rules: rules})
			}
		})
	}
}
