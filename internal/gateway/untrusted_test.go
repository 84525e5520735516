package gateway

import (
	"bytes"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sluicehq/sluice/internal/testkit/syncbuf"
)

// TestForwardedWithoutTrustedProxies: while trusted_proxies is empty,
// requests that carry X-Forwarded-For or Forwarded are counted, each one,
// and logged in one WARN per peer (within the minute), naming the peer;
// requests without the header are neither. With trusted_proxies set,
// nothing is said.
func TestForwardedWithoutTrustedProxies(t *testing.T) {
	const pol = "policies:\n  - {name: api, match: /, anonymous: [{rate: 1000/s, burst: 1000}]}\n"
	for _, trusted := range []bool{false, true} {
		yaml := pol
		if trusted {
			yaml += "trusted_proxies: [10.0.0.0/8]\nforwarded_header: x-forwarded-for\n"
		}
		g, traffic, admin := newGateway(t, yaml)
		var logs syncbuf.Buffer
		g.untrusted.log = slog.New(slog.NewTextHandler(&logs, nil)) // before the first request
		send := func(src, header, value string) {
			req, _ := http.NewRequest("GET", traffic.URL+"/x", nil)
			if header != "" {
				req.Header.Set(header, value)
			}
			resp, err := clientFrom(src).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
		}
		for i := range 20 {
			send("127.0.0.1", "X-Forwarded-For", fmt.Sprintf("203.0.113.%d", i))
			send("127.0.0.2", "Forwarded", "for=198.51.100.1")
			send("127.0.0.1", "", "")
		}
		metrics := scrape(t, admin.URL)
		warns := strings.Split(strings.TrimSpace(logs.String()), "\n")
		if trusted {
			if got := counter(t, metrics, "sluice_forwarded_untrusted_total"); got != 0 || logs.String() != "" {
				t.Fatalf("with trusted_proxies: counted %v, logged %q; want nothing", got, logs.String())
			}
			continue
		}
		if got := counter(t, metrics, "sluice_forwarded_untrusted_total"); got != 40 {
			t.Errorf("sluice_forwarded_untrusted_total = %v, want 40 (every request with the header)", got)
		}
		if len(warns) != 2 || !strings.Contains(warns[0], "level=WARN") || !strings.Contains(warns[0], "peer=127.0.0.1 header=X-Forwarded-For") ||
			!strings.Contains(warns[1], "peer=127.0.0.2 header=Forwarded") || !strings.Contains(warns[0], "shares one bucket") {
			t.Errorf("want one WARN per peer, naming it and its header; got:\n%s", logs.String())
		}
	}
}

// TestForwardedWarningsAreBounded: a peer is warned about once a minute,
// by a clock of the test's own; a flood of new peers is remembered up to
// warnPeersMax, with one warning a minute for those beyond, and the
// remembered peers are let go once their minute is over.
func TestForwardedWarningsAreBounded(t *testing.T) {
	var logs bytes.Buffer
	reg := prometheus.NewRegistry()
	w := newForwardedWarner(reg, slog.New(slog.NewTextHandler(&logs, nil)))
	now := time.Unix(1e9, 0) // any instant: only its differences count
	w.now = func() time.Time { return now }
	note := func(peer string) {
		w.note(&http.Request{RemoteAddr: peer, Header: http.Header{"X-Forwarded-For": {"192.0.2.1"}}})
	}
	warned := func() int { return strings.Count(logs.String(), "level=WARN") }
	for range 1000 {
		note("127.0.0.1:1000")
	}
	if warned() != 1 {
		t.Fatalf("1000 requests from one peer: %d warnings, want 1", warned())
	}
	now = now.Add(w.every - time.Second)
	note("127.0.0.1:1001")
	if warned() != 1 {
		t.Fatal("warned again within the minute")
	}
	now = now.Add(time.Second)
	note("127.0.0.1:1002")
	if warned() != 2 {
		t.Fatalf("a minute on: %d warnings, want 2", warned())
	}

	logs.Reset()
	const flood = 100_000
	for i := range flood {
		note(fmt.Sprintf("10.%d.%d.%d:80", i>>16, (i>>8)&255, i&255))
		if n := w.remembered(); n > warnPeersMax {
			t.Fatalf("%d peers remembered after %d new ones, want at most %d", n, i+1, warnPeersMax)
		}
	}
	// 1023 new peers fill the memory (one is 127.0.0.1), one more warning
	// stands for the other 98,977.
	if warned() != warnPeersMax {
		t.Fatalf("a flood of %d peers: %d warnings, want %d", flood, warned(), warnPeersMax)
	}
	mfs, err := reg.Gather()
	if err != nil || len(mfs) != 1 {
		t.Fatal(mfs, err)
	}
	if got := mfs[0].GetMetric()[0].GetCounter().GetValue(); got != 1002+flood {
		t.Fatalf("counted %v requests, want %d", got, 1002+flood)
	}
	now = now.Add(w.every)
	logs.Reset()
	note("198.51.100.7:80")
	if warned() != 1 || w.remembered() != 1 {
		t.Fatalf("a minute after the flood: %d warnings, %d peers remembered; want the old ones gone and the new peer warned about", warned(), w.remembered())
	}
}
