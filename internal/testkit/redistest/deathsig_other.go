//go:build !linux

package redistest

import "os/exec"

// setDeathSignal does nothing here: only Linux can tie a child's life to its
// parent's, so elsewhere a crashed test binary may leave redis-server running.
func setDeathSignal(*exec.Cmd) {}
