package gateway

import (
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/testkit/syncbuf"
)

// TestListenUnix: GRPC_UDS's listener takes a path where nothing is, or
// where a socket was left by a process that died (removed, logged), and
// refuses with a message that says what is wrong: a directory, a regular
// file (never removed), a socket another process still serves on (left to
// it), a path longer than a socket's, a directory that does not exist.
// Closing the listener removes the socket file.
func TestListenUnix(t *testing.T) {
	dir := t.TempDir()
	var logs syncbuf.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))

	fresh := filepath.Join(dir, "fresh.sock")
	ln, err := listenUnix(fresh, log)
	if err != nil {
		t.Fatalf("a fresh path: %v", err)
	}
	ln.Close()
	if _, err := os.Lstat(fresh); !os.IsNotExist(err) {
		t.Errorf("the socket file after Close: %v; want it removed", err)
	}

	// A stale socket: its process died without removing it.
	stale := filepath.Join(dir, "stale.sock")
	old, err := net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	old.(*net.UnixListener).SetUnlinkOnClose(false)
	old.Close()
	if _, err := os.Lstat(stale); err != nil {
		t.Fatalf("the stale socket file: %v", err)
	}
	ln, err = listenUnix(stale, log)
	if err != nil {
		t.Fatalf("a stale socket: %v", err)
	}
	defer ln.Close()
	if !strings.Contains(logs.String(), "removed a stale socket") {
		t.Errorf("the removal of a stale socket was not logged: %s", logs.String())
	}
	c, err := net.Dial("unix", stale)
	if err != nil {
		t.Fatalf("dial the new socket: %v", err)
	}
	c.Close()

	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("keep me"), 0o600); err != nil {
		t.Fatal(err)
	}
	long := "/" + strings.Repeat("x", 107)
	for _, c := range []struct{ path, want string }{
		{dir, "is a directory: name the socket file to create in it, such as " + filepath.Join(dir, "ratelimit.sock")},
		{file, "exists and is not a socket"},
		{stale, "another process is serving on this socket"}, // ln, above
		{long, "108 bytes, longer than the 107 a unix socket path may have"},
		{filepath.Join(dir, "nowhere", "s.sock"), "no such file or directory"},
	} {
		ln, err := listenUnix(c.path, log)
		if err == nil {
			ln.Close()
			t.Errorf("%s: listened; want an error saying %q", c.path, c.want)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want %q", c.path, err, c.want)
		}
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != "keep me" {
		t.Errorf("the regular file at the path: %q %v; want it untouched", b, err)
	}
}
