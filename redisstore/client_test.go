package redisstore_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

// clientTimeout replaces the default timeout of 50 ms, which bounds the
// dial (with the TLS handshake under it) and every read: a loaded machine
// takes longer, and a ping fails with an i/o timeout instead of the answer
// under test. These tests are about the answers, not the timeout.
const clientTimeout = 10 * time.Second

func TestNewClientFromURLWithACLUser(t *testing.T) {
	srv := redistest.Start(t, redistest.WithACLUser("limiter", "s3cret"))
	client, err := redisstore.NewClient(redisstore.ClientOptions{URL: srv.URL(), Timeout: clientTimeout})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	if err := redisstore.Ping(ctx, client); err != nil {
		t.Fatalf("right credentials: %v", err)
	}
	rs := redisstore.New(client, redisstore.Options{})
	if r, err := rs.Check(ctx, sluice.Request{Key: "k", Cost: 1, Rules: []sluice.Rule{{Rate: 1, Burst: 1}}}); err != nil || !r.Allowed {
		t.Fatalf("check as an ACL user: %+v, %v", r, err)
	}

	bad, _ := redisstore.NewClient(redisstore.ClientOptions{URL: srv.URL(), Password: "wrong", Timeout: clientTimeout})
	defer bad.Close()
	if err := redisstore.Ping(ctx, bad); !errors.Is(err, redisstore.ErrCredentials) || !strings.Contains(err.Error(), "password") {
		t.Fatalf("wrong password: %v", err)
	}
}

func TestNewClientTLS(t *testing.T) {
	srv := redistest.Start(t, redistest.WithTLS())
	good, err := redisstore.NewClient(redisstore.ClientOptions{URL: srv.URL(), CACertFile: srv.CACertFile(), Timeout: clientTimeout})
	if err != nil {
		t.Fatal(err)
	}
	defer good.Close()
	if err := redisstore.Ping(ctx, good); err != nil {
		t.Fatalf("with the CA: %v", err)
	}
	untrusted, _ := redisstore.NewClient(redisstore.ClientOptions{URL: srv.URL(), Timeout: clientTimeout})
	defer untrusted.Close()
	if err := redisstore.Ping(ctx, untrusted); !errors.Is(err, redisstore.ErrCertificate) {
		t.Fatalf("without the CA: %v", err)
	}
	plain, _ := redisstore.NewClient(redisstore.ClientOptions{URL: strings.Replace(srv.URL(), "rediss://", "redis://", 1), Timeout: clientTimeout})
	defer plain.Close()
	if err := redisstore.Ping(ctx, plain); err == nil {
		t.Fatal("plain TCP to a TLS port answered")
	}
}

func TestNewClientRejectsBadOptions(t *testing.T) {
	for _, o := range []redisstore.ClientOptions{
		{},
		{URL: "http://x"},
		{URL: "redis://h:1/2", ClusterAddrs: []string{"h:1"}},
		{SentinelMaster: "m"},
		{SentinelMaster: "m", SentinelAddrs: []string{"h:1"}, ClusterAddrs: []string{"h:2"}},
		{URL: "redis://h:1", CACertFile: "/nonexistent"},
		{URL: "redis://h:1", CertFile: "/x"},
	} {
		if c, err := redisstore.NewClient(o); err == nil {
			c.Close()
			t.Errorf("NewClient(%+v) accepted", o)
		}
	}
}

// TestNewClientUnixSocket: a unix:// URL reaches Redis on its socket (the
// path is not read as a database number), with the database of ?db=.
func TestNewClientUnixSocket(t *testing.T) {
	srv := redistest.Start(t, redistest.WithUnixSocket())
	client, err := redisstore.NewClient(redisstore.ClientOptions{URL: "unix://" + srv.UnixSocket() + "?db=3", Timeout: clientTimeout})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	if err := client.Set(ctx, "where", "socket", 0).Err(); err != nil {
		t.Fatalf("over the socket: %v", err)
	}
	opts := srv.Options()
	opts.DB = 3
	db3 := redis.NewClient(opts)
	defer db3.Close()
	if v, err := db3.Get(ctx, "where").Result(); err != nil || v != "socket" {
		t.Fatalf("database 3 over TCP: %q, %v; want the key written over the socket", v, err)
	}
	rs := redisstore.New(client, redisstore.Options{})
	if r, err := rs.Check(ctx, sluice.Request{Key: "k", Cost: 1, Rules: []sluice.Rule{{Rate: 1, Burst: 1}}}); err != nil || !r.Allowed {
		t.Fatalf("check over the socket: %+v, %v", r, err)
	}
	if _, err := redisstore.NewClient(redisstore.ClientOptions{URL: "unix://" + srv.UnixSocket(), ClusterAddrs: []string{"127.0.0.1:1"}}); err == nil {
		t.Error("a unix socket with cluster addresses: no error")
	}
}
