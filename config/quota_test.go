package config

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// A quota: rule is a calendar quota in quota_time_zone, beside token
// buckets in the same list; rate: 10000/d stays a rolling bucket.
func TestQuotaRules(t *testing.T) {
	c, err := Parse("q.yaml", ".", []byte(`quota_time_zone: Europe/Berlin
policies:
  - name: api
    match: "GET /api/"
    authenticated:
      - {rate: 10/s, burst: 20}
      - quota: 100000/month
      - {rate: 10000/d, burst: 10000}
    anonymous: [{quota: 50/day}, {quota: 200/week}]
`))
	if err != nil {
		t.Fatal(err)
	}
	berlin, _ := time.LoadLocation("Europe/Berlin")
	month, _ := sluice.NewQuota(100000, sluice.Month, berlin)
	got := c.Policies[0].parsed.authenticated
	if len(got) != 3 || got[0] != (sluice.Rule{Rate: 10, Burst: 20}) || got[1].Period != sluice.Month || got[1].Burst != 100000 ||
		got[1].Rate != month.Rate || got[1].Zone.String() != "Europe/Berlin" || got[2].Period != sluice.Rolling {
		t.Fatalf("authenticated rules %+v; want 10/s, 100000/month in Berlin, 10000/d rolling", got)
	}
	if a := c.Policies[0].parsed.anonymous; len(a) != 2 || a[0].Period != sluice.Day || a[1].Period != sluice.Week {
		t.Fatalf("anonymous rules %+v", a)
	}
	c, err = Parse("q.yaml", ".", []byte("policies: [{name: api, match: /, anonymous: [{quota: 5/day}]}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if z := c.Policies[0].parsed.anonymous[0].Zone; z != time.UTC {
		t.Fatalf("zone %v; want UTC by default", z)
	}
}

// Bad zones and spellings are refused on their own line and field.
func TestQuotaRefused(t *testing.T) {
	const pol = "policies:\n  - name: api\n    match: \"GET /api/\"\n"
	for _, tc := range []struct {
		name, data string
		want       []string
	}{
		{"unknown zone", "quota_time_zone: Europe/Berln\n" + pol + "    anonymous: [{quota: 5/day}]\n",
			[]string{"bad.yaml:1: quota_time_zone: \"Europe/Berln\" is not a known time zone; want an IANA time zone name such as"}},
		{"lower-case zone", "quota_time_zone: europe/berlin\n" + pol + "    anonymous: [{quota: 5/day}]\n",
			[]string{"bad.yaml:1: quota_time_zone:", "case-sensitive"}},
		{"Local", "quota_time_zone: Local\n" + pol + "    anonymous: [{quota: 5/day}]\n",
			[]string{"bad.yaml:1: quota_time_zone: \"Local\" depends on the host"}},
		{"unknown period", pol + "    anonymous:\n      - quota: 5/fortnight\n",
			[]string{"bad.yaml:5: policies[0].anonymous[0].quota: quota \"5/fortnight\": unknown period \"fortnight\"; want COUNT/PERIOD such as 1000/day"}},
		{"abbreviated period", pol + "    anonymous:\n      - quota: 5/d\n",
			[]string{"bad.yaml:5: policies[0].anonymous[0].quota:", "unknown period \"d\""}},
		{"fractional count", pol + "    anonymous:\n      - quota: 2.5/day\n",
			[]string{"bad.yaml:5: policies[0].anonymous[0].quota:", "not a whole number"}},
		{"rate per month", pol + "    anonymous:\n      - rate: 1000/month\n        burst: 10\n",
			[]string{"bad.yaml:5: policies[0].anonymous[0].rate:", "unknown unit \"month\"", "write quota: COUNT/day, COUNT/week or COUNT/month"}},
		{"quota with burst", pol + "    anonymous:\n      - quota: 100/day\n        burst: 10\n",
			[]string{"bad.yaml:6: policies[0].anonymous[0].burst: a quota's count is its burst"}},
		{"quota with rate", pol + "    anonymous:\n      - quota: 100/day\n        rate: 10/s\n",
			[]string{"bad.yaml:6: policies[0].anonymous[0].rate: a rule is either quota:"}},
		{"cost above the quota", pol + "    cost: 10\n    anonymous:\n      - quota: 5/week\n",
			[]string{"bad.yaml:6: policies[0].anonymous[0].quota: 5 a week is below the policy's cost 10"}},
		{"above MaxBurst", pol + "    anonymous:\n      - quota: 1000000000000001/month\n",
			[]string{"bad.yaml:5: policies[0].anonymous[0].quota: 1000000000000001: want at most 1000000000000000"}},
		{"another algorithm", pol + "    algorithm: fixed_window\n    anonymous:\n      - quota: 5/day\n",
			[]string{"bad.yaml:6: policies[0].anonymous[0].quota: algorithm fixed_window knows no calendar"}},
		{"typo in the field", pol + "    anonymous:\n      - quotas: 5/day\n",
			[]string{"bad.yaml:5: policies[0].anonymous[0].quotas:", "did you mean"}},
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
