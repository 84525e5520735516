package main

import (
	"fmt"
	"io"
	"runtime/debug"
	"strings"
)

// stampedVersion and stampedRevision are set by the linker in release
// binaries and container images, which are built without the VCS data Go
// records itself (scripts/release.sh, the Dockerfile):
//
//	go build -ldflags "-X main.stampedVersion=v1.2.3 -X main.stampedRevision=3d44cd0…" ./cmd/sluice
//
// When set they win over what the build information says.
var stampedVersion, stampedRevision string

// versionLine says which sluice this is: the module version (a tag for
// `go install …@vX.Y.Z`, "(devel)" for a build from a checkout) and the
// VCS revision and time when the build recorded them.
func versionLine(info *debug.BuildInfo, ok bool) string {
	return stampedLine(info, ok, stampedVersion, stampedRevision)
}

// stampedLine is versionLine with the linker's stamps as arguments.
func stampedLine(info *debug.BuildInfo, ok bool, stampVersion, stampRevision string) string {
	if !ok || info == nil {
		if stampVersion == "" {
			return "sluice (unknown version: built without module information)"
		}
		info = &debug.BuildInfo{}
	}
	version := info.Main.Version
	if stampVersion != "" {
		version = stampVersion
	}
	if version == "" {
		version = "(devel)"
	}
	var rev, at, modified string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = "+dirty"
			}
		}
	}
	if stampRevision != "" {
		rev = stampRevision
	}
	if rev == "" {
		rev = pseudoRevision(version) // go install …@latest records no vcs.* settings
	}
	line := fmt.Sprintf("sluice %s revision %s%s", version, rev, modified)
	if at != "" {
		line += " (" + at + ")"
	}
	if info.GoVersion == "" {
		return line
	}
	return line + " " + info.GoVersion
}

// pseudoRevision is the commit prefix a pseudo-version such as
// v0.0.0-20261203153631-3d44cd015ef7 ends with, or "unknown".
func pseudoRevision(version string) string {
	version, _, _ = strings.Cut(version, "+")
	i := strings.LastIndexByte(version, '-')
	if i < 0 || len(version)-i-1 != 12 || strings.Count(version, "-") < 2 {
		return "unknown"
	}
	rev := version[i+1:]
	for _, c := range rev {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return "unknown"
		}
	}
	return rev
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
