package bench

import (
	"syscall"
	"time"
)

// CPUTime is the CPU time (user and system, every thread) this process has
// used so far. On a shared machine a benchmark's wall time also counts the
// time its threads waited for a core; its CPU time per check does not.
func CPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
