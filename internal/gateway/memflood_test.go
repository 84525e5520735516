package gateway

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
)

// Issue 18, finding 3, through the gateway: on the in-memory store at its
// cap, a client that spent its bucket floods the gateway with requests
// from other addresses until its own key is evicted, and comes back. It is
// still refused, for about as long as it owed; new addresses are served
// all but a few in a hundred.
func TestMemoryCapFloodKeepsTheClientLimited(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer upstream.Close()
	url := floodGateway(t, upstream.URL, 1000, "cost: 3\n    anonymous: [{rate: 3/h, burst: 3}]")
	send := func(ip string) *http.Response { return getFrom(t, url, ip) }
	const client = "203.0.113.7"
	spend(t, url, client)
	// 12,000 addresses, each spending a whole bucket after the client did:
	// each is due later than the client, so the client's key is the first
	// its shard evicts (the cap is 4 keys a shard).
	// A new address may match a merged record of what evicted keys owed,
	// by chance, and start emptier than full (memstore's owed: a few in a
	// hundred at this tiny cap); the rest are served.
	const flood = 12_000
	refused := 0
	for i := 0; i < flood; i++ {
		if r := send(fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255)); r.StatusCode != 200 {
			refused++
		}
	}
	t.Logf("%d of %d new addresses refused during the flood", refused, flood)
	if refused > flood/20 {
		t.Fatalf("%d of %d new addresses refused: more than one in twenty", refused, flood)
	}
	r := send(client)
	if r.StatusCode != 429 {
		t.Fatalf("after the flood the client got %d, want 429: its bucket came back", r.StatusCode)
	}
	if s, _ := strconv.Atoi(r.Header.Get("Retry-After")); s < 3000 {
		t.Fatalf("Retry-After %q after the flood; want about an hour (1200 s a token, 3 tokens)", r.Header.Get("Retry-After"))
	}
}

// getFrom sends GET url/ from the client address ip, as the trusted proxy
// on loopback forwards it, and returns the response, its body closed. It
// may run in several goroutines: a failed request fails t and reads as a
// response of status 0.
func getFrom(t *testing.T, url, ip string) *http.Response {
	req, _ := http.NewRequest("GET", url+"/", nil)
	req.Header.Set("X-Forwarded-For", ip)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Error(err)
		return &http.Response{}
	}
	resp.Body.Close()
	return resp
}

// spend sends ip's first request, which must pass and spend its whole
// bucket or window, and a second, which must be refused.
func spend(t *testing.T, url, ip string) {
	t.Helper()
	if r := getFrom(t, url, ip); r.StatusCode != 200 {
		t.Fatalf("first request: %d", r.StatusCode)
	}
	if r := getFrom(t, url, ip); r.StatusCode != 429 {
		t.Fatalf("second request: %d, want 429", r.StatusCode)
	}
}

// floodGateway starts a gateway in front of upstream on the memory store
// capped at maxKeys, trusting X-Forwarded-For from loopback, with one
// policy for every path whose further fields are policy (YAML, indented
// for its place), and returns its traffic URL.
func floodGateway(t *testing.T, upstream string, maxKeys int, policy string) string {
	_, traffic, _ := newGateway(t, "upstream: "+upstream+`
store: {type: memory, max_keys: `+strconv.Itoa(maxKeys)+`}
trusted_proxies: [127.0.0.1]
forwarded_header: x-forwarded-for
policies:
  - name: api
    match: "/"
    `+policy+"\n")
	return traffic.URL
}
