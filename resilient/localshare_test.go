package resilient

import (
	"testing"

	"github.com/sluicehq/sluice"
)

// TestLocalShareIsAValidRule: a rule at the edge of the bounds, divided by
// the instances, still gives the local bucket a rule it can check.
func TestLocalShareIsAValidRule(t *testing.T) {
	s := New(nil, Options{Instances: 3})
	defer s.Close()
	slowest := float64(1) / sluice.MaxRefillTime.Seconds()
	for _, r := range []sluice.Rule{{Rate: slowest, Burst: 1}, {Rate: 1000 * slowest, Burst: 1000}, {Rate: 10, Burst: 100}} {
		if err := r.Validate(); err != nil {
			t.Fatalf("%+v: %v", r, err)
		}
		for _, cost := range []int64{0, 1} {
			local := s.localRules(nil, []sluice.Rule{r}, cost)
			if err := local[0].Validate(); err != nil {
				t.Errorf("local share of %+v (cost %d) = %+v: %v", r, cost, local[0], err)
			}
		}
	}
}
