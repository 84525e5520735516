// Command sluice is the sluice gateway and its tools:
//
//	sluice serve --config FILE     the rate limiting reverse proxy and decision API
//	sluice check-config FILE       validate a configuration file
//	sluice demo                    gateway and demo upstream together, to try it out
//	sluice demo-upstream           the demo upstream alone
//	sluice advise ...              derive limits from access logs
//	sluice simulate ...            compare rate limiting algorithms
//	sluice version                 the module version and VCS revision
//
// Every command prints its usage with --help, on standard output.
//
// Exit status: 0 success, 1 failure at run time, 2 bad usage or an invalid
// configuration.
package main

import (
	"os"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
