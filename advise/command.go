// Package advise derives rate limits from access logs (SPEC §6).
package advise

import (
	"fmt"
	"io"
)

// Command runs `sluice advise` with args (the words after "advise") and
// returns the process exit status.
func Command(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "sluice advise: not implemented yet")
	return 1
}
