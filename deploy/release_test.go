package deploy

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestReleaseScript runs scripts/release.sh for this machine's platform
// twice: the archive holds the binary, LICENSE and README.md, SHA256SUMS
// matches it, the binary says the stamped version, and a second build is
// byte for byte the same. (scripts/test.sh's release phase builds all four
// platforms.)
func TestReleaseScript(t *testing.T) {
	root := repoRoot(t)
	target := runtime.GOOS + "/" + runtime.GOARCH
	const version = "v0.0.0-release-test"
	var sums []string
	for i := range 2 {
		dist := filepath.Join(t.TempDir(), "dist")
		run(t, root, []string{"VERSION=" + version, "REVISION=abc123", "TARGETS=" + target, "DIST=" + dist}, "scripts/release.sh")
		name := fmt.Sprintf("sluice-%s-%s-%s", version, runtime.GOOS, runtime.GOARCH)
		archive := filepath.Join(dist, name+".tar.gz")
		b, err := os.ReadFile(archive)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		want := hex.EncodeToString(sum[:]) + "  " + name + ".tar.gz\n"
		if got := readFile(t, filepath.Join(dist, "SHA256SUMS")); got != want {
			t.Errorf("SHA256SUMS = %q, want %q", got, want)
		}
		run(t, dist, nil, "sha256sum", "-c", "SHA256SUMS")
		sums = append(sums, want)
		if i > 0 {
			break
		}
		x := t.TempDir()
		run(t, x, nil, "tar", "xzf", archive)
		if got := strings.Fields(run(t, x, nil, "tar", "tzf", archive)); strings.Join(got, " ") != name+"/ "+name+"/LICENSE "+name+"/README.md "+name+"/sluice" {
			t.Errorf("archive holds %v", got)
		}
		if got := run(t, x, nil, filepath.Join(x, name, "sluice"), "version"); !strings.HasPrefix(got, "sluice "+version+" revision abc123 ") {
			t.Errorf("sluice version = %q", got)
		}
	}
	if sums[0] != sums[1] {
		t.Errorf("two builds of the same commit differ:\n%s%s", sums[0], sums[1])
	}
	// A version that would break the file names or the -X flag is refused.
	_, errOut, err := runErr(root, []string{"VERSION=v1 -X main.x=y", "TARGETS=" + target, "DIST=" + t.TempDir()}, "scripts/release.sh")
	if err == nil || !strings.Contains(errOut, "only letters, digits") {
		t.Errorf("VERSION with spaces: err %v, stderr %q", err, errOut)
	}
}
