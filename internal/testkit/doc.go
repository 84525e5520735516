// Package testkit holds no code: its sub-packages are the test
// infrastructure of sluice's tests, kept apart from the application in
// internal/. No code that ships imports them (the bench module's peer
// comparisons do).
//
//   - gatewaytest: start a gateway from YAML, in process, behind httptest
//     servers or on its own listeners.
//   - fakeclock: a clock that moves only when a test says, for the stores'
//     and the middleware's injectable Now.
//   - syncbuf: a buffer that a test reads while a gateway writes its log.
//   - redistest: real redis-server processes (standalone, Cluster,
//     Sentinel, TLS) on free loopback ports.
//   - envoytest: the real envoyproxy/ratelimit, built from its Go module.
//   - proxytest: real NGINX and Caddy processes.
//   - certstest: a test CA that issues certificates.
//   - stall: how long this process was kept from running.
//   - slowstore: a store whose every call waits first, as on Redis.
//   - otlptest: an OTLP trace receiver (gRPC or HTTP) on loopback.
//   - sendtest: checks sent to a coalesce.Sender, their answers awaited.
//
// docs/testing.md says how the suite uses them.
package testkit
