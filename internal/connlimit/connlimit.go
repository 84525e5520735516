// Package connlimit bounds the connections that one client address holds
// open on a listener, so that one client cannot take every connection a
// listener may have (server.max_connections) and lock every other client
// out until its idle connections time out. A connection past the bound is
// closed as soon as it is accepted, before anything is read from it: a
// client that holds its share and reopens what is closed gets nothing
// more, and a flood of them costs an accept and a close each.
//
// IPv4 addresses are counted one by one; IPv6 addresses by their prefix
// (a /64 is one household or one server, which can pick any address in
// it). Connections without an IP address (a Unix socket) are not counted.
package connlimit

import (
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
)

// Counter counts what each client address holds open (connections,
// streams) against a bound. Its zero value is not usable; see NewCounter.
//
// It takes no lock: the gRPC listener counts every stream from the
// connection's reader, where a mutex shared by all streams of all
// connections made the readers queue on each other at a few hundred
// streams (BENCHMARKS.md, "Issue 26: 128 → 512 callers"). Each address's
// count is an atomic in a sync.Map, retired at zero (see release).
type Counter struct {
	max      int
	ipv6Bits int

	open sync.Map // netip.Addr → *slot; only the addresses with something open
}

// slot is one address's count; dead (-1) once retired from the map, so
// that an Acquire that loaded it before takes a fresh one. key is the
// address boxed for the map, once for the slot's life: a netip.Addr boxed
// allocates, and Hold and Release on an address that holds something
// then box nothing.
type slot struct {
	n   atomic.Int64
	key any
}

const dead = -1

// NewCounter bounds what each client address holds to max. IPv6 addresses
// are grouped by their first ipv6Bits bits (1 to 128).
func NewCounter(max, ipv6Bits int) *Counter {
	return &Counter{max: max, ipv6Bits: ipv6Bits}
}

// Acquire counts one more for the address of remote and returns the key
// to Release it with. ok is false when the address already holds max;
// counted is false when remote has no IP address (a Unix socket), which
// is not counted and needs no Release.
func (c *Counter) Acquire(remote net.Addr) (key netip.Addr, counted, ok bool) {
	key, _, counted, ok = c.hold(remote)
	return key, counted, ok
}

// Held is one count that Hold took; its Release gives it back without
// looking the address up again.
type Held struct {
	c  *Counter
	sl *slot
}

// Hold is Acquire returning the count it took as a Held, whose Release
// costs no allocation (the gRPC listener counts every stream); nor does
// Hold, when the address already holds something. It gives the same
// guarantees: ok is false when the address already holds max, counted is
// false when remote has no IP address (nothing to release).
func (c *Counter) Hold(remote net.Addr) (h Held, counted, ok bool) {
	_, sl, counted, ok := c.hold(remote)
	if sl == nil {
		return Held{}, counted, ok
	}
	return Held{c: c, sl: sl}, true, true
}

// hold counts one more for the address of remote in its slot, and
// returns both; sl is nil when nothing was counted.
func (c *Counter) hold(remote net.Addr) (a netip.Addr, sl *slot, counted, ok bool) {
	a, counted = c.client(remote)
	if !counted {
		return a, nil, false, true
	}
	for {
		// The key boxed here does not escape (sync.Map's Load keeps no
		// reference to it): only a new slot boxes one to keep.
		v, loaded := c.open.Load(any(a))
		if !loaded {
			fresh := &slot{key: any(a)}
			v, _ = c.open.LoadOrStore(fresh.key, fresh)
		}
		sl := v.(*slot)
		for {
			n := sl.n.Load()
			if n == dead {
				break // retired: take the map's next slot
			}
			if n >= int64(c.max) {
				return a, nil, true, false
			}
			if sl.n.CompareAndSwap(n, n+1) {
				return a, sl, true, true
			}
		}
	}
}

// Release gives back one of what Acquire counted under key.
func (c *Counter) Release(key netip.Addr) {
	v, ok := c.open.Load(key)
	if !ok {
		return // not counted: nothing to give back
	}
	c.release(v.(*slot))
}

// Release gives back the count h holds; call it once. The slot it
// decrements is the one Hold incremented: a slot above zero is never
// retired, so it is the map's slot for the address, as Release finds.
// A Held that holds nothing (not counted, or refused) releases nothing.
func (h Held) Release() {
	if h.sl != nil {
		h.c.release(h.sl)
	}
}

func (c *Counter) release(sl *slot) {
	if sl.n.Add(-1) > 0 {
		return
	}
	// At zero, retire the slot unless an Acquire got in first; one that
	// loaded it and finds it dead takes a new one from the map.
	if sl.n.CompareAndSwap(0, dead) {
		c.open.CompareAndDelete(sl.key, sl)
	}
}

// Open returns what the address of remote (its group, for IPv6) holds.
func (c *Counter) Open(remote netip.Addr) int {
	v, ok := c.open.Load(c.group(remote.Unmap()))
	if !ok {
		return 0
	}
	return int(max(0, v.(*slot).n.Load()))
}

// Addresses returns the number of client addresses (groups, for IPv6)
// holding something: what the counter keeps in memory.
func (c *Counter) Addresses() int {
	n := 0
	c.open.Range(func(_, v any) bool {
		if v.(*slot).n.Load() > 0 {
			n++
		}
		return true
	})
	return n
}

// Listener is a net.Listener whose Accept closes a connection from an
// address that already holds max open connections.
type Listener struct {
	net.Listener
	*Counter
	refused func()
}

// New bounds the connections of each client address on ln to max. IPv6
// addresses are grouped by their first ipv6Bits bits (1 to 128). refused,
// when set, is called for each connection closed past the bound.
func New(ln net.Listener, max, ipv6Bits int, refused func()) *Listener {
	if refused == nil {
		refused = func() {}
	}
	return &Listener{Listener: ln, Counter: NewCounter(max, ipv6Bits), refused: refused}
}

// Accept returns the next connection from an address under its bound.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		a, counted, ok := l.Acquire(c.RemoteAddr())
		if !counted {
			return c, nil
		}
		if ok {
			return &conn{Conn: c, l: l, addr: a}, nil
		}
		l.refused() // counted before the client can see the close
		_ = c.Close()
	}
}

// client returns the address remote is counted under.
func (c *Counter) client(remote net.Addr) (netip.Addr, bool) {
	var a netip.Addr
	switch r := remote.(type) {
	case *net.TCPAddr:
		a = r.AddrPort().Addr()
	case nil:
		return netip.Addr{}, false
	default:
		ap, err := netip.ParseAddrPort(remote.String())
		if err != nil {
			return netip.Addr{}, false
		}
		a = ap.Addr()
	}
	if !a.IsValid() {
		return netip.Addr{}, false
	}
	return c.group(a.Unmap().WithZone("")), true
}

// group returns the first address of a's IPv6 prefix; IPv4 addresses stand
// alone.
func (c *Counter) group(a netip.Addr) netip.Addr {
	if a.Is6() && c.ipv6Bits > 0 && c.ipv6Bits < 128 {
		if p, err := a.Prefix(c.ipv6Bits); err == nil {
			return p.Addr()
		}
	}
	return a
}

// conn gives its address's slot back when it is closed, once.
type conn struct {
	net.Conn
	l    *Listener
	addr netip.Addr
	once sync.Once
}

// Close releases the connection's count before it closes the socket: a
// client that sees its connection closed and dials again at once is not
// refused for the connection it no longer has.
func (c *conn) Close() error {
	c.once.Do(func() { c.l.Release(c.addr) })
	return c.Conn.Close()
}
