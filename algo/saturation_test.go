package algo

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testkit/fakeclock"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// Charges and refunds of any size, on rules at the edges of sluice's
// bounds: every algorithm saturates (spans at 2^53 µs, counts within 0
// and 2^53) instead of wrapping, and its Lua script agrees with the Go
// bit for bit. A sliding log refuses a burst or a charge above
// MaxLogBurst instead of growing without bound.
func TestAlgorithmsSaturate(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.ExactClient(t)
	slowest := 1 / sluice.MaxRefillTime.Seconds()
	for _, name := range Names()[1:] {
		t.Run(name, func(t *testing.T) {
			c := fakeclock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
			ms, err := Memory(name, MemoryOptions{Now: c.Now, SweepInterval: -1})
			if err != nil {
				t.Fatal(err)
			}
			defer ms.Close()
			rs, err := Redis(name, client, RedisOptions{Now: c.Now})
			if err != nil {
				t.Fatal(err)
			}
			charge := int64(math.MaxInt64)
			ruleSets := [][]sluice.Rule{
				{{Rate: slowest, Burst: 1}},
				{{Rate: sluice.MaxRate, Burst: sluice.MaxBurst}},
				{{Rate: slowest * 1000, Burst: 1000}, {Rate: 10, Burst: 20}},
			}
			if name == SlidingLog {
				charge = MaxLogBurst
				ruleSets[1] = []sluice.Rule{{Rate: sluice.MaxRate, Burst: MaxLogBurst}}
				big := sluice.Request{Key: "k", Cost: 1, Rules: []sluice.Rule{{Rate: 1e9, Burst: MaxLogBurst + 1}}}
				for _, s := range []Store{ms, rs} {
					if _, err := s.Check(ctx, big); !errors.Is(err, sluice.ErrInvalid) {
						t.Fatalf("burst above MaxLogBurst: %v; want ErrInvalid", err)
					}
					if _, err := s.Adjust(ctx, sluice.Request{Key: "k", Rules: ruleSets[0]}, MaxLogBurst+1); !errors.Is(err, sluice.ErrInvalid) {
						t.Fatalf("charge above MaxLogBurst: %v; want ErrInvalid", err)
					}
				}
			}
			for i, rules := range ruleSets {
				key := string(rune('a' + i))
				type step struct {
					adjust bool
					amount int64
				}
				for j, st := range []step{{false, 1}, {true, charge}, {false, 1}, {true, charge}, {false, 0}, {true, math.MinInt64}, {false, 1}, {true, charge}} {
					c.AdvanceMicros(1000)
					var want, got sluice.Result
					var werr, gerr error
					if st.adjust {
						want, werr = ms.Adjust(ctx, sluice.Request{Key: key, Rules: rules}, st.amount)
						got, gerr = rs.Adjust(ctx, sluice.Request{Key: key, Rules: rules}, st.amount)
					} else {
						req := sluice.Request{Key: key, Cost: st.amount, Rules: rules}
						want, werr = ms.Check(ctx, req)
						got, gerr = rs.Check(ctx, req)
					}
					if werr != nil || gerr != nil {
						t.Fatalf("rules %v step %d: errors: memory %v, redis %v", rules, j, werr, gerr)
					}
					if got != want {
						t.Fatalf("rules %v step %d:\nredis  %+v\nmemory %+v", rules, j, got, want)
					}
					if want.RetryAfter < 0 || want.ResetAfter < 0 || want.Remaining < 0 || want.Delay < 0 ||
						want.RetryAfter > sluice.MaxWait || want.ResetAfter > sluice.MaxWait || want.Remaining > want.Limit {
						t.Fatalf("rules %v step %d: a wrapped value: %+v", rules, j, want)
					}
				}
			}
		})
	}
}
