// Package simulate compares rate limiting algorithms on traffic scenarios
// (SPEC §7).
package simulate

import (
	"fmt"
	"io"
)

// Command runs `sluice simulate` with args (the words after "simulate")
// and returns the process exit status.
func Command(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "sluice simulate: not implemented yet")
	return 1
}
