package redisstore

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// A connection of NewClient that read a reply within recentlyRead skips
// go-redis's health-check peek; one idle longer is peeked again.
func TestHealthCheckPeekSkippedOnlyRightAfterARead(t *testing.T) {
	srv := redistest.Start(t)
	c, err := dialRecent(10*time.Second)(context.Background(), "tcp", srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, ok := c.(*recentConn); !ok {
		t.Fatalf("dialRecent gave a %T, want a *recentConn", c)
	}
	peeked := func() bool {
		raw, err := c.(*recentConn).SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		called := false
		if err := raw.Read(func(uintptr) bool { called = true; return true }); err != nil {
			t.Fatal(err)
		}
		return called
	}
	if !peeked() {
		t.Error("a connection that never read was not peeked")
	}
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 16)
	if n, err := c.Read(buf); err != nil || string(buf[:n]) != "+PONG\r\n" {
		t.Fatalf("read %q, %v", buf[:n], err)
	}
	readAt := time.Now()
	skipped := !peeked()
	if elapsed := time.Since(readAt); !skipped && elapsed < recentlyRead {
		t.Errorf("peeked %v after a read, within %v", elapsed, recentlyRead)
	}
	time.Sleep(2 * recentlyRead)
	if !peeked() {
		t.Errorf("not peeked %v after the last read", time.Since(readAt))
	}
}

// A connection that Redis closed while it idled in the pool is found by
// the health check and replaced: the next command succeeds, with no retry
// (FailFast).
func TestNewClientReplacesAConnectionRedisClosed(t *testing.T) {
	srv := redistest.Start(t)
	client, err := NewClient(ClientOptions{URL: srv.URL(), Timeout: 10 * time.Second, FailFast: true, PoolSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	ctx := context.Background()
	id, err := client.ClientID(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	killer := srv.Client(t)
	if err := killer.ClientKillByFilter(ctx, "ID", strconv.FormatInt(id, 10)).Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * recentlyRead) // idle past the window: peeked again
	if err := client.Ping(ctx).Err(); err != nil {
		t.Fatalf("ping after Redis closed the pooled connection: %v", err)
	}
}
