package envoytest

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// The harness builds and starts the real envoyproxy/ratelimit on its
// example configuration, and a client of go-control-plane's stubs reads
// its answers: a 2/minute limit admits two and then reports OVER_LIMIT with
// nothing remaining, going on counting; an unlimited descriptor is OK with
// everything remaining and no limit.
func TestPeerAnswers(t *testing.T) {
	if testing.Short() {
		t.Skip("builds envoyproxy/ratelimit")
	}
	files, err := Cases()[0].Load()
	if err != nil {
		t.Fatal(err)
	}
	peer := Start(t, files)
	c := Dial(t, "envoyproxy/ratelimit", peer.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for attempt := 1; attempt <= 4; attempt++ {
		WaitWindowStart(5 * time.Second)
		out, start, end, err := Run(ctx, []*Client{c}, append(times(4, one("rl", "foo", "pelican")[0]), one("rl", "qux", "x")...))
		if err != nil {
			t.Fatal(err)
		}
		if Straddles(start, end, out...) {
			peer.Redis().Client(t).FlushAll(ctx) // a run across a minute boundary says nothing
			continue
		}
		for i, want := range []struct {
			code      string
			remaining uint32
		}{{"OK", 1}, {"OK", 0}, {"OVER_LIMIT", 0}, {"OVER_LIMIT", 0}} {
			o := out[0][i]
			s := o.Statuses[0]
			if o.Overall != want.code || s.Code != want.code || s.Remaining != want.remaining || s.Limit != ": 2/MINUTE" || s.Reset < 1 || s.Reset > 60 {
				t.Errorf("request %d: %v, want %s with %d remaining of : 2/MINUTE, reset within a minute", i+1, o, want.code, want.remaining)
			}
		}
		if o := out[0][4]; o.Overall != "OK" || o.Statuses[0] != (Status{Code: "OK", Remaining: math.MaxUint32}) {
			t.Errorf("unlimited: %v, want OK with %d remaining and no limit", o, uint32(math.MaxUint32))
		}
		return
	}
	t.Fatal("every run crossed a minute boundary")
}

// Every case's files load in each release of envoyproxy/ratelimit it is
// held against, and every sequence gets an answer to every request, so the
// differential test compares answers, not errors.
func TestCasesLoadInPeer(t *testing.T) {
	if testing.Short() {
		t.Skip("builds envoyproxy/ratelimit")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for _, r := range Releases() {
		t.Run(r.Name, func(t *testing.T) {
			for _, tc := range Cases() {
				if !tc.In(r) {
					continue
				}
				t.Run(tc.Name, func(t *testing.T) {
					files, err := tc.LoadFrom(r)
					if errors.Is(err, ErrUnavailable) && r.SourceEnv != "" {
						t.Skip(err)
					}
					if err != nil {
						t.Fatal(err)
					}
					peer := StartRelease(t, r, redistest.Start(t), files, nil)
					c := Dial(t, "envoyproxy/ratelimit "+r.Name, peer.Addr())
					for _, sq := range tc.Sequences {
						if !sq.In(r) {
							continue
						}
						out, _, _, err := Run(ctx, []*Client{c}, sq.Requests)
						if err != nil {
							t.Fatalf("%s: %v\n%s", sq.Name, err, peer.Log())
						}
						for i, o := range out[0] {
							if o.Overall == "UNKNOWN" || len(o.Statuses) != len(sq.Requests[i].Descriptors) {
								t.Errorf("%s request %d: %v", sq.Name, i+1, o)
							}
						}
					}
				})
			}
		})
	}
}
