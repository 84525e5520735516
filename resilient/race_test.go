//go:build race

package resilient_test

const raceEnabled = true
