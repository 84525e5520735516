package gateway

import (
	"log/slog"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// A gateway behind a load balancer or a proxy without trusted_proxies keys
// every client by the proxy's address: they all share one bucket, and the
// limit meant for one client is spent by all of them together. The
// forwarding header the proxy sends gives it away; forwardedWarner says
// so, in a WARN at most once a minute per peer and in a counter of every
// such request.

// warnPeersMax bounds the peers whose last warning is remembered: a flood
// of requests from new addresses costs at most this many entries, and
// beyond it one warning a minute stands for all the others.
const warnPeersMax = 1024

// forwardedWarner warns about forwarding headers from peers while
// trusted_proxies is empty.
type forwardedWarner struct {
	count prometheus.Counter
	log   *slog.Logger
	now   func() time.Time
	every time.Duration
	max   int

	mu       sync.Mutex
	last     map[netip.Addr]time.Time // when each peer was last warned about
	pruned   time.Time                // when last was last rid of old entries
	overflow time.Time                // when the last warning for a peer not remembered was
}

func newForwardedWarner(reg prometheus.Registerer, log *slog.Logger) *forwardedWarner {
	w := &forwardedWarner{
		count: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_forwarded_untrusted_total",
			Help: "Requests that carried X-Forwarded-For or Forwarded while trusted_proxies is empty: the header is ignored, and every client behind the peer that sent it shares the peer's bucket.",
		}),
		log:   log,
		now:   time.Now,
		every: time.Minute,
		max:   warnPeersMax,
		last:  make(map[netip.Addr]time.Time),
	}
	reg.MustRegister(w.count)
	return w
}

// note counts r when it carries a forwarding header, and warns about its
// peer unless it was warned about within the minute.
func (w *forwardedWarner) note(r *http.Request) {
	header := "X-Forwarded-For"
	if len(r.Header[header]) == 0 {
		if header = "Forwarded"; len(r.Header[header]) == 0 {
			return
		}
	}
	w.count.Inc()
	var peer netip.Addr
	if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
		peer = ap.Addr().Unmap()
	}
	if !w.allow(peer) {
		return
	}
	w.log.Warn("sluice: requests from this peer carry a forwarding header, but trusted_proxies is empty: the header is ignored and every client behind the peer shares one bucket; if the peer is your proxy or load balancer, list it in trusted_proxies and name its header in forwarded_header (at most one such warning a minute per peer)",
		"peer", peer.String(), "header", header)
}

// allow reports whether to warn about peer now, and remembers it.
func (w *forwardedWarner) allow(peer netip.Addr) bool {
	now := w.now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if t, ok := w.last[peer]; ok {
		if now.Sub(t) < w.every {
			return false
		}
		w.last[peer] = now
		return true
	}
	if len(w.last) >= w.max && now.Sub(w.pruned) >= w.every {
		for p, t := range w.last {
			if now.Sub(t) >= w.every {
				delete(w.last, p)
			}
		}
		w.pruned = now
	}
	if len(w.last) >= w.max {
		if now.Sub(w.overflow) < w.every {
			return false
		}
		w.overflow = now
		return true
	}
	w.last[peer] = now
	return true
}

// remembered returns the number of peers remembered.
func (w *forwardedWarner) remembered() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.last)
}
