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

// Listener is a net.Listener whose Accept closes a connection from an
// address that already holds max open connections.
type Listener struct {
	net.Listener
	max      int
	ipv6Bits int
	refused  func()

	mu   sync.Mutex
	open map[netip.Addr]int // open connections by client address; none at 0
}

// New bounds the connections of each client address on ln to max. IPv6
// addresses are grouped by their first ipv6Bits bits (1 to 128). refused,
// when set, is called for each connection closed past the bound.
func New(ln net.Listener, max, ipv6Bits int, refused func()) *Listener {
	if refused == nil {
		refused = func() {}
	}
	return &Listener{Listener: ln, max: max, ipv6Bits: ipv6Bits, refused: refused, open: make(map[netip.Addr]int)}
}

// Accept returns the next connection from an address under its bound.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		a, ok := l.client(c.RemoteAddr())
		if !ok {
			return c, nil
		}
		if l.acquire(a) {
			return &conn{Conn: c, l: l, addr: a}, nil
		}
		l.refused() // counted before the client can see the close
		_ = c.Close()
	}
}

// Open returns the connections open from the address of remote (its group,
// for IPv6).
func (l *Listener) Open(remote netip.Addr) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open[l.group(remote.Unmap())]
}

// Addresses returns the number of client addresses (groups, for IPv6)
// with connections open: what the listener keeps in memory.
func (l *Listener) Addresses() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.open)
}

func (l *Listener) acquire(a netip.Addr) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[a] >= l.max {
		return false
	}
	l.open[a]++
	return true
}

func (l *Listener) release(a netip.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[a] <= 1 {
		delete(l.open, a) // the map holds only the addresses with connections open
		return
	}
	l.open[a]--
}

// client returns the address remote is counted under.
func (l *Listener) client(remote net.Addr) (netip.Addr, bool) {
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
	return l.group(a.Unmap().WithZone("")), true
}

// group returns the first address of a's IPv6 prefix; IPv4 addresses stand
// alone.
func (l *Listener) group(a netip.Addr) netip.Addr {
	if a.Is6() && l.ipv6Bits > 0 && l.ipv6Bits < 128 {
		if p, err := a.Prefix(l.ipv6Bits); err == nil {
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
	c.once.Do(func() { c.l.release(c.addr) })
	return err
}
