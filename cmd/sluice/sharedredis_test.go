package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/internal/testkit/envoytest"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

const sharedFile = `domain: shared
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 3}
    descriptors:
      - key: plan
        value: free
        rate_limit: {unit: minute, requests_per_unit: 2}
  - key: path
    value: /api*
    rate_limit: {unit: minute, requests_per_unit: 4}
  - key: files
    value: top/*
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 3}
`

// sharedPer is how many calls each round of sharedRequests makes.
const sharedPer = 6

// sharedRequests are the calls of TestRatelimitSharesRedis, in rounds of
// sharedPer; tag makes their counters new for each attempt.
func sharedRequests(tag string) []*rlsv3.RateLimitRequest {
	d, r := envoytest.Descriptor, envoytest.Request
	var reqs []*rlsv3.RateLimitRequest
	for i := range 5 {
		reqs = append(reqs,
			r("shared", 0, d("user", "u"+tag)),
			r("shared", 0, d("user", "v"+tag, "plan", "free"), d("path", "/api/x"+tag)),
			r("shared", 2, d("path", "/api/y"+tag)),
			r("shared", 0, d("files", fmt.Sprintf("top/%s-%d", tag, i%3))),
			r("shared", 0, envoytest.WithLimit(d("user", "w"+tag), 4, "MINUTE")),
			r("shared", 0, envoytest.WithHits(d("user", "x"+tag), uint64(i%3))),
		)
	}
	return reqs
}

// `sluice ratelimit` and envoyproxy/ratelimit on ONE Redis (the same
// CACHE_KEY_PREFIX), taking turns on the same descriptors, count
// together: their answers are those of a single envoyproxy/ratelimit, on
// a Redis of its own, that takes every call. This is a rolling migration
// from one to the other, both serving at once.
func TestRatelimitSharesRedis(t *testing.T) {
	if testing.Short() {
		t.Skip("builds envoyproxy/ratelimit")
	}
	r := envoytest.January
	b := startBothEnv(t, r, map[string]string{"shared.yaml": sharedFile}, map[string]string{"CACHE_KEY_PREFIX": "rl:"})
	alone := redistest.Start(t, redistest.WithUnixSocket())
	env := map[string]string{
		"REDIS_SOCKET_TYPE": "unix", "REDIS_TYPE": "SINGLE", "REDIS_URL": alone.UnixSocket(),
		"RUNTIME_ROOT": b.root, "RUNTIME_SUBDIRECTORY": "rl", "RUNTIME_APPDIRECTORY": "config", "RUNTIME_WATCH_ROOT": "false",
		"LOG_LEVEL": "info", "LIMIT_RESPONSE_HEADERS_ENABLED": "true", "LIMIT_REMAINING_HEADER": "X-Left",
		"RESPONSE_DYNAMIC_METADATA": "true", "CACHE_KEY_PREFIX": "rl:",
	}
	ref := envoytest.Dial(t, "envoyproxy/ratelimit alone", envoytest.StartEnvRelease(t, r, env).Addr())
	turns := []*envoytest.Client{envoytest.Dial(t, b.services[0].name, b.services[0].grpc), envoytest.Dial(t, b.services[1].name, b.services[1].grpc)}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for attempt := range 10 {
		calls := sharedRequests(fmt.Sprint("a", attempt))
		envoytest.WaitWindowStart(5 * time.Second)
		start := time.Now()
		want := make([]envoytest.Outcome, len(calls))
		got := make([]envoytest.Outcome, len(calls))
		turn := func(i int) int { return (i + i/sharedPer) % 2 } // each descriptor goes to both in turn
		for i, c := range calls {
			var err error
			if want[i], err = ref.Record(ctx, c); err != nil {
				t.Fatal(err)
			}
			if got[i], err = turns[turn(i)].Record(ctx, c); err != nil {
				t.Fatal(err)
			}
		}
		end := time.Now()
		if envoytest.Straddles(start, end, want, got) {
			continue
		}
		slack := int64(end.Sub(start)/time.Second) + 1
		for i := range calls {
			want[i], got[i] = r.AsMain(want[i]), r.AsMain(got[i])
			if diff := envoytest.Diff(want[i], got[i], slack); len(diff) > 0 {
				t.Errorf("call %d %v, answered by %s:\n  alone  %v\n  shared %v\n  %s", i, calls[i], turns[turn(i)].Name, want[i], got[i], strings.Join(diff, "\n  "))
			}
		}
		return
	}
	t.Fatal("every attempt straddled a window's edge")
}
