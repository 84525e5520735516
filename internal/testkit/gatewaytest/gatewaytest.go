// Package gatewaytest is the one harness of sluice's tests that starts a
// gateway (`sluice serve`, package internal/gateway) from YAML, in
// process:
//
//	path := gatewaytest.Write(t, "policies: [...]\n", map[string]string{"keys.txt": "..."})
//	gw := gatewaytest.Start(t, gateway.New, path, nil).Handle(t) // behind httptest servers
//	gw := gatewaytest.Start(t, gateway.New, path, nil).Serve(t, 5*time.Second) // on its own listeners
//
// It takes the gateway's constructor as an argument instead of importing
// package gateway, so that package gateway's own tests use it too. The
// test's cleanup stops and closes everything it started.
package gatewaytest

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/testkit/syncbuf"
)

// Gateway is what the harness uses of *gateway.Gateway.
type Gateway interface {
	http.Handler
	Admin() http.Handler
	Listen() error
	Serve(ctx context.Context, grace time.Duration) error
	Close() error
}

// Write writes yaml as sluice.yaml, and files (by slash-separated path
// relative to it, folders made as needed; a name ending in / is an empty
// folder), into a new temporary directory, and returns the path of
// sluice.yaml.
func Write(t testing.TB, yaml string, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, data := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		folder := filepath.Dir(p)
		if strings.HasSuffix(name, "/") {
			folder = p
		}
		if err := os.MkdirAll(folder, 0o755); err != nil {
			t.Fatal(err)
		}
		if folder == p {
			continue
		}
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(dir, "sluice.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// Load writes yaml and files as Write does and loads the configuration.
func Load(t testing.TB, yaml string, files map[string]string) (*config.Config, string) {
	t.Helper()
	path := Write(t, yaml, files)
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return cfg, path
}

// Running is a gateway the harness started.
type Running[G Gateway] struct {
	G    G
	Path string // its sluice.yaml
	Dir  string // the directory of Path

	// Log is the gateway's log (slog text), when Start was given no log.
	Log *syncbuf.Buffer

	// Traffic and Admin serve G and G.Admin() after Handle.
	Traffic, Admin *httptest.Server

	// Done receives what G.Serve returned, once, after Serve.
	Done <-chan error

	stopOnce sync.Once
	cancel   context.CancelFunc
	finished chan struct{}
}

// Start loads the configuration at path and builds a gateway of it with
// newGateway (gateway.New), its log written to log, or to Running.Log
// when log is nil. The test's cleanup closes a gateway that never served.
func Start[G Gateway](t testing.TB, newGateway func(*config.Config, string, *slog.Logger) (G, error), path string, log io.Writer) *Running[G] {
	t.Helper()
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	r := &Running[G]{Path: path, Dir: filepath.Dir(path)}
	if log == nil {
		r.Log = &syncbuf.Buffer{}
		log = r.Log
	}
	if r.G, err = newGateway(cfg, path, slog.New(slog.NewTextHandler(log, nil))); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if r.cancel == nil {
			r.G.Close()
		}
	})
	return r
}

// Handle serves G and its admin API on httptest servers (Traffic, Admin)
// until the test ends.
func (r *Running[G]) Handle(t testing.TB) *Running[G] {
	t.Helper()
	r.Traffic, r.Admin = httptest.NewServer(r.G), httptest.NewServer(r.G.Admin())
	t.Cleanup(r.Traffic.Close)
	t.Cleanup(r.Admin.Close)
	return r
}

// Serve runs G on the listeners of its configuration (Listen, then Serve
// with grace) until Stop or the test's end. A Serve error that the test
// did not read from Done itself fails the test at its end.
func (r *Running[G]) Serve(t testing.TB, grace time.Duration) *Running[G] {
	t.Helper()
	if err := r.G.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	r.cancel, r.finished, r.Done = cancel, make(chan struct{}), done
	go func() {
		done <- r.G.Serve(ctx, grace)
		close(r.finished)
	}()
	t.Cleanup(func() {
		if !r.Stop() {
			t.Error("gatewaytest: Serve did not return within 60s of its context's end")
			return
		}
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("gatewaytest: Serve: %v", err)
			}
		default:
		}
	})
	return r
}

// Cancel ends Serve's context and returns at once; Done says when Serve
// has returned.
func (r *Running[G]) Cancel() { r.cancel() }

// Stop ends Serve's context and waits, up to a minute, for Serve to
// return; it reports whether it did. Later calls wait no more.
func (r *Running[G]) Stop() bool {
	returned := true
	r.stopOnce.Do(func() {
		r.cancel()
		select {
		case <-r.finished:
		case <-time.After(60 * time.Second):
			returned = false
		}
	})
	return returned
}
