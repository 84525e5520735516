package decide_test

import (
	"context"
	"fmt"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/memstore"
)

// A front door without HTTP decides by policy name: one call of the core,
// then a switch on what to do.
func ExampleCore_Decide() {
	store := memstore.New(memstore.Options{SweepInterval: -1})
	defer store.Close()
	core, err := decide.New(decide.Config{Store: store, Policies: []decide.Policy{{
		Name:          "payments",
		Authenticated: []sluice.Rule{{Rate: 1.0 / 60, Burst: 2}},
	}}})
	if err != nil {
		panic(err)
	}
	for range 3 {
		v := core.Decide(context.Background(), "payments", decide.Attributes{Identity: "user-1024"}, 1)
		switch v.Act {
		case decide.Serve, decide.Pass:
			fmt.Printf("serve (%s), %d left of %s\n", v.Outcome, v.Result.Remaining, v.Rules.Policy)
		case decide.Deny:
			fmt.Printf("refuse (%s), retry after %v\n", v.Outcome, v.Result.RetryAfter.Round(1e9))
		default:
			fmt.Println(v.Act, v.Err)
		}
	}
	v := core.Decide(context.Background(), "refunds", decide.Attributes{Identity: "user-1024"}, 1)
	fmt.Println(v.Act, v.Err)
	// Output:
	// serve (allowed), 1 left of "payments";q=2;w=120
	// serve (allowed), 0 left of "payments";q=2;w=120
	// refuse (denied), retry after 1m0s
	// invalid httplimit: unknown policy "refunds"
}
