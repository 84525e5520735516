package main

import (
	"fmt"
	"io"
	"runtime/debug"
	"strings"
)

// versionLine says which sluice this is: the module version (a tag for
// `go install …@vX.Y.Z`, "(devel)" for a build from a checkout) and the
// VCS revision and time when the build recorded them.
func versionLine(info *debug.BuildInfo, ok bool) string {
	if !ok || info == nil {
		return "sluice (unknown version: built without module information)"
	}
	version := info.Main.Version
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
	if rev == "" {
		rev = pseudoRevision(version) // go install …@latest records no vcs.* settings
	}
	line := fmt.Sprintf("sluice %s revision %s%s", version, rev, modified)
	if at != "" {
		line += " (" + at + ")"
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
