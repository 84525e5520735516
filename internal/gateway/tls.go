package gateway

import (
	"crypto/tls"
	"fmt"
	"net"
	"time"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/certs"
)

// initTLS builds the TLS of each listener that the configuration serves
// over TLS: a certs.Reloader per listener, which reads the files again
// when they change. The HTTP listeners speak HTTP/1.1 over TLS, as they do
// in plain text, so that the bounds of the server section apply alike; the
// gRPC listener speaks HTTP/2, as gRPC needs.
func (g *Gateway) initTLS(cfg *config.Config) error {
	g.tlsConfigs = make(map[string]*tls.Config)
	for _, name := range []string{config.ListenerTraffic, config.ListenerDecision, config.ListenerAdmin, config.ListenerEnvoyRLS} {
		t := cfg.ListenerTLS(name)
		switch {
		case t == nil:
			continue
		case name == config.ListenerEnvoyRLS && cfg.EnvoyRLS.Listen == "",
			name == config.ListenerDecision && cfg.DecisionAPI.Listen == config.DecisionListenOff:
			continue // no such listener: nothing to serve, or to log, over TLS
		}
		base := &tls.Config{MinVersion: t.Version(), NextProtos: []string{"http/1.1"}}
		if name == config.ListenerEnvoyRLS {
			base.NextProtos = []string{"h2"}
		}
		cert, key, ca := t.Files()
		r, err := certs.NewReloader(certs.Files{Cert: cert, Key: key, ClientCA: ca}, base, g.log.With("listener", name))
		if err != nil {
			return fmt.Errorf("%s: %s listener: tls: %w", cfg.File, name, err)
		}
		leaf := r.Config().Certificates[0].Leaf
		g.log.Info("sluice: TLS", "listener", name, "cert_file", cert, "subject", leaf.Subject.String(), "not_after", leaf.NotAfter.UTC().Format(time.RFC3339),
			"mutual", ca != "", "min_version", tls.VersionName(t.Version()))
		g.tlsConfigs[name] = r.ServerConfig()
	}
	return nil
}

// tlsListener serves ln over TLS when the configuration says so for the
// listener name. It wraps the bounds on connections, so that a connection
// beyond them is refused before it costs a handshake.
func (g *Gateway) tlsListener(name string, ln net.Listener) net.Listener {
	if c := g.tlsConfigs[name]; c != nil {
		return tls.NewListener(ln, c)
	}
	return ln
}

// TLS returns the tls.Config of a listener (config.ListenerTraffic, …), or
// nil when it serves plain text.
func (g *Gateway) TLS(listener string) *tls.Config { return g.tlsConfigs[listener] }

func (g *Gateway) warnRestartTLS(old, cfg *config.Config) {
	for _, name := range []string{config.ListenerTraffic, config.ListenerDecision, config.ListenerAdmin, config.ListenerEnvoyRLS} {
		a, b := old.ListenerTLS(name), cfg.ListenerTLS(name)
		if (a == nil) != (b == nil) || a != nil && *a != *b {
			g.log.Warn("sluice: a tls section changed; it applies at the next restart (the files it names are read again when they change)", "file", g.path, "listener", name)
			return
		}
	}
}
