package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strings"
	"testing"
)

// TestEveryHelp: every command's --help and -h, and `sluice help COMMAND`,
// print its usage exactly once, on stdout, with nothing on stderr, and
// exit 0; each usage starts with "Usage: sluice COMMAND" and lists its
// flags under a "Flags:" heading.
func TestEveryHelp(t *testing.T) {
	commands := [][]string{
		{"serve"}, {"check-config"}, {"demo"}, {"demo-upstream"},
		{"advise"}, {"advise", "generate"}, {"simulate"}, {"version"}, {"ratelimit"},
	}
	for _, cmd := range commands {
		name := strings.Join(cmd, " ")
		for _, args := range [][]string{
			append(append([]string{}, cmd...), "--help"),
			append(append([]string{}, cmd...), "-h"),
			append([]string{"help"}, cmd...),
		} {
			code, out, errOut := runBinary(t, args...)
			if code != 0 || errOut != "" {
				t.Errorf("sluice %s: exit %d, stderr %q; want 0 and nothing", strings.Join(args, " "), code, errOut)
			}
			if n := strings.Count(out, "Usage:"); n != 1 || !strings.HasPrefix(out, "Usage: sluice "+name) {
				t.Errorf("sluice %s: %d usages; want one, starting with %q:\n%s", strings.Join(args, " "), n, "Usage: sluice "+name, out)
			}
			if strings.Contains(out, "usage:") {
				t.Errorf("sluice %s: a lower-case usage:\n%s", strings.Join(args, " "), out)
			}
			if name != "version" && name != "ratelimit" && (strings.Count(out, "\nFlags:\n") != 1 || !strings.Contains(out[strings.Index(out, "\nFlags:\n"):], "\n  -")) {
				t.Errorf("sluice %s: no \"Flags:\" heading followed by the flags:\n%s", strings.Join(args, " "), out)
			}
		}
	}
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}} {
		code, out, errOut := runBinary(t, args...)
		if code != 0 || errOut != "" || strings.Count(out, "Usage:") != 1 {
			t.Errorf("sluice %s: exit %d, stderr %q, stdout %q", args[0], code, errOut, out)
		}
	}
}

// TestBadFlag: a flag that does not exist is named on stderr with where to
// find the help, and exits 2 with nothing on stdout.
func TestBadFlag(t *testing.T) {
	for _, cmd := range [][]string{{"serve"}, {"check-config"}, {"demo"}, {"demo-upstream"}, {"simulate"}, {"advise"}, {"advise", "generate"}, {"version"}, {"ratelimit"}} {
		code, out, errOut := runBinary(t, append(cmd, "--no-such-flag")...)
		if code != 2 || out != "" || !strings.Contains(errOut, "-no-such-flag") || !strings.Contains(errOut, "--help") {
			t.Errorf("sluice %s --no-such-flag: exit %d, stdout %q, stderr %q", strings.Join(cmd, " "), code, out, errOut)
		}
	}
}

// TestVersion: `sluice version` and `sluice --version` print the module
// version and a revision.
func TestVersion(t *testing.T) {
	re := regexp.MustCompile(`^sluice (\S+) revision (\S+)`)
	for _, args := range [][]string{{"version"}, {"--version"}, {"-version"}} {
		code, out, errOut := runBinary(t, args...)
		if code != 0 || errOut != "" || !re.MatchString(out) || strings.Count(out, "\n") != 1 {
			t.Errorf("sluice %s: exit %d, stdout %q, stderr %q", args[0], code, out, errOut)
		}
	}
}

func TestVersionLine(t *testing.T) {
	info := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "github.com/sluicehq/sluice", Version: "v1.2.3"}}
	info.Settings = []debug.BuildSetting{{Key: "vcs.revision", Value: "3d44cd015ef7330794d0487e7eccf41f2aba8ca6"}, {Key: "vcs.time", Value: "2026-12-03T15:36:31Z"}, {Key: "vcs.modified", Value: "true"}}
	if got, want := versionLine(info, true), "sluice v1.2.3 revision 3d44cd015ef7330794d0487e7eccf41f2aba8ca6+dirty (2026-12-03T15:36:31Z) go1.26.0"; got != want {
		t.Errorf("versionLine = %q\nwant          %q", got, want)
	}
	// What `go install …@latest` of an untagged commit records: no vcs.*
	// settings, a pseudo-version that ends with the revision.
	info = &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "v0.0.0-20261203153631-3d44cd015ef7"}}
	if got, want := versionLine(info, true), "sluice v0.0.0-20261203153631-3d44cd015ef7 revision 3d44cd015ef7 go1.26.0"; got != want {
		t.Errorf("versionLine = %q\nwant          %q", got, want)
	}
	if got := versionLine(nil, false); !strings.HasPrefix(got, "sluice ") {
		t.Errorf("versionLine without build info = %q", got)
	}
}

// TestGenerateRefusesTerminal: `sluice advise generate` with no size and
// a terminal for standard output refuses to flood it, exit 2; with
// --lines it writes. The terminal comes from script(1).
func TestGenerateRefusesTerminal(t *testing.T) {
	script, err := exec.LookPath("script")
	if err != nil {
		t.Skip("no script(1) to give the command a terminal")
	}
	out, err := exec.Command(script, "-qec", binary+" advise generate", "/dev/null").CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), "not writing 100MB of log to a terminal") || len(out) > 1000 {
		t.Fatalf("advise generate on a terminal: %v, %d bytes:\n%.500s", err, len(out), out)
	}
	out, err = exec.Command(script, "-qec", binary+" advise generate --lines 3", "/dev/null").CombinedOutput()
	if err != nil || strings.Count(string(out), "HTTP/1.1") != 3 {
		t.Fatalf("advise generate --lines 3 on a terminal: %v\n%s", err, out)
	}
}

// TestVersionRevisionFromVCS builds sluice from a clone of this checkout
// with VCS stamping on and sees `sluice version` name the commit.
func TestVersionRevisionFromVCS(t *testing.T) {
	if testing.Short() {
		t.Skip("builds sluice once more, from a clone")
	}
	head, err := exec.Command("git", "-C", "../..", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skipf("not a git checkout: %v", err)
	}
	rev := strings.TrimSpace(string(head))
	clone := filepath.Join(t.TempDir(), "sluice")
	if out, err := exec.Command("git", "clone", "-q", "--no-checkout", "../..", clone).CombinedOutput(); err != nil {
		t.Fatalf("git clone: %v\n%s", err, out)
	}
	if out, err := exec.Command("git", "-C", clone, "checkout", "-q", rev).CombinedOutput(); err != nil {
		t.Fatalf("git checkout: %v\n%s", err, out)
	}
	bin := filepath.Join(t.TempDir(), "sluice")
	build := exec.Command("go", "build", "-o", bin, "./cmd/sluice")
	build.Dir = clone
	build.Env = append(os.Environ(), "GOFLAGS=-buildvcs=true")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version").Output()
	if err != nil || !strings.Contains(string(out), " revision "+rev) {
		t.Fatalf("sluice version = %q, %v; want revision %s", out, err, rev)
	}
}

// Release binaries and images are built with -buildvcs=false and stamp the
// version and revision with -X (scripts/release.sh, the Dockerfile).
func TestStampedVersionLine(t *testing.T) {
	info := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "(devel)"}}
	if got, want := stampedLine(info, true, "v1.4.0", "3d44cd015ef7"), "sluice v1.4.0 revision 3d44cd015ef7 go1.26.0"; got != want {
		t.Errorf("stampedLine = %q\nwant         %q", got, want)
	}
	if got, want := stampedLine(nil, false, "v1.4.0", ""), "sluice v1.4.0 revision unknown"; got != want {
		t.Errorf("stampedLine without build info = %q, want %q", got, want)
	}
	if got, want := stampedLine(info, true, "", ""), "sluice (devel) revision unknown go1.26.0"; got != want {
		t.Errorf("stampedLine without stamps = %q, want %q", got, want)
	}
}
