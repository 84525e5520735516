// Package buildinfo says which sluice a binary is, from what the Go
// toolchain recorded in it: `sluice version` prints it and the gateway
// exports it as sluice_build_info.
package buildinfo

import (
	"runtime/debug"
	"strings"
)

// Info is what a binary records about its build.
type Info struct {
	// Version is the module version: a tag for `go install …@vX.Y.Z`,
	// "(devel)" for a build from a checkout, "unknown" without module
	// information.
	Version string
	// Revision is the VCS revision ("+dirty" when the tree was modified),
	// the commit a pseudo-version ends with, or "unknown".
	Revision string
	// Time is the VCS commit time, or empty.
	Time string
	// GoVersion is the toolchain that built the binary.
	GoVersion string
}

// stampedVersion and stampedRevision are what the binary's main was
// stamped with by the linker (SetStamps), for builds without VCS data.
var stampedVersion, stampedRevision string

// SetStamps records the version and revision a release binary or image
// was stamped with (scripts/release.sh, the Dockerfile); Read prefers
// them to what the build recorded. Call it before anything reads.
func SetStamps(version, revision string) { stampedVersion, stampedRevision = version, revision }

// Read returns the running binary's Info, stamps first.
func Read() Info {
	return WithStamps(Parse(debug.ReadBuildInfo()), stampedVersion, stampedRevision)
}

// WithStamps returns in with a stamped version and revision, where set,
// in place of what the build recorded.
func WithStamps(in Info, version, revision string) Info {
	if version != "" {
		in.Version = version
	}
	if revision != "" {
		in.Revision = revision
	}
	return in
}

// Parse returns the Info of what debug.ReadBuildInfo returned.
func Parse(info *debug.BuildInfo, ok bool) Info {
	if !ok || info == nil {
		return Info{Version: "unknown", Revision: "unknown", GoVersion: "unknown"}
	}
	out := Info{Version: info.Main.Version, GoVersion: info.GoVersion}
	if out.Version == "" {
		out.Version = "(devel)"
	}
	var modified string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			out.Revision = s.Value
		case "vcs.time":
			out.Time = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = "+dirty"
			}
		}
	}
	if out.Revision == "" {
		out.Revision = PseudoRevision(out.Version) // go install …@latest records no vcs.* settings
	}
	if out.Revision != "unknown" {
		out.Revision += modified
	}
	return out
}

// PseudoRevision is the commit prefix a pseudo-version such as
// v0.0.0-20261203153631-3d44cd015ef7 ends with, or "unknown".
func PseudoRevision(version string) string {
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
