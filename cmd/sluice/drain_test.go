package main

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestServeDrainsOnSIGTERM runs the binary behind a slow upstream and
// sends it SIGTERM with a request in flight: /readyz answers 503 at once
// while new connections are still served; after server.shutdown_delay
// the listeners refuse new connections, never before it; the request in
// flight still finishes, and the process exits 0.
//
// Whether the gateway still serves is only asked while less than the
// delay has passed since the signal; a machine stalled past the delay
// runs the test again with twice the delay.
func TestServeDrainsOnSIGTERM(t *testing.T) {
	for delay := 2 * time.Second; delay <= 16*time.Second; delay *= 2 {
		if drainOnce(t, delay) {
			return
		}
		t.Logf("the machine stalled past the %v delay; again with twice the delay", delay)
	}
	t.Fatal("every delay passed before the gateway could be asked whether it still serves")
}

// drainOnce runs the scenario with the delay given; it reports false when
// the delay passed before the gateway could be asked whether it serves.
func drainOnce(t *testing.T, delay time.Duration) bool {
	arrived, release := make(chan struct{}, 1), make(chan struct{})
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			arrived <- struct{}{}
			<-release
		}
		io.WriteString(w, "upstream "+r.URL.Path)
	}))
	defer upstream.Close()
	defer close(release)
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	cfg := fmt.Sprintf("listen: 127.0.0.1:0\nadmin_listen: 127.0.0.1:0\ndecision_api: {listen: 127.0.0.1:0}\nupstream: %s\n"+
		"server: {shutdown_delay: %v, shutdown_timeout: 60s}\npolicies: [{name: all, match: /, anonymous: [{rate: 1/h, burst: 1000}]}]\n", upstream.URL, delay)
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServe(t, path)
	fresh := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

	type result struct {
		code int
		body string
		err  error
	}
	slow := make(chan result, 1)
	go func() {
		resp, err := fresh.Get(s.traffic + "/slow")
		if err != nil {
			slow <- result{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		slow <- result{resp.StatusCode, string(b), err}
	}()
	select {
	case <-arrived:
	case r := <-slow:
		t.Fatalf("the slow request ended before the upstream had it: %+v", r)
	case <-time.After(30 * time.Second):
		t.Fatal("the slow request never reached the upstream")
	}

	sent := time.Now()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	deadline := sent.Add(30 * time.Second)
	for {
		resp, err := fresh.Get(s.admin + "/readyz")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 503 && strings.Contains(string(b), "shutting down") {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz never answered 503 after SIGTERM (last: %v):\n%s", err, s.logs())
		}
		time.Sleep(10 * time.Millisecond)
	}
	resp, err := fresh.Get(s.traffic + "/during")
	asked := time.Since(sent)
	if asked >= delay {
		if resp != nil {
			resp.Body.Close()
		}
		s.cmd.Process.Kill()
		<-s.exited
		return false
	}
	if err != nil {
		t.Fatalf("a new connection %v after SIGTERM, within the %v delay: %v", asked, delay, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "upstream /during" {
		t.Fatalf("a request within the delay: %d %q; want the upstream's answer", resp.StatusCode, b)
	}

	// After the delay the listeners refuse new connections.
	deadline = sent.Add(delay + 60*time.Second)
	for {
		resp, err := fresh.Get(s.traffic + "/after")
		if err != nil {
			if errors.Is(err, syscall.ECONNREFUSED) {
				break
			}
			// A connection the kernel queued as the listener closed is
			// reset with it: the moment of the close, not a refusal yet.
			if !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
				t.Fatalf("a new connection after the delay: %v; want connection refused", err)
			}
			if time.Now().After(deadline) {
				t.Fatalf("new connections still reset, not refused, %v after SIGTERM: %v", time.Since(sent), err)
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		resp.Body.Close()
		if time.Now().After(deadline) {
			t.Fatalf("new connections still served %v after SIGTERM, delay %v:\n%s", time.Since(sent), delay, s.logs())
		}
		time.Sleep(10 * time.Millisecond)
	}
	// A lower bound, which a stalled machine cannot break: the process got
	// the signal after it was sent, and waited the delay from then.
	if refused := time.Since(sent); refused < delay {
		t.Fatalf("new connections refused %v after SIGTERM; want no sooner than the delay, %v", refused, delay)
	}
	select {
	case <-s.exited:
		t.Fatalf("the process exited with a request in flight:\n%s", s.logs())
	default:
	}

	release <- struct{}{} // the request in flight may finish now
	select {
	case r := <-slow:
		if r.err != nil || r.code != 200 || r.body != "upstream /slow" {
			t.Fatalf("the request in flight at SIGTERM: %d %q %v; want the upstream's answer", r.code, r.body, r.err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the request in flight never finished")
	}
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("no exit after the request in flight finished:\n%s", s.logs())
	}
	if s.exitCode != 0 || !strings.Contains(s.logs(), "sluice: draining") {
		t.Fatalf("exit %d; want 0 after a drain:\n%s", s.exitCode, s.logs())
	}
	return true
}

// TestSecondSignalEndsServe: a second signal ends sluice serve at once,
// a request in flight or not, even when it was started with SIGINT and
// SIGTERM ignored (nohup, or `sluice serve &` in a script), where the
// signal's default action put back is to ignore it again: the process
// then waited out shutdown_timeout.
func TestSecondSignalEndsServe(t *testing.T) {
	for _, tc := range []struct {
		name   string
		first  syscall.Signal
		second syscall.Signal
	}{{"INT INT", syscall.SIGINT, syscall.SIGINT}, {"TERM INT", syscall.SIGTERM, syscall.SIGINT}, {"TERM TERM", syscall.SIGTERM, syscall.SIGTERM}} {
		t.Run(tc.name, func(t *testing.T) {
			arrived, release := make(chan struct{}, 1), make(chan struct{})
			upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				arrived <- struct{}{}
				<-release
			}))
			defer upstream.Close()
			defer close(release)
			path := filepath.Join(t.TempDir(), "sluice.yaml")
			cfg := fmt.Sprintf("listen: 127.0.0.1:0\nadmin_listen: 127.0.0.1:0\ndecision_api: {listen: 127.0.0.1:0}\nupstream: %s\n"+
				"server: {shutdown_delay: 60s, shutdown_timeout: 60s}\npolicies: [{name: all, match: /, anonymous: [{rate: 1/h, burst: 1000}]}]\n", upstream.URL)
			if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
				t.Fatal(err)
			}
			s := startServeCmd(t, exec.Command("sh", "-c", `trap "" INT TERM; exec "$0" serve --config "$1"`, binary, path))
			go func() {
				if resp, err := (&http.Client{Timeout: 2 * time.Minute}).Get(s.traffic + "/slow"); err == nil {
					resp.Body.Close()
				}
			}()
			select {
			case <-arrived:
			case <-time.After(30 * time.Second):
				t.Fatal("the slow request never reached the upstream")
			}
			if err := s.cmd.Process.Signal(tc.first); err != nil {
				t.Fatal(err)
			}
			// The second signal once the first has been taken: /readyz
			// fails (TERM) or the listeners close (INT).
			deadline := time.Now().Add(30 * time.Second)
			for {
				resp, err := http.Get(s.admin + "/readyz")
				if err != nil {
					break
				}
				resp.Body.Close()
				if resp.StatusCode == 503 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("no sign of the first signal after 30s:\n%s", s.logs())
				}
				time.Sleep(10 * time.Millisecond)
			}
			sent := time.Now()
			if err := s.cmd.Process.Signal(tc.second); err != nil {
				t.Fatal(err)
			}
			select {
			case <-s.exited:
			case <-time.After(30 * time.Second): // the delay and timeout are 60s each
				t.Fatalf("still running 30s after the second signal:\n%s", s.logs())
			}
			if want := 128 + int(tc.second); s.exitCode != want {
				t.Fatalf("exit status %d, want %d:\n%s", s.exitCode, want, s.logs())
			}
			t.Logf("ended %v after the second signal", time.Since(sent))
		})
	}
}
