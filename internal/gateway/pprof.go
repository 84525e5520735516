package gateway

import (
	"net"
	"net/http"
	"net/http/pprof"
	"runtime"
	"strings"
)

// pprofHandler serves Go's profiles under /debug/pprof/ to loopback peers
// alone (admin.pprof, SLUICE_PPROF for sluice ratelimit). A CPU profile or
// a trace keeps the process busy for the seconds the caller names, and the
// profiles show the code, the heap and every goroutine's stack: from any
// other address the answer is 403, wherever the listener is bound.
//
// It turns on sampling for the mutex and block profiles, which are empty
// otherwise: one contended unlock in mutexFraction, and blocking events
// with probability of their length over blockRate (all of 100 µs or more).
func pprofHandler() http.Handler {
	runtime.SetMutexProfileFraction(mutexFraction)
	runtime.SetBlockProfileRate(blockRate)
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index) // heap, goroutine, mutex, block, allocs, …
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !loopbackPeer(r.RemoteAddr) {
			http.Error(w, "sluice: /debug/pprof/ is answered to loopback peers only (use kubectl port-forward or ssh -L)", http.StatusForbidden)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

const (
	mutexFraction = 100
	blockRate     = 100_000 // ns
)

// loopbackPeer reports whether a request's RemoteAddr is a loopback
// address (127.0.0.0/8, ::1, ::ffff:127.0.0.1). Headers such as
// X-Forwarded-For are not read: a peer could forge them.
func loopbackPeer(remote string) bool {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	host, _, _ = strings.Cut(host, "%") // a zone
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
