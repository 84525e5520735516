package config

import (
	"strings"
	"testing"
)

// The extreme values of issue 18 (finding 6) and their neighbours: each is
// refused at load time on its own line and field, with what would be
// valid; the values just inside the bounds load.
func TestBoundsRefused(t *testing.T) {
	const pol = "policies:\n  - name: api\n    match: \"GET /api/\"\n"
	for _, tc := range []struct {
		name, data string
		want       []string
	}{
		{"rate far too slow", pol + "    anonymous: [{rate: 1e-300/s, burst: 1}]\n",
			[]string{"bad.yaml:4: policies[0].anonymous[0].rate:", "more than 1000 years", "want at most 366 days", "1/8784h"}},
		{"smallest positive rate", pol + "    anonymous: [{rate: 5e-324/s, burst: 1}]\n",
			[]string{"bad.yaml:4: policies[0].anonymous[0].rate:", "want at most 366 days"}},
		{"refill just over a year", pol + "    anonymous:\n      - rate: 2/8784h\n        burst: 3\n",
			[]string{"bad.yaml:5: policies[0].anonymous[0].rate:", "burst 3 refills an empty bucket in 549 days", "3/8784h"}},
		{"rate too fast", pol + "    anonymous: [{rate: 2e9/s, burst: 1}]\n",
			[]string{"bad.yaml:4: policies[0].anonymous[0].rate:", "at most 1e+09"}},
		{"burst of int64", pol + "    anonymous:\n      - rate: 1/s\n        burst: 9223372036854775807\n",
			[]string{"bad.yaml:6: policies[0].anonymous[0].burst: 9223372036854775807: want an integer from 1 to 1000000000000000"}},
		{"burst above 1e15", pol + "    authenticated: [{rate: 1e9/s, burst: 1000000000000001}]\n",
			[]string{"bad.yaml:4: policies[0].authenticated[0].burst:", "from 1 to 1000000000000000"}},
		{"override rule", pol + "    anonymous: [{rate: 1/s, burst: 1}]\n    overrides: [{identity: x, authenticated: [{rate: 1e-300/s, burst: 1}]}]\n",
			[]string{"bad.yaml:5: policies[0].overrides[0].authenticated[0].rate:", "366 days"}},
		{"max_delay of int64", pol + "    anonymous: [{rate: 1/s, burst: 1}]\n    max_delay: 2562047h\n",
			[]string{"bad.yaml:5: policies[0].max_delay: 2562047h0m0s: want 0s (reject) or a positive duration of at most 1h0m0s"}},
		{"max_delay just above the bound", pol + "    anonymous: [{rate: 1/s, burst: 1}]\n    max_delay: 1h0m0.001s\n",
			[]string{"bad.yaml:5: policies[0].max_delay:", "at most 1h0m0s"}},
		{"sliding_log burst", pol + "    algorithm: sliding_log\n    anonymous: [{rate: 1000/s, burst: 100001}]\n",
			[]string{"bad.yaml:5: policies[0].anonymous[0].burst: 100001: sliding_log keeps an entry per admitted unit; want at most 100000"}},
		{"local share too slow", "store:\n  type: redis\n  instances: 4\n  redis: {url: redis://127.0.0.1:1}\n" + pol + "    anonymous: [{rate: 1/8784h, burst: 1}]\n",
			[]string{"bad.yaml:8: policies[0].anonymous[0].rate:", "local fallback's share with store.instances 4", "4 years"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("bad.yaml", ".", []byte(tc.data))
			if err == nil {
				t.Fatalf("accepted:\n%s", tc.data)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\nwant it to contain %q", err, w)
				}
			}
		})
	}
}

func TestBoundsAccepted(t *testing.T) {
	for _, rules := range []string{
		"[{rate: 1/8784h, burst: 1}]",              // a year to refill: the slowest
		"[{rate: 1000/8784h, burst: 1000}]",        // likewise, a larger burst
		"[{rate: 1e9/s, burst: 1000000000000000}]", // the fastest rate and the largest burst
		"[{rate: 10/s, burst: 100}, {rate: 10000/d, burst: 10000}]",
	} {
		data := "server: {max_delay_limit: 1h, read_timeout: 61m}\npolicies:\n  - name: api\n    match: \"GET /api/\"\n    max_delay: 1h\n    anonymous: " + rules + "\n"
		if _, err := Parse("ok.yaml", ".", []byte(data)); err != nil {
			t.Errorf("%s refused: %v", rules, err)
		}
	}
}
