package monotonic

import (
	"testing"
	"time"
)

// TestClockIsTheWallTimeAdvanced holds a Clock between two readings of the
// wall clock, and holds its advance to at least the time slept between two
// of its readings. No bound is asserted on how long anything takes.
func TestClockIsTheWallTimeAdvanced(t *testing.T) {
	before := time.Now().UnixMicro()
	c := New()
	first := c.Micros()
	const pause = 2 * time.Millisecond
	time.Sleep(pause)
	second := c.Micros()
	after := time.Now().UnixMicro()
	// A millisecond of slack either side: NTP may slew the wall clock
	// (up to 500 ppm) against the monotonic one the Clock advances by.
	const slack = 1000
	if first < before-slack || second > after+slack {
		t.Fatalf("clock read %d and %d µs, outside the wall clock's %d to %d", first, second, before, after)
	}
	if second-first < pause.Microseconds() {
		t.Fatalf("clock advanced %d µs over a sleep of %v", second-first, pause)
	}
	if f := Micros(); f() < before-slack {
		t.Fatalf("Micros()() read before %d", before)
	}
}
