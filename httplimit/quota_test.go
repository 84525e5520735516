package httplimit

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

// A calendar quota is its own item: RateLimit-Policy states q = the quota
// and w = its period (a day, 86400), and t counts the seconds to the
// period's end in the quota's zone: on the day Berlin moves its clocks
// forward, 22 hours from 01:00, for allowed responses and on the 429 alike
// (Retry-After too); at midnight the quota is whole again.
func TestCalendarQuotaHeaders(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	day, err := sluice.NewQuota(3, sluice.Day, berlin)
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, Options{Policies: []Policy{{Name: "api", Pattern: "/", Cost: 1, Anonymous: []sluice.Rule{{Rate: 10, Burst: 5}, day}}}}, nil)
	e.clock.Set(time.Date(2027, 3, 28, 1, 0, 0, 0, berlin))
	const toMidnight = 22 * 3600
	for i := range 3 {
		r := e.do("GET", "/")
		if r.status != http.StatusOK {
			t.Fatalf("request %d: status %d", i, r.status)
		}
		pol, lim := checkSF(t, r.header)
		if len(pol) != 2 || pol[1].name != "api-1" || pol[1].q != 3 || pol[1].w != 86400 || pol[1].hasBurst {
			t.Fatalf("RateLimit-Policy %q; want item api-1 with q=3;w=86400", r.header.Get("RateLimit-Policy"))
		}
		if len(lim) != 1 || lim[0].name != "api-1" || lim[0].r != int64(2-i) || lim[0].t != toMidnight {
			t.Fatalf("request %d: RateLimit %q; want api-1, r=%d, t=%d", i, r.header.Get("RateLimit"), 2-i, toMidnight)
		}
	}
	r := e.do("GET", "/")
	if got := check429(t, r); got != toMidnight {
		t.Fatalf("429: Retry-After %d; want %d, the seconds to midnight in Berlin", got, toMidnight)
	}
	if _, lim := checkSF(t, r.header); lim[0].name != "api-1" || lim[0].t != toMidnight || r.header.Get("RateLimit-Reset") != strconv.Itoa(toMidnight) {
		t.Fatalf("429: RateLimit %q, RateLimit-Reset %q; want t the seconds to midnight", r.header.Get("RateLimit"), r.header.Get("RateLimit-Reset"))
	}
	e.clock.Advance(toMidnight * time.Second)
	if r := e.do("GET", "/"); r.status != http.StatusOK {
		t.Fatalf("at midnight: status %d; want the new day's quota", r.status)
	}
}

// A quota with another algorithm than the token bucket is refused: the
// windows and logs of package algo know no calendar.
func TestCalendarQuotaNeedsTheTokenBucket(t *testing.T) {
	day, _ := sluice.NewQuota(3, sluice.Day, nil)
	ms := memstore.New(memstore.Options{SweepInterval: -1})
	defer ms.Close()
	_, err := New(Options{Store: ms, Policies: []Policy{{Name: "api", Pattern: "/", Cost: 1, Algorithm: "fixed_window", Anonymous: []sluice.Rule{day}}}})
	if err == nil || !strings.Contains(err.Error(), "calendar quota") {
		t.Fatalf("New: %v; want an error naming the calendar quota", err)
	}
}
