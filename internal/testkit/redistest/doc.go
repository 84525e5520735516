// Package redistest starts real redis-server processes for tests: a standalone
// server, a Redis Cluster or a Sentinel group, each on free loopback ports and
// in its own temporary directory, never the shared instance on 127.0.0.1:6379.
//
// Every constructor takes the test's testing.TB. It waits until the process
// (or the whole topology) answers, registers a cleanup that kills every
// process it started before the temporary directories are removed, and reports
// a failure with t.Fatal, quoting the tail of the redis-server log. A missing
// redis-server binary is a failure too, never a skip, so CI cannot pass without
// having run the Redis tests. Servers keep no data on disk (no RDB, no AOF), so
// a restart starts empty; DEBUG is enabled so tests can make Redis slow
// (DEBUG SLEEP). Options add TLS with generated certificates, an ACL user, or
// extra redis-server flags, and they survive Restart.
//
// The handles expose what failure tests need: Server.Kill and Server.Restart on
// any process, Cluster.Masters to pick a master to kill and Cluster.WaitHealthy
// to wait for its replica to take over, Sentinel.Failover to kill the master and
// wait until the sentinels name the new one. Methods that take no testing.TB
// report to the one given to the constructor, so call them from the test's
// goroutine.
package redistest
