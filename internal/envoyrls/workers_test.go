package envoyrls

import (
	"runtime"
	"testing"
)

// TestStreamWorkersDefault: by default the server has a worker for at
// least MinStreamWorkers calls in flight however few the CPUs, so that a
// few hundred callers do not each get a fresh goroutine whose stack grows
// again in every call; MaxInFlight still bounds them, and a value given is
// kept.
func TestStreamWorkersDefault(t *testing.T) {
	for _, c := range []struct {
		name string
		in   Options
		want int
	}{
		{"default", Options{}, max(StreamWorkersPerCPU*runtime.GOMAXPROCS(0), MinStreamWorkers)},
		{"given", Options{StreamWorkers: 7}, 7},
	} {
		s := New(nil, c.in)
		if s.opts.StreamWorkers != c.want {
			t.Errorf("%s: StreamWorkers %d; want %d", c.name, s.opts.StreamWorkers, c.want)
		}
		if s.opts.StreamWorkers < MinStreamWorkers && c.in.StreamWorkers == 0 {
			t.Errorf("%s: %d workers, under %d", c.name, s.opts.StreamWorkers, MinStreamWorkers)
		}
		s.grpc.Stop()
	}
	if MinStreamWorkers < 512 {
		t.Errorf("MinStreamWorkers %d: 512 callers would leave calls without a worker", MinStreamWorkers)
	}
}
