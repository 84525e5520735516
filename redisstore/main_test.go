package redisstore_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// exampleRedis is the address of the redis-server the examples use.
var exampleRedis string

// TestMain silences go-redis's own log of failed dials (the fault tests
// kill servers on purpose, and their assertions say what matters) and
// starts the examples' redis-server.
func TestMain(m *testing.M) {
	redis.SetLogger(quiet{})
	srv, stop, err := redistest.StartMain()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	exampleRedis = srv.Addr()
	code := m.Run()
	stop()
	os.Exit(code)
}
