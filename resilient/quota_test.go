package resilient

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

// The local share of a calendar quota is a quota of the same period and
// zone, divided by the instances; the guard does not watch quotas (its
// clock and the store's see a period begin at different instants), so it
// never denies what the store's new period allows.
func TestQuotaLocalShareAndGuard(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	month, err := sluice.NewQuota(1000, sluice.Month, berlin)
	if err != nil {
		t.Fatal(err)
	}
	var us atomic.Int64
	us.Store(time.Date(2027, 2, 27, 12, 0, 0, 0, berlin).UnixMicro())
	primary := memstore.New(memstore.Options{Now: func() time.Time { return time.UnixMicro(us.Load()) }, SweepInterval: -1})
	defer primary.Close()
	s := New(primary, Options{Instances: 3, DenialCacheSize: -1})
	defer s.Close()
	local := s.localRules(nil, []sluice.Rule{month}, 1)
	if l := local[0]; l.Period != sluice.Month || l.Zone != berlin || l.Burst != 333 || l.Validate() != nil {
		t.Fatalf("local share %+v; want 333 a month in Berlin", l)
	}
	ctx := context.Background()
	day, _ := sluice.NewQuota(2, sluice.Day, berlin)
	req := sluice.Request{Key: "k", Cost: 1, Rules: []sluice.Rule{{Rate: 10, Burst: 10}, day}}
	for d := range 4 { // a guard of the quota's nominal rate would deny on the third day
		for i := range 3 {
			res, err := s.Check(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			if res.Allowed != (i < 2) || res.DecidedBy != sluice.ByStore {
				t.Fatalf("day %d, check %d: %+v; want the store to allow 2 a day", d, i, res)
			}
		}
		us.Add(int64(24 * time.Hour / time.Microsecond))
	}
}
