package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/envoyrls"
)

// Drain begins a stop the way load balancers need it: /readyz answers 503
// and the gRPC health service NOT_SERVING at once, while every listener
// keeps serving for server.shutdown_delay (or until ctx ends), so that
// they stop sending traffic here before it is refused. Then end Serve's
// context: the listeners stop accepting and requests in flight finish
// within server.shutdown_timeout.
func (g *Gateway) Drain(ctx context.Context) {
	g.drainMu.Lock()
	g.draining.Store(true)
	if g.rls != nil {
		g.rls.Drain()
	}
	g.drainMu.Unlock()
	delay := *g.Config().Server.ShutdownDelay
	g.log.Info("sluice: draining: /readyz answers 503; the listeners serve until server.shutdown_delay has passed", "shutdown_delay", delay)
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// setRLS records the gRPC server once it exists, drained at once when
// Drain came first.
func (g *Gateway) setRLS(s *envoyrls.Server) {
	g.drainMu.Lock()
	defer g.drainMu.Unlock()
	g.rls = s
	if g.draining.Load() {
		s.Drain()
	}
	s.SetUpstreamServing(g.configHealthy())
}

// configHealthy is false for `sluice ratelimit` with
// HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED while no domain is loaded:
// its health ("ratelimit" on gRPC, /healthcheck) then fails, as there.
func (g *Gateway) configHealthy() bool {
	cfg := g.Config()
	up := cfg.EnvoyRLS.Upstream
	return up == nil || !up.HealthyWithConfig || len(cfg.EnvoyRLS.Domains()) > 0
}

// syncConfigHealth tells the gRPC listener configHealthy, after a reload.
func (g *Gateway) syncConfigHealth() {
	g.drainMu.Lock()
	defer g.drainMu.Unlock()
	if g.rls != nil {
		g.rls.SetUpstreamServing(g.configHealthy())
	}
}

// serveDraining answers /readyz while the gateway drains.
func (g *Gateway) serveDraining(w http.ResponseWriter) bool {
	if !g.draining.Load() {
		return false
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusServiceUnavailable)
	fmt.Fprintln(w, "not ready: shutting down")
	return true
}

// shutdown stops accepting on every listener at once and lets the requests
// in flight finish for up to timeout; then it closes the connections left.
func (g *Gateway) shutdown(timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	g.drainMu.Lock()
	rls := g.rls
	g.drainMu.Unlock()
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i, s := range []*http.Server{g.traffic, g.admin, g.decision} {
		if s != nil {
			wg.Go(func() {
				if err := s.Shutdown(ctx); err != nil {
					errs[i] = err
					_ = s.Close()
				}
			})
		}
	}
	if rls != nil {
		wg.Go(func() { errs[3] = rls.Stop(ctx) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("requests still in flight after server.shutdown_timeout %v were cut off: %w", timeout, err)
		}
		return err
	}
	return nil
}
