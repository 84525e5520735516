//go:build race

package advise

// raceEnabled: the race detector makes the advisor about ten times slower
// and adds shadow memory of its own, so the memory test runs smaller.
const raceEnabled = true
