package main

import "testing"

// The above-floor ratio is what each service adds to the empty handler,
// sluice's over envoy's: 30 µs over 60 µs here, whatever both cost in all.
func TestAboveFloor(t *testing.T) {
	if got := aboveFloor(50, 80, 20); got != 0.5 {
		t.Fatalf("aboveFloor(50, 80, 20) = %v, want 0.5", got)
	}
}
