package config

import (
	"fmt"
	"time"
)

// Server bounds what one client can hold of the gateway: how long a request may take to arrive, how
// large it may be, how many requests are served at once on each listener,
// and how long a paced request may be held. Every field has a safe
// default; the timeouts and sizes apply to the traffic and decision
// listeners alike.
type Server struct {
	// ReadHeaderTimeout bounds reading a request's headers; default 10s.
	ReadHeaderTimeout time.Duration `yaml:"read_header_timeout"`
	// ReadTimeout bounds reading a whole request, headers and body, from
	// its first byte; default 30s. The time a paced request is held counts
	// against it, so it must exceed max_delay_limit; raise it for large
	// uploads over slow links.
	ReadTimeout time.Duration `yaml:"read_timeout"`
	// WriteTimeout bounds the time from the end of the headers to the end
	// of the response, pacing and the upstream's answer included; default
	// 0, none, so that long responses (downloads, event streams) pass.
	WriteTimeout time.Duration `yaml:"write_timeout"`
	// IdleTimeout closes a keep-alive connection that sends no new
	// request; default 2m.
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// MaxHeaderBytes bounds the request line and headers; default 64 KiB.
	MaxHeaderBytes int `yaml:"max_header_bytes"`
	// MaxBodyBytes bounds a proxied request's body (413 beyond it);
	// default 10 MiB, 0: no bound. The decision API has its own 64 KiB.
	MaxBodyBytes *int64 `yaml:"max_body_bytes"`
	// MaxInFlight bounds the requests served at once on each listener,
	// paced requests being held included; beyond it a request gets 503
	// with Retry-After. Default 10000.
	MaxInFlight int `yaml:"max_in_flight"`
	// MaxConnections bounds the open connections of each listener, idle
	// keep-alive ones included, so that a flood of connections cannot
	// take the descriptors the gateway needs for its upstream and Redis;
	// beyond it a new connection gets 503 and is closed. Default 10000.
	MaxConnections int `yaml:"max_connections"`
	// MaxConnectionsPerIP bounds the open connections of one client
	// address (an IPv6 address by its ipv6_prefix) on each listener, so
	// that one client cannot take all of max_connections and lock the
	// others out; beyond it a new connection is closed at once. Default
	// 256: a browser opens at most 6 connections to a host, so it is an
	// office of some 40 browsers behind one NAT, while 40 addresses are
	// needed to fill the default max_connections. Behind a proxy every
	// client has the proxy's address: size it to the proxy's connections
	// (docs/http.md). With max_connections below 1024 the default is a
	// quarter of it.
	MaxConnectionsPerIP int `yaml:"max_connections_per_ip"`
	// MaxDelayLimit is the most a policy's max_delay may be; default 10s.
	MaxDelayLimit time.Duration `yaml:"max_delay_limit"`
	// ShutdownDelay is how long the listeners keep serving after SIGTERM,
	// /readyz answering 503 meanwhile, so that load balancers stop sending
	// before they stop accepting; default 5s, 0s: none (drain.go).
	ShutdownDelay *time.Duration `yaml:"shutdown_delay"`
	// ShutdownTimeout bounds how long requests in flight may finish once
	// the listeners stopped accepting; default 15s. Beyond it their
	// connections are closed.
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout"`
}

// Defaults of the server section.
const (
	DefaultReadHeaderTimeout   = 10 * time.Second
	DefaultReadTimeout         = 30 * time.Second
	DefaultIdleTimeout         = 2 * time.Minute
	DefaultMaxHeaderBytes      = 64 << 10
	DefaultMaxBodyBytes        = 10 << 20
	DefaultMaxInFlight         = 10_000
	DefaultMaxConnections      = 10_000
	DefaultMaxConnectionsPerIP = 256
	DefaultMaxDelayLimit       = 10 * time.Second
	DefaultShutdownDelay       = 5 * time.Second
	DefaultShutdownTimeout     = 15 * time.Second
)

// maxShutdown bounds shutdown_delay and shutdown_timeout: a process that
// takes longer to stop is killed by whatever stops it (Kubernetes' grace
// period is 30s by default).
const maxShutdown = 10 * time.Minute

// BodyLimit returns the bound on a proxied request's body, 0 for none.
func (s *Server) BodyLimit() int64 {
	if s.MaxBodyBytes == nil {
		return DefaultMaxBodyBytes
	}
	return *s.MaxBodyBytes
}

func (s *Server) defaults() {
	dur := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	dur(&s.ReadHeaderTimeout, DefaultReadHeaderTimeout)
	dur(&s.ReadTimeout, DefaultReadTimeout)
	dur(&s.IdleTimeout, DefaultIdleTimeout)
	dur(&s.MaxDelayLimit, DefaultMaxDelayLimit)
	dur(&s.ShutdownTimeout, DefaultShutdownTimeout)
	if s.ShutdownDelay == nil {
		d := DefaultShutdownDelay
		s.ShutdownDelay = &d
	}
	if s.MaxHeaderBytes == 0 {
		s.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if s.MaxBodyBytes == nil {
		n := int64(DefaultMaxBodyBytes)
		s.MaxBodyBytes = &n
	}
	if s.MaxInFlight == 0 {
		s.MaxInFlight = DefaultMaxInFlight
	}
	if s.MaxConnections == 0 {
		s.MaxConnections = DefaultMaxConnections
	}
	if s.MaxConnectionsPerIP == 0 {
		s.MaxConnectionsPerIP = min(DefaultMaxConnectionsPerIP, max(1, s.MaxConnections/4))
	}
}

func (v *validator) server() {
	s := &v.c.Server
	for _, f := range []struct {
		field string
		d     time.Duration
	}{
		{"read_header_timeout", s.ReadHeaderTimeout},
		{"read_timeout", s.ReadTimeout},
		{"idle_timeout", s.IdleTimeout},
		{"max_delay_limit", s.MaxDelayLimit},
		{"shutdown_timeout", s.ShutdownTimeout},
	} {
		if f.d < 0 {
			v.fail("server."+f.field, "%v: want a positive duration such as 10s", f.d)
		}
	}
	if s.WriteTimeout < 0 {
		v.fail("server.write_timeout", "%v: want 0s (none) or a positive duration such as 1m", s.WriteTimeout)
	}
	if *s.ShutdownDelay < 0 || *s.ShutdownDelay > maxShutdown {
		v.fail("server.shutdown_delay", "%v: want how long to keep serving after SIGTERM, from 0s (none) to %v, such as 5s", *s.ShutdownDelay, maxShutdown)
	}
	if s.ShutdownTimeout > maxShutdown {
		v.fail("server.shutdown_timeout", "%v: want at most %v, such as 15s", s.ShutdownTimeout, maxShutdown)
	}
	if s.MaxHeaderBytes < 1<<10 || s.MaxHeaderBytes > 16<<20 {
		v.fail("server.max_header_bytes", "%d: want a size from 1024 to 16777216 bytes, such as 65536", s.MaxHeaderBytes)
	}
	if *s.MaxBodyBytes < 0 {
		v.fail("server.max_body_bytes", "%d: want a size in bytes such as 10485760, or 0 for no bound", *s.MaxBodyBytes)
	}
	if s.MaxInFlight < 1 {
		v.fail("server.max_in_flight", "%d: want the most requests served at once on a listener, such as 10000", s.MaxInFlight)
	}
	if s.MaxConnections < 1 {
		v.fail("server.max_connections", "%d: want the most open connections of a listener, such as 10000", s.MaxConnections)
	}
	switch {
	case s.MaxConnectionsPerIP < 1:
		v.fail("server.max_connections_per_ip", "%d: want the most open connections of one client address on a listener, such as 256", s.MaxConnectionsPerIP)
	case s.MaxConnections >= 1 && s.MaxConnectionsPerIP > s.MaxConnections:
		v.fail("server.max_connections_per_ip", "%d is above server.max_connections %d, so it would never apply; want at most %d", s.MaxConnectionsPerIP, s.MaxConnections, s.MaxConnections)
	}
	if s.MaxDelayLimit > 0 && s.ReadTimeout > 0 && s.ReadTimeout <= s.MaxDelayLimit {
		v.fail("server.read_timeout", "%v is not above server.max_delay_limit %v: a paced request held that long would have no time left to send its body; raise read_timeout or lower max_delay_limit", s.ReadTimeout, s.MaxDelayLimit)
	}
	if s.WriteTimeout > 0 && s.WriteTimeout <= s.MaxDelayLimit {
		v.fail("server.write_timeout", "%v is not above server.max_delay_limit %v: a paced request held that long would have no time left for its answer; raise write_timeout or lower max_delay_limit", s.WriteTimeout, s.MaxDelayLimit)
	}
	for i, p := range v.c.Policies {
		if s.MaxDelayLimit > 0 && p.MaxDelay > s.MaxDelayLimit {
			v.fail(fmt.Sprintf("policies[%d].max_delay", i), "%v is above server.max_delay_limit %v: every request held is a connection and a goroutine; want at most the limit, or raise server.max_delay_limit (and read_timeout above it)", p.MaxDelay, s.MaxDelayLimit)
		}
	}
}
