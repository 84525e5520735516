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
)

// Counter counts what each client address holds open (connections,
// streams) against a bound. Its zero value is not usable; see NewCounter.
type Counter struct {
	max      int
	ipv6Bits int

	mu   sync.Mutex
	open map[netip.Addr]int // what each client address holds; none at 0
}

// NewCounter bounds what each client address holds to max. IPv6 addresses
// are grouped by their first ipv6Bits bits (1 to 128).
func NewCounter(max, ipv6Bits int) *Counter {
	return &Counter{max: max, ipv6Bits: ipv6Bits, open: make(map[netip.Addr]int)}
}

// Acquire counts one more for the address of remote and returns the key
// to Release it with. ok is false when the address already holds max;
// counted is false when remote has no IP address (a Unix socket), which
// is not counted and needs no Release.
func (c *Counter) Acquire(remote net.Addr) (key netip.Addr, counted, ok bool) {
	a, counted := c.client(remote)
	if !counted {
		return netip.Addr{}, false, true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.open[a] >= c.max {
		return a, true, false
	}
	c.open[a]++
	return a, true, true
}

// Release gives back one of what Acquire counted under key.
func (c *Counter) Release(key netip.Addr) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.open[key] <= 1 {
		delete(c.open, key) // the map holds only the addresses with something open
		return
	}
	c.open[key]--
}

// Open returns what the address of remote (its group, for IPv6) holds.
func (c *Counter) Open(remote netip.Addr) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.open[c.group(remote.Unmap())]
}

// Addresses returns the number of client addresses (groups, for IPv6)
// holding something: what the counter keeps in memory.
func (c *Counter) Addresses() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.open)
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

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.Release(c.addr) })
	return err
}
