package redisstore

import (
	"context"
	"net"
	"sync/atomic"
	"syscall"
	"time"
)

// go-redis checks a pooled connection's health each time it takes it from
// the pool: it clears the connection's deadline and peeks at the socket
// (a recvfrom system call) for an end of file or unexpected data. Under
// load a connection comes back to the pool and goes out again within
// microseconds, and the peek costs a system call a command. A connection
// that answered within the last recentlyRead has shown that it works, so
// NewClient's connections skip the peek then (go-redis's check treats a
// connection whose raw read is not called as healthy); one idle longer is
// peeked as before, which is what finds those a restarted or idle-timing
// Redis closed. A connection closed within that window (Redis killed
// under load) fails its next command, as it would have failed to redial.
const recentlyRead = 20 * time.Millisecond

// clockStart is the origin of recentConn's monotonic clock.
var clockStart = time.Now()

// recentConn is a TCP connection that remembers when it last read data.
type recentConn struct {
	net.Conn
	raw      syscall.RawConn
	lastRead atomic.Int64 // ns since clockStart; 0: never
}

// dialRecent dials as go-redis's default dialer does, without TLS.
func dialRecent(timeout time.Duration) func(ctx context.Context, network, addr string) (net.Conn, error) {
	d := &net.Dialer{Timeout: timeout, KeepAliveConfig: net.KeepAliveConfig{
		Enable: true, Idle: 30 * time.Second, Interval: 5 * time.Second, Count: 3}}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return wrapRecent(c), nil
	}
}

// wrapRecent wraps c, when it exposes its socket; otherwise it returns c.
func wrapRecent(c net.Conn) net.Conn {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return c
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return c
	}
	return &recentConn{Conn: c, raw: raw}
}

func (c *recentConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.lastRead.Store(int64(time.Since(clockStart)))
	}
	return n, err
}

// SyscallConn returns the socket, whose Read skips the health check's peek
// when the connection read data within recentlyRead.
func (c *recentConn) SyscallConn() (syscall.RawConn, error) { return recentRaw{c}, nil }

type recentRaw struct{ c *recentConn }

func (r recentRaw) Control(f func(fd uintptr)) error { return r.c.raw.Control(f) }
func (r recentRaw) Write(f func(fd uintptr) bool) error {
	return r.c.raw.Write(f)
}

func (r recentRaw) Read(f func(fd uintptr) bool) error {
	if last := r.c.lastRead.Load(); last > 0 && int64(time.Since(clockStart))-last < int64(recentlyRead) {
		return nil
	}
	return r.c.raw.Read(f)
}
