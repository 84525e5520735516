// Package e2e holds end-to-end tests of the sluice binary: several real
// `sluice serve` processes in front of one upstream, sharing real Redis
// servers that the test harness starts, with load sent over loopback.
package e2e
