package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// pprofDir, when set (-envoy-pprof), is where the sluice service's
// profiles of each Envoy load run are written: the service is started
// with admin.pprof, and for each timed run this process fetches a CPU
// profile of the run, the goroutines halfway through, and the mutex,
// block and allocs profiles before and after it (compare them with go
// tool pprof -base; the allocs difference is what the run allocated). The sampling of mutex and block profiles costs the service a
// little: leave it off for the figures.
var pprofDir string

// sluiceRLS (-sluice-envoy-rls) are fields for the envoy_rls section of the
// sluice service's configuration, comma-separated.
var sluiceRLS string

// tolerateFailed (-envoy-tolerate-failed) goes on past checks that failed
// (a deadline on a busy machine), printing how many.
var tolerateFailed bool

// profiler fetches the profiles of one timed run of the sluice service
// whose admin listener is at admin.
type profiler struct {
	admin, prefix string
	wg            sync.WaitGroup
	errs          chan error
}

// startProfiles fetches the "before" profiles and starts the CPU profile
// and the halfway goroutine dump of a run of dur; wait collects them.
func startProfiles(admin, prefix string, dur time.Duration) (*profiler, error) {
	p := &profiler{admin: admin, prefix: prefix, errs: make(chan error, 4)}
	for _, name := range []string{"mutex", "block", "allocs"} {
		if err := p.fetch(name, name+".before"); err != nil {
			return nil, err
		}
	}
	secs := max(1, int(dur/time.Second))
	p.wg.Add(2)
	go func() {
		defer p.wg.Done()
		p.errs <- p.fetch(fmt.Sprintf("profile?seconds=%d", secs), "cpu")
	}()
	go func() {
		defer p.wg.Done()
		time.Sleep(dur / 2)
		p.errs <- p.fetch("goroutine", "goroutine")
	}()
	return p, nil
}

// wait waits for the run's profiles and fetches the "after" ones.
func (p *profiler) wait() error {
	p.wg.Wait()
	close(p.errs)
	for err := range p.errs {
		if err != nil {
			return err
		}
	}
	for _, name := range []string{"mutex", "block", "allocs"} {
		if err := p.fetch(name, name+".after"); err != nil {
			return err
		}
	}
	return nil
}

func (p *profiler) fetch(path, file string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.admin+"/debug/pprof/"+path, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("pprof %s: %w", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("pprof %s: %s: %s", path, resp.Status, b)
	}
	if err := os.MkdirAll(pprofDir, 0o755); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(pprofDir, p.prefix+"."+file+".pprof"))
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
