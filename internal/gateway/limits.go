package gateway

import (
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/connlimit"
)

// The gateway's protection of its own: whatever a client does,
// it holds at most a bounded share of the process. Headers must arrive
// within read_header_timeout and a whole request within read_timeout
// (http.Server's own deadlines, set in newServer); bodies are bounded
// (max_body_bytes for the proxy, 64 KiB for the decision API); and each
// listener serves at most max_in_flight requests at once, paced requests
// being held included, and keeps at most max_connections open, answering
// 503 beyond either.

// newServer is an http.Server for h, serving listener, with the timeouts
// and header bound of s; what it logs goes through serverLog.
func (g *Gateway) newServer(h http.Handler, s config.Server, listener string) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: s.ReadHeaderTimeout,
		ReadTimeout:       s.ReadTimeout,
		WriteTimeout:      s.WriteTimeout,
		IdleTimeout:       s.IdleTimeout,
		MaxHeaderBytes:    s.MaxHeaderBytes,
		ErrorLog:          log.New(&serverLog{g: g, listener: listener}, "", 0),
	}
}

// serverLog is the ErrorLog of a listener's http.Server. A failed TLS
// handshake, which any client causes at will (a ClientHello of garbage,
// plain HTTP to a TLS port), is counted (sluice_server_rejections_total,
// reason tls_handshake) and logged at most once a second, with how many
// went unlogged since: one client sent 26,218 in five seconds, each a
// WARN line. Everything else http.Server logs (a handler's panic among
// it) is logged as it comes, at WARN.
type serverLog struct {
	g        *Gateway
	listener string

	mu       sync.Mutex
	next     time.Time // when the next handshake error may be logged
	unlogged int
}

func (l *serverLog) Write(p []byte) (int, error) {
	msg := strings.TrimSuffix(string(p), "\n")
	if !strings.Contains(msg, "TLS handshake error") {
		l.g.log.Warn(msg, "listener", l.listener)
		return len(p), nil
	}
	l.g.rejected(l.listener, "tls_handshake")
	l.mu.Lock()
	now := time.Now()
	if now.Before(l.next) {
		l.unlogged++
		l.mu.Unlock()
		return len(p), nil
	}
	unlogged := l.unlogged
	l.next, l.unlogged = now.Add(time.Second), 0
	l.mu.Unlock()
	l.g.log.Warn(msg, "listener", l.listener, "unlogged_since", unlogged)
	return len(p), nil
}

// inFlight bounds the requests a listener serves at once.
type inFlight struct {
	n        atomic.Int64
	max      int64
	listener string
	g        *Gateway
}

func (f *inFlight) acquire() bool {
	if f.n.Add(1) > f.max {
		f.n.Add(-1)
		return false
	}
	return true
}

func (f *inFlight) release() { f.n.Add(-1) }

// guard serves h within the bound, and answers 503 beyond it.
func (f *inFlight) guard(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !f.acquire() {
			f.overloaded(w)
			return
		}
		defer f.release()
		h.ServeHTTP(w, r)
	})
}

// overloaded answers a request beyond the bound: 503 with Retry-After, and
// the connection closed, so that what it had not yet sent is not read.
func (f *inFlight) overloaded(w http.ResponseWriter) {
	f.g.rejected(f.listener, "in_flight")
	w.Header().Set("Retry-After", "1")
	w.Header().Set("Connection", "close")
	writeError(w, http.StatusServiceUnavailable, "overloaded", "the gateway is serving as many requests as it may at once; retry shortly")
}

// initLimits sets up the bounds of cfg's server section. They are read
// once: a change applies at the next restart.
func (g *Gateway) initLimits(cfg *config.Config) {
	g.trafficFlight = &inFlight{max: int64(cfg.Server.MaxInFlight), listener: "traffic", g: g}
	g.decisionFlight = &inFlight{max: int64(cfg.Server.MaxInFlight), listener: "decision", g: g}
	g.rejections = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_server_rejections_total",
		Help: "Requests the gateway refused to protect itself, by listener (traffic, decision, admin, envoy_rls) and reason (connections, connections_per_ip, in_flight, body_too_large, read_timeout, unauthorized, tls_handshake).",
	}, []string{"listener", "reason"})
	g.reg.MustRegister(g.rejections)
}

func (g *Gateway) rejected(listener, reason string) {
	g.rejections.WithLabelValues(listener, reason).Inc()
}

// serveTraffic serves a request of the traffic listener through the
// policies, its body bounded by server.max_body_bytes.
func (g *Gateway) serveTraffic(w http.ResponseWriter, r *http.Request, st *state) {
	limit := st.cfg.Server.BodyLimit()
	if r.Body == nil || r.Body == http.NoBody {
		st.handler.ServeHTTP(w, r)
		return
	}
	if limit > 0 && r.ContentLength > limit {
		g.rejected("traffic", "body_too_large")
		w.Header().Set("Connection", "close")
		writeError(w, http.StatusRequestEntityTooLarge, "body_too_large", fmt.Sprintf("the request body is larger than %d bytes", limit))
		return
	}
	body := &guardedBody{rc: r.Body}
	if limit > 0 {
		body.rc = http.MaxBytesReader(w, r.Body, limit)
	}
	r.Body = body
	gw := &guardWriter{ResponseWriter: w, body: body, g: g}
	st.handler.ServeHTTP(gw, r)
}

// guardedBody remembers why reading a request body failed, when it was
// the gateway's own bound (too large, or too slow), so that the proxy's
// "upstream failed" answer can be told as what it is.
type guardedBody struct {
	rc      io.ReadCloser
	reading atomic.Int32 // reads under way
	mu      sync.Mutex
	why     int // 0, or the status that says why: 413 or 408
}

func (b *guardedBody) Read(p []byte) (int, error) {
	b.reading.Add(1)
	n, err := b.rc.Read(p)
	b.reading.Add(-1)
	if err != nil && err != io.EOF {
		if status := bodyErrorStatus(err); status != 0 {
			b.mu.Lock()
			if b.why == 0 {
				b.why = status
			}
			b.mu.Unlock()
		}
	}
	return n, err
}

func (b *guardedBody) Close() error { return b.rc.Close() }

func (b *guardedBody) failure() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.why
}

// failureAfterRead is failure once a read under way has returned. A read
// that passes read_timeout cancels the request's context inside net/http
// before it returns here, so the proxy may report the cancellation first;
// the read is then a moment from returning (as it is when the client went
// away, the other cause of a cancellation). The wait is bounded all the
// same, generously, as a starved machine can take seconds to run it.
func (b *guardedBody) failureAfterRead() int {
	for end := time.Now().Add(5 * time.Second); b.reading.Load() > 0 && time.Now().Before(end); {
		time.Sleep(time.Millisecond)
	}
	return b.failure()
}

// bodyErrorStatus is 413 for a body past its bound, 408 for one that did
// not arrive within read_timeout, 0 for any other error.
func bodyErrorStatus(err error) int {
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, os.ErrDeadlineExceeded):
		return http.StatusRequestTimeout
	}
	return 0
}

// guardWriter turns the proxy's 502 (or 499, when the read deadline
// cancelled the request) into 413 or 408 when the upstream request failed
// because the client's body broke one of the gateway's bounds.
type guardWriter struct {
	http.ResponseWriter
	body     *guardedBody
	g        *Gateway
	replaced bool
}

func (w *guardWriter) WriteHeader(code int) {
	if (code == http.StatusBadGateway || code == statusClientGone) && !w.replaced {
		// A body error reaches the proxy after it is recorded here; a
		// cancellation may reach it before.
		status := w.body.failure()
		if code == statusClientGone {
			status = w.body.failureAfterRead()
		}
		if status != 0 {
			w.replaced = true
			w.g.rejected("traffic", rejectReason(status))
			h := w.ResponseWriter.Header()
			h.Del("Content-Length")
			h.Set("Connection", "close")
			writeError(w.ResponseWriter, status, errorCode(status), bodyErrorMessage(status))
			return
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

// statusClientGone is what the proxy answers when the request's context
// was cancelled.
const statusClientGone = 499

func (w *guardWriter) Write(p []byte) (int, error) {
	if w.replaced {
		return len(p), nil
	}
	return w.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController reach the connection (flushes,
// upgrades).
func (w *guardWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// readBody reads a whole request body of at most limit bytes. On failure it
// returns the status to answer: 413 past the limit (white space counts),
// 408 when it did not arrive in time, 400 otherwise.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, int, error) {
	if r.ContentLength > limit {
		w.Header().Set("Connection", "close")
		return nil, http.StatusRequestEntityTooLarge, errors.New(bodyErrorMessage(http.StatusRequestEntityTooLarge) + " (" + strconv.FormatInt(limit, 10) + " bytes)")
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		status := bodyErrorStatus(err)
		if status == 0 {
			return nil, http.StatusBadRequest, fmt.Errorf("reading the body: %v", err)
		}
		msg := bodyErrorMessage(status)
		if status == http.StatusRequestEntityTooLarge {
			msg += " (" + strconv.FormatInt(limit, 10) + " bytes)"
		}
		return nil, status, errors.New(msg)
	}
	return body, 0, nil
}

func bodyErrorMessage(status int) string {
	if status == http.StatusRequestTimeout {
		return "the request body did not arrive in time"
	}
	return "the request body is larger than the gateway accepts"
}

func errorCode(status int) string {
	switch status {
	case http.StatusRequestEntityTooLarge:
		return "body_too_large"
	case http.StatusRequestTimeout:
		return "request_timeout"
	}
	return "invalid_request"
}

func rejectReason(status int) string {
	switch status {
	case http.StatusRequestEntityTooLarge:
		return "body_too_large"
	case http.StatusRequestTimeout:
		return "read_timeout"
	}
	return "invalid_body"
}

// warnRestartServer logs that a changed server section, the listeners'
// bounds, applies at the next restart, naming the fields (max_body_bytes
// and the shutdown fields apply at once: they are not named).
func warnRestartServer(log *slog.Logger, path string, old, cfg *config.Config) {
	o, n := old.Server, cfg.Server
	o.MaxBodyBytes, n.MaxBodyBytes = nil, nil
	// The shutdown fields are read when the gateway stops (drain.go).
	o.ShutdownDelay, n.ShutdownDelay = nil, nil
	o.ShutdownTimeout, n.ShutdownTimeout = 0, 0
	if o == n {
		return
	}
	var fields []string
	ov, nv := reflect.ValueOf(o), reflect.ValueOf(n)
	for i := range ov.NumField() {
		if !reflect.DeepEqual(ov.Field(i).Interface(), nv.Field(i).Interface()) {
			name, _, _ := strings.Cut(ov.Type().Field(i).Tag.Get("yaml"), ",")
			fields = append(fields, "server."+name)
		}
	}
	log.Warn("sluice: these fields of the server section apply at the next restart (max_body_bytes, shutdown_delay and shutdown_timeout apply at once)",
		"file", path, "fields", strings.Join(fields, ", "))
}

// perAddress bounds the open connections of each client address on a
// listener to server.max_connections_per_ip (see connlimit): the traffic,
// decision, admin and envoy_rls listeners alike.
func (g *Gateway) perAddress(ln net.Listener, cfg *config.Config, listener string) net.Listener {
	return connlimit.New(ln, cfg.Server.MaxConnectionsPerIP, cfg.IPv6Prefix, func() { g.rejected(listener, "connections_per_ip") })
}

// limitListener bounds the open connections of a listener. A connection
// past the bound is told 503 and closed at once, rather than left in the
// kernel's queue: the client learns to retry, and the gateway keeps the
// descriptors it needs for the upstream and the store.
type limitListener struct {
	net.Listener
	slots    chan struct{}
	listener string
	g        *Gateway
}

func (g *Gateway) limitListener(ln net.Listener, max int, listener string) net.Listener {
	return &limitListener{Listener: ln, slots: make(chan struct{}, max), listener: listener, g: g}
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		select {
		case l.slots <- struct{}{}:
			return &limitConn{Conn: c, release: func() { <-l.slots }}, nil
		default:
			l.g.rejected(l.listener, "connections")
			go refuse(c)
		}
	}
}

// connectionsFull is what a connection past max_connections is told.
var connectionsFull = func() string {
	body := `{"error":"overloaded","message":"the gateway has as many connections open as it may; retry shortly"}` + "\n"
	return "HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nConnection: close\r\nContent-Type: application/json\r\n" +
		"Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
}()

func refuse(c net.Conn) {
	_ = c.SetWriteDeadline(time.Now().Add(time.Second))
	_, _ = io.WriteString(c, connectionsFull)
	_ = c.Close()
}

type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

// Close releases the slot before it closes the socket (as connlimit
// does): a client that sees the close may dial again at once.
func (c *limitConn) Close() error {
	c.once.Do(c.release)
	return c.Conn.Close()
}
