package resilient_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"syscall"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/resilient"
)

// refusing is a store whose every call fails as a refused connection does.
type refusing struct{}

var errRefused = &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}

func (refusing) Check(context.Context, sluice.Request) (sluice.Result, error) {
	return sluice.Result{}, errRefused
}

func (refusing) Adjust(context.Context, sluice.Request, int64) (sluice.Result, error) {
	return sluice.Result{}, errRefused
}

// While the store is down, the failure policy decides: Local (the default)
// with an in-process bucket of the same rule, Open lets every request
// through, Closed refuses with ErrUnavailable.
func ExampleNew() {
	ctx := context.Background()
	req := sluice.Request{Key: "user-1024", Cost: 1, Rules: []sluice.Rule{{Rate: 1.0 / 3600, Burst: 2}}} // 1/h, burst 2
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, mode := range []resilient.Mode{resilient.Local, resilient.Open, resilient.Closed} {
		store := resilient.New(refusing{}, resilient.Options{OnError: mode, Logger: quiet})
		for range 3 {
			res, d, err := store.CheckDecision(ctx, req)
			fmt.Printf("%s: allowed=%v decided_by=%v unavailable=%v\n", mode, res.Allowed, d.Source, errors.Is(err, resilient.ErrUnavailable))
		}
		store.Close()
	}
	// Output:
	// local: allowed=true decided_by=local unavailable=false
	// local: allowed=true decided_by=local unavailable=false
	// local: allowed=false decided_by=local unavailable=false
	// open: allowed=true decided_by=open unavailable=false
	// open: allowed=true decided_by=open unavailable=false
	// open: allowed=true decided_by=open unavailable=false
	// closed: allowed=false decided_by=closed unavailable=true
	// closed: allowed=false decided_by=closed unavailable=true
	// closed: allowed=false decided_by=closed unavailable=true
}
