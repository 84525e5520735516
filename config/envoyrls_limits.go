package config

import "time"

// Defaults of the envoy_rls listener's own bounds (docs/envoy.md, "Bounds
// of the listener").
const (
	// DefaultRLSMaxStreamsPerConnection: Envoy opens another connection
	// when one reaches the server's SETTINGS_MAX_CONCURRENT_STREAMS, so the
	// bound costs it nothing, and 100 is the floor RFC 9113 advises a
	// server not to go under. A hostile client gets 100 per connection,
	// max_connections_per_ip connections, and max_streams_per_ip in all.
	DefaultRLSMaxStreamsPerConnection = 100
	// DefaultRLSMaxStreamsPerIP is Envoy's default circuit breaker
	// (max_requests, 1024 per cluster): an Envoy that keeps it never has
	// more calls open to the rate limit service.
	DefaultRLSMaxStreamsPerIP = 1024
	// DefaultRLSFirstMessageTimeout: Envoy writes a call's message with its
	// headers, and gives up on the answer after its filter's timeout (20ms
	// by default, commonly 0.25s); a message later than 2s serves no one.
	DefaultRLSFirstMessageTimeout = 2 * time.Second
	// DefaultRLSDomainWait is below the 0.25s Envoy's rate limit filter
	// commonly waits: a call refused after it still reaches Envoy before
	// its filter gives up, and its failure_mode_deny decides.
	DefaultRLSDomainWait     = 100 * time.Millisecond
	DefaultRLSMaxDescriptors = 64
	// DefaultRLSBusyDomainRest paces a domain beyond its share, while
	// another is called, to 1/65 of its slots' time on its calls' own
	// work: with the default share (16 per CPU) a flood that costs CPU
	// alone takes at most a quarter of the CPUs. A call's own time leaves
	// out its wait on the store, so a domain whose calls wait on Redis is
	// hardly paced.
	DefaultRLSBusyDomainRest = 64
	DefaultRLSMaxEntries     = 32
)

// maxRLSCallBound bounds max_descriptors and max_entries: a call's message
// is bounded by server.max_header_bytes anyway.
const maxRLSCallBound = 1 << 16

func (e *EnvoyRLS) defaults(s Server) {
	if e.MaxStreamsPerConnection == 0 {
		e.MaxStreamsPerConnection = DefaultRLSMaxStreamsPerConnection
	}
	if e.MaxStreamsPerIP == 0 {
		e.MaxStreamsPerIP = DefaultRLSMaxStreamsPerIP
		if s.MaxInFlight > 0 {
			e.MaxStreamsPerIP = min(e.MaxStreamsPerIP, s.MaxInFlight)
		}
	}
	if e.FirstMessageTimeout == 0 {
		e.FirstMessageTimeout = DefaultRLSFirstMessageTimeout
	}
	if e.DomainWait == 0 {
		e.DomainWait = DefaultRLSDomainWait
	}
	if e.BusyDomainRest == 0 {
		e.BusyDomainRest = DefaultRLSBusyDomainRest
	}
	if e.MaxDescriptors == 0 {
		e.MaxDescriptors = DefaultRLSMaxDescriptors
	}
	if e.MaxEntries == 0 {
		e.MaxEntries = DefaultRLSMaxEntries
	}
}

func (v *validator) envoyRLSLimits() {
	e := &v.c.EnvoyRLS
	if e.MaxStreamsPerConnection < 1 || e.MaxStreamsPerConnection > 1<<20 {
		v.fail("envoy_rls.max_streams_per_connection", "%d: want the most streams one HTTP/2 connection may hold open, from 1 to %d, such as %d", e.MaxStreamsPerConnection, 1<<20, DefaultRLSMaxStreamsPerConnection)
	}
	if e.MaxStreamsPerIP < 1 {
		v.fail("envoy_rls.max_streams_per_ip", "%d: want the most streams one client address may hold open over all its connections, such as %d", e.MaxStreamsPerIP, DefaultRLSMaxStreamsPerIP)
	}
	if e.FirstMessageTimeout < 0 {
		v.fail("envoy_rls.first_message_timeout", "%v: want how long a stream may wait for its request message, such as 2s", e.FirstMessageTimeout)
	}
	if in := v.c.Server.MaxInFlight; e.MaxInFlightPerDomain < 0 || (in >= 1 && e.MaxInFlightPerDomain > in) {
		v.fail("envoy_rls.max_in_flight_per_domain", "%d: want the most calls of one domain decided at once, up to server.max_in_flight (%d), such as 64; 0: 16 per CPU", e.MaxInFlightPerDomain, in)
	}
	if e.BusyDomainRest < -1 || e.BusyDomainRest > maxRLSCallBound {
		v.fail("envoy_rls.busy_domain_rest", "%d: want how many times its own decision time a call of a domain beyond max_in_flight_per_domain holds its slot before it is answered, from 1 to %d (0: the default, %d); -1: no pacing", e.BusyDomainRest, maxRLSCallBound, DefaultRLSBusyDomainRest)
	}
	if e.DomainWait < 0 || e.DomainWait > time.Minute {
		v.fail("envoy_rls.domain_wait", "%v: want how long a call may wait for one of its domain's max_in_flight_per_domain, up to 1m, such as 100ms", e.DomainWait)
	}
	if e.MaxDescriptors < 1 || e.MaxDescriptors > maxRLSCallBound {
		v.fail("envoy_rls.max_descriptors", "%d: want the most descriptors of one call, from 1 to %d, such as %d", e.MaxDescriptors, maxRLSCallBound, DefaultRLSMaxDescriptors)
	}
	if e.MaxEntries < 1 || e.MaxEntries > maxRLSCallBound {
		v.fail("envoy_rls.max_entries", "%d: want the most entries of one descriptor, from 1 to %d, such as %d", e.MaxEntries, maxRLSCallBound, DefaultRLSMaxEntries)
	}
}
