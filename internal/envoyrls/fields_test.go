package envoyrls

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/memstore"
)

// Every header Limiter.Fields sets, with every header option on, is one
// headerValues passes to Envoy: none is dropped.
func TestHeaderValuesKeepsEveryField(t *testing.T) {
	store := memstore.New(memstore.Options{})
	defer store.Close()
	lim, err := httplimit.New(httplimit.Options{Store: store, XRateLimit: true, Policies: []httplimit.Policy{
		{Name: "p", Cost: 1, Authenticated: []sluice.Rule{{Rate: 1, Burst: 1}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	for _, res := range []sluice.Result{
		{Allowed: true, Limit: 1, Remaining: 0, ResetAfter: time.Second},
		{Allowed: false, Limit: 1, RetryAfter: time.Second, ResetAfter: time.Second},
	} {
		v := lim.Verdict(context.Background(), "p", httplimit.Attributes{Identity: "k"}, 0)
		h := lim.FieldsOf(v.Rules, res, 0)
		n := 0
		for _, v := range h {
			n += len(v)
		}
		got := headerValues(h)
		if len(got) != n || n < 8 {
			t.Fatalf("fields %v became %v", h, got)
		}
		for _, hv := range got {
			if h.Get(hv.Key) != hv.Value {
				t.Fatalf("%s: %q, want %q", hv.Key, hv.Value, h.Get(hv.Key))
			}
		}
	}
}
