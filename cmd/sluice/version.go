package main

import (
	"fmt"
	"io"
	"runtime/debug"

	"github.com/sluicehq/sluice/internal/buildinfo"
)

// versionLine says which sluice this is: the module version (a tag for
// `go install …@vX.Y.Z`, "(devel)" for a build from a checkout) and the
// VCS revision and time when the build recorded them.
func versionLine(info *debug.BuildInfo, ok bool) string {
	if !ok || info == nil {
		return "sluice (unknown version: built without module information)"
	}
	b := buildinfo.Parse(info, ok)
	line := fmt.Sprintf("sluice %s revision %s", b.Version, b.Revision)
	if b.Time != "" {
		line += " (" + b.Time + ")"
	}
	return line + " " + b.GoVersion
}

const versionDoc = `Usage: sluice version

Print the module version, the VCS revision the binary was built from and
the Go version. 'sluice --version' does the same.
`

func version(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("version", versionDoc, stdout, stderr)
	if code := fs.parse(args); code >= 0 {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "sluice version: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	fmt.Fprintln(stdout, versionLine(debug.ReadBuildInfo()))
	return 0
}
