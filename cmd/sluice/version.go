package main

import (
	"fmt"
	"io"
	"runtime/debug"

	"github.com/sluicehq/sluice/internal/buildinfo"
)

// stampedVersion and stampedRevision are set by the linker in release
// binaries and container images, which are built without the VCS data Go
// records itself (scripts/release.sh, the Dockerfile):
//
//	go build -ldflags "-X main.stampedVersion=v1.2.3 -X main.stampedRevision=3d44cd0…" ./cmd/sluice
//
// When set they win over what the build information says, here and in
// sluice_build_info.
var stampedVersion, stampedRevision string

func init() { buildinfo.SetStamps(stampedVersion, stampedRevision) }

// versionLine says which sluice this is: the module version (a tag for
// `go install …@vX.Y.Z`, "(devel)" for a build from a checkout) and the
// VCS revision and time when the build recorded them.
func versionLine(info *debug.BuildInfo, ok bool) string {
	return stampedLine(info, ok, stampedVersion, stampedRevision)
}

// stampedLine is versionLine with the linker's stamps as arguments.
func stampedLine(info *debug.BuildInfo, ok bool, stampVersion, stampRevision string) string {
	if (!ok || info == nil) && stampVersion == "" {
		return "sluice (unknown version: built without module information)"
	}
	b := buildinfo.WithStamps(buildinfo.Parse(info, ok), stampVersion, stampRevision)
	line := fmt.Sprintf("sluice %s revision %s", b.Version, b.Revision)
	if b.Time != "" {
		line += " (" + b.Time + ")"
	}
	if !ok || info == nil || b.GoVersion == "" {
		return line
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
