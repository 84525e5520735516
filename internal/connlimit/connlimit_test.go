package connlimit

import (
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// dialFrom opens a TCP connection to addr from the source address src
// (any 127.0.0.0/8 address is this machine's on Linux).
func dialFrom(t *testing.T, src, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 10 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial from %s: %v", src, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// closedByPeer reports whether the server closed c: a read ends with EOF
// or a reset, not with a generous deadline. The server writes nothing.
func closedByPeer(t *testing.T, c net.Conn) bool {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	n, err := c.Read(make([]byte, 1))
	if n != 0 {
		t.Fatalf("read %d bytes; the server writes nothing", n)
	}
	return !errors.Is(err, os.ErrDeadlineExceeded)
}

// echo serves each accepted connection by echoing it, so that a client can
// tell an admitted connection (its byte comes back) from a closed one.
func echo(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() { _, _ = io.Copy(c, c); c.Close() }()
	}
}

func echoes(t *testing.T, c net.Conn) bool {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.Write([]byte{'x'}); err != nil {
		return false
	}
	b := make([]byte, 1)
	_, err := io.ReadFull(c, b)
	return err == nil && b[0] == 'x'
}

// TestOneAddressCannotTakeEveryConnection: an address that holds its max
// connections gets each further one closed at once, reopen as it may,
// while another address is served; a closed connection frees its slot,
// and an address without connections costs no memory.
func TestOneAddressCannotTakeEveryConnection(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var refused atomic.Int64
	ln := New(raw, 3, 64, func() { refused.Add(1) })
	defer ln.Close()
	go echo(ln)
	addr := raw.Addr().String()

	var held []net.Conn
	for range 3 {
		c := dialFrom(t, "127.0.0.1", addr)
		if !echoes(t, c) {
			t.Fatal("a connection within the bound was not served")
		}
		held = append(held, c)
	}
	for i := range 5 { // reopening does not help
		if c := dialFrom(t, "127.0.0.1", addr); !closedByPeer(t, c) {
			t.Fatalf("connection %d past the bound of 3 was left open", 4+i)
		}
	}
	if got := refused.Load(); got != 5 {
		t.Fatalf("refused counted %d, want 5", got)
	}
	other := dialFrom(t, "127.0.0.2", addr)
	if !echoes(t, other) {
		t.Fatal("another address was not served while the first held its bound")
	}
	if got := ln.Open(netip.MustParseAddr("127.0.0.1")); got != 3 {
		t.Fatalf("open from 127.0.0.1: %d, want 3", got)
	}

	held[0].Close()
	// The server sees the close when its echo ends; poll for the slot.
	deadline := time.Now().Add(30 * time.Second)
	for ln.Open(netip.MustParseAddr("127.0.0.1")) != 2 {
		if time.Now().After(deadline) {
			t.Fatal("a closed connection did not give its slot back")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if c := dialFrom(t, "127.0.0.1", addr); !echoes(t, c) {
		t.Fatal("a freed slot was not given to a new connection")
	}

	for _, c := range held[1:] {
		c.Close()
	}
	other.Close()
	deadline = time.Now().Add(30 * time.Second)
	for ln.Addresses() != 1 { // only the connection just opened
		if time.Now().After(deadline) {
			t.Fatalf("%d addresses kept after their connections closed, want 1", ln.Addresses())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestClientAddress: IPv6 addresses count by their prefix, IPv4-mapped
// ones as IPv4, zones are dropped, and what has no IP is not counted.
func TestClientAddress(t *testing.T) {
	l := New(nil, 1, 64, nil)
	for _, tc := range []struct {
		remote net.Addr
		want   string // "" for not counted
	}{
		{&net.TCPAddr{IP: net.ParseIP("192.0.2.7"), Port: 1}, "192.0.2.7"},
		{&net.TCPAddr{IP: net.ParseIP("::ffff:192.0.2.7"), Port: 1}, "192.0.2.7"},
		{&net.TCPAddr{IP: net.ParseIP("2001:db8:1:2:3:4:5:6"), Port: 1}, "2001:db8:1:2::"},
		{&net.TCPAddr{IP: net.ParseIP("2001:db8:1:2:ffff::1"), Port: 1}, "2001:db8:1:2::"},
		{&net.TCPAddr{IP: net.ParseIP("fe80::1"), Port: 1, Zone: "eth0"}, "fe80::"},
		{&net.UnixAddr{Name: "/run/sluice.sock", Net: "unix"}, ""},
		{&net.TCPAddr{}, ""},
		{nil, ""},
	} {
		a, ok := l.client(tc.remote)
		if got := map[bool]string{true: a.String(), false: ""}[ok]; got != tc.want {
			t.Errorf("%v: counted as %q, want %q", tc.remote, got, tc.want)
		}
	}
	if a, _ := New(nil, 1, 128, nil).client(&net.TCPAddr{IP: net.ParseIP("2001:db8::1"), Port: 1}); a.String() != "2001:db8::1" {
		t.Errorf("with a /128 prefix: %v", a)
	}
}

// TestCounterConcurrent: goroutines acquire and release on a few addresses
// at once (under -race). No address ever holds more than the bound, every
// release is matched, and the counter ends empty, with nothing kept for the
// addresses that hold nothing.
func TestCounterConcurrent(t *testing.T) {
	const bound, workers, rounds = 3, 16, 2000
	c := NewCounter(bound, 64)
	addrs := []net.Addr{
		&net.TCPAddr{IP: net.ParseIP("192.0.2.1"), Port: 1},
		&net.TCPAddr{IP: net.ParseIP("192.0.2.2"), Port: 1},
		&net.TCPAddr{IP: net.ParseIP("2001:db8::1"), Port: 1},
	}
	var held [3]atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				i := (w + r) % len(addrs)
				key, counted, ok := c.Acquire(addrs[i])
				if !counted {
					t.Errorf("%v not counted", addrs[i])
					return
				}
				if !ok {
					continue
				}
				if n := held[i].Add(1); n > bound {
					t.Errorf("%v holds %d; the bound is %d", addrs[i], n, bound)
				}
				held[i].Add(-1)
				c.Release(key)
			}
		}()
	}
	wg.Wait()
	if n := c.Addresses(); n != 0 {
		t.Errorf("Addresses() = %d after every release; want 0", n)
	}
	entries := 0
	c.open.Range(func(_, _ any) bool { entries++; return true })
	if entries != 0 {
		t.Errorf("%d addresses kept after every release; want none", entries)
	}
	// Still usable: the bound holds afresh.
	for range bound {
		if _, _, ok := c.Acquire(addrs[0]); !ok {
			t.Fatal("refused under the bound after the storm")
		}
	}
	if _, _, ok := c.Acquire(addrs[0]); ok {
		t.Error("accepted past the bound after the storm")
	}
	if got := c.Open(netip.MustParseAddr("192.0.2.1")); got != bound {
		t.Errorf("Open = %d; want %d", got, bound)
	}
}

// closeSeer is a connection that notes, when it is closed, how many
// connections its listener still counts for its address.
type closeSeer struct {
	net.Conn
	l    *Listener
	open int
}

func (c *closeSeer) Close() error {
	c.open = c.l.Open(netip.MustParseAddr("127.0.0.1"))
	return c.Conn.Close()
}

// oneConn is a listener that hands out one connection, then blocks.
type oneConn struct {
	net.Listener
	c net.Conn
}

func (o *oneConn) Accept() (net.Conn, error) {
	if c := o.c; c != nil {
		o.c = nil
		return c, nil
	}
	return o.Listener.Accept()
}

// A connection's count is released before its socket closes: a client
// that sees the close and dials again at once finds its slot free (the
// other order refused it when the closer was descheduled in between).
func TestReleasedBeforeClose(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	seer := &closeSeer{Conn: server}
	l := New(&oneConn{Listener: ln, c: seer}, 1, 64, nil)
	seer.l = l
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	if n := l.Open(netip.MustParseAddr("127.0.0.1")); n != 1 {
		t.Fatalf("%d open after Accept, want 1", n)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if seer.open != 0 {
		t.Fatalf("the socket closed while its address still counted %d connection(s); want 0: release first", seer.open)
	}
}

// TestHeldReleasesWhatItHolds: a Held's Release gives back the count that
// Hold took, under the bound and at the map's level, as Release does; a
// refused or uncounted Held releases nothing.
func TestHeldReleasesWhatItHolds(t *testing.T) {
	const bound = 2
	c := NewCounter(bound, 64)
	a := &net.TCPAddr{IP: net.ParseIP("2001:db8::1"), Port: 1}
	b := &net.TCPAddr{IP: net.ParseIP("2001:db8::2"), Port: 2} // same /64
	var held []Held
	for _, r := range []net.Addr{a, b} {
		h, counted, ok := c.Hold(r)
		if !counted || !ok {
			t.Fatalf("Hold(%v) = counted %v, ok %v under the bound", r, counted, ok)
		}
		held = append(held, h)
	}
	refused, counted, ok := c.Hold(a)
	if !counted || ok {
		t.Fatalf("Hold past the bound = counted %v, ok %v; want refused", counted, ok)
	}
	refused.Release() // holds nothing: must not free a slot
	if _, _, ok := c.Hold(b); ok {
		t.Fatal("a refused Held's Release freed a slot")
	}
	unix, counted, ok := c.Hold(&net.UnixAddr{Name: "@x", Net: "unix"})
	if counted || !ok {
		t.Fatalf("Hold(unix) = counted %v, ok %v; want not counted, ok", counted, ok)
	}
	unix.Release()
	held[0].Release()
	if got := c.Open(netip.MustParseAddr("2001:db8::")); got != bound-1 {
		t.Fatalf("Open after one Release = %d; want %d", got, bound-1)
	}
	h, _, ok := c.Hold(a)
	if !ok {
		t.Fatal("refused after a Release under the bound")
	}
	h.Release()
	held[1].Release()
	// The address is retired at zero: nothing of it is left in the map.
	c.open.Range(func(k, v any) bool {
		t.Errorf("%v kept (count %d) after every release; want it retired", k, v.(*slot).n.Load())
		return true
	})
}

// TestHoldOnABusyAddressAllocatesNothing: the gRPC listener holds a count
// for every stream, and Envoy's streams come from a few addresses that
// hold many at once: a Hold and its Release on an address that already
// holds something allocate nothing (the first of an address boxes its
// key and makes its slot).
func TestHoldOnABusyAddressAllocatesNothing(t *testing.T) {
	c := NewCounter(8, 64)
	for _, a := range []net.Addr{
		&net.TCPAddr{IP: net.ParseIP("192.0.2.1"), Port: 1},
		&net.TCPAddr{IP: net.ParseIP("2001:db8::1"), Port: 1},
	} {
		first, _, ok := c.Hold(a)
		if !ok {
			t.Fatalf("Hold(%v) refused", a)
		}
		if n := testing.AllocsPerRun(1000, func() {
			h, _, ok := c.Hold(a)
			if !ok {
				t.Fatalf("Hold(%v) refused", a)
			}
			h.Release()
		}); n != 0 {
			t.Errorf("Hold and Release on %v, which holds one: %v allocations; want 0", a, n)
		}
		first.Release()
	}
}
