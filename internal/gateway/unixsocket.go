package gateway

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/config"
)

// listenUnix listens on the unix socket path (GRPC_UDS of `sluice
// ratelimit`), as envoyproxy/ratelimit does: the socket's mode comes from
// the umask, and closing the listener removes it. A socket file left at
// path by a process that died (nothing accepts on it) is removed first,
// where envoyproxy/ratelimit fails with "address already in use" until
// someone removes it; anything else at path is an error that says what it
// is, and a socket someone still serves on is left to them.
func listenUnix(path string, log *slog.Logger) (net.Listener, error) {
	if len(path) > config.MaxUnixSocketPath {
		return nil, fmt.Errorf("%q: %d bytes, longer than the %d a unix socket path may have: use a shorter path", path, len(path), config.MaxUnixSocketPath)
	}
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, err
	case fi.IsDir():
		return nil, fmt.Errorf("%q is a directory: name the socket file to create in it, such as %s", path, filepath.Join(path, "ratelimit.sock"))
	case fi.Mode()&fs.ModeSocket == 0:
		return nil, fmt.Errorf("%q exists and is not a socket (%v): sluice removes only a stale socket there; remove it or name another path", path, fi.Mode().Type())
	default:
		c, err := net.DialTimeout("unix", path, time.Second)
		if err == nil {
			_ = c.Close()
			return nil, fmt.Errorf("%q: another process is serving on this socket: stop it or name another path", path)
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("%q: a socket that could not be checked: %w", path, err)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("%q: a stale socket (nothing serves on it) that could not be removed: %w", path, err)
		}
		log.Info("sluice: removed a stale socket file (nothing served on it) before listening there", "path", path)
	}
	return net.Listen("unix", path)
}
