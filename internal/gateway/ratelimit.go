package gateway

import (
	"net/http"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/envoyrls"
	"github.com/sluicehq/sluice/internal/rlsstats"
)

// SetLoader makes reloads (SIGHUP, the file watch) read the configuration
// with load instead of the file given to New: `sluice ratelimit` builds
// it from the environment and the descriptor files. Call it before Serve.
func (g *Gateway) SetLoader(load func() (*config.Config, error)) { g.load = load }

// SetStats makes the rate limit service (gRPC and /json) count its calls
// in envoyproxy/ratelimit's statsd stats (`sluice ratelimit`,
// USE_STATSD). Call it before Serve.
func (g *Gateway) SetStats(s *rlsstats.Stats) { g.rlsStats = s }

func (g *Gateway) loadConfig() (*config.Config, error) {
	if g.load != nil {
		return g.load()
	}
	return config.Load(g.path)
}

// trafficHandler is what the traffic listener serves: the gateway, or,
// for `sluice ratelimit`, envoyproxy/ratelimit's HTTP endpoints.
func (g *Gateway) trafficHandler(cfg *config.Config) http.Handler {
	if cfg.EnvoyRLS.Upstream == nil {
		return g
	}
	mux := http.NewServeMux()
	// /healthcheck: OK until shutdown starts (SIGTERM), then 500, as
	// envoyproxy/ratelimit answers it; 500 too while no domain is loaded
	// under HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED.
	mux.HandleFunc("/healthcheck", func(w http.ResponseWriter, r *http.Request) {
		if g.draining.Load() || !g.configHealthy() {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		_, _ = w.Write([]byte("OK"))
	})
	mux.Handle("/json", envoyrls.JSONHandler(g.rlsSource, g.log, g.rlsStats, g.tracer))
	return mux
}

// rlsSource is what the rate limit service decides with: the running
// configuration's descriptors and Limiter (its decision core and fields).
func (g *Gateway) rlsSource() (*config.EnvoyRLS, envoyrls.Decider) {
	st := g.state.Load()
	return &st.cfg.EnvoyRLS, st.limiter
}

// serveRLConfig is envoyproxy/ratelimit's /rlconfig of its debug
// listener: the limits loaded, one a line.
func (g *Gateway) serveRLConfig(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	envoyrls.Dump(w, &g.Config().EnvoyRLS)
}
