package gateway

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// awayFromYearEdge waits, when the epoch-aligned window of a rule of n
// per 8760h (burst n: a window of 365 days) ends within ten minutes, until
// the next one has begun: a test of such a rule then meets no window edge
// on the real clock, whatever the time of day, and waits once a year.
func awayFromYearEdge() {
	const window = 365 * 24 * time.Hour
	if left := window - time.Duration(time.Now().UnixNano())%window; left < 10*time.Minute {
		time.Sleep(left + time.Second)
	}
}

// Issue 22, item 1, through the gateway: on the in-memory store at its
// cap, a client that spent its window floods the gateway with requests
// from other addresses until its own key is evicted, and comes back. On
// every algorithm beside the token bucket (memflood_test.go has that one)
// it is still refused, with a wait of about what it owed; new addresses
// are served all but a few in a hundred.
func TestMemoryCapFloodKeepsAWindowClientLimited(t *testing.T) {
	// A window of 365 days (the longest a rate may take to refill), so that
	// no window edge falls within the test but once in a year.
	awayFromYearEdge()
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer upstream.Close()
	for _, name := range []string{"fixed_window", "sliding_window", "sliding_log", "leaky_bucket"} {
		t.Run(name, func(t *testing.T) {
			url := floodGateway(t, upstream.URL, 200, "algorithm: "+name+"\n    cost: 5\n    anonymous: [{rate: 5/8760h, burst: 5}]")
			send := func(ip string) *http.Response { return getFrom(t, url, ip) }
			const client = "203.0.113.7"
			spend(t, url, client)
			// 3,000 addresses, each spending a whole window after the client
			// did, four at a time: 47 new keys for each shard of 4 keys, so
			// the client's key is evicted whichever key eviction prefers.
			const flood = 3_000
			var next, refused atomic.Int64
			var wg sync.WaitGroup
			for range 4 {
				wg.Go(func() {
					for i := next.Add(1); i <= flood; i = next.Add(1) {
						if r := send(fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255)); r.StatusCode != 200 {
							refused.Add(1)
						}
					}
				})
			}
			wg.Wait()
			t.Logf("%d of %d new addresses refused during the flood", refused.Load(), flood)
			if refused.Load() > flood/20 {
				t.Fatalf("%d of %d new addresses refused: more than one in twenty", refused.Load(), flood)
			}
			for i := range 5 {
				r := send(client)
				if r.StatusCode != 429 {
					t.Fatalf("after the flood the client's request %d got %d, want 429: its window came back", i+1, r.StatusCode)
				}
				if s, _ := strconv.Atoi(r.Header.Get("Retry-After")); s < 86400 {
					t.Fatalf("Retry-After %q after the flood; want days (it owes a window of a year)", r.Header.Get("Retry-After"))
				}
			}
		})
	}
}
