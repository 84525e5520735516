package gateway

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/httplimit"
)

// accessLogQueue bounds the lines waiting for the writer: a request never
// waits for the disk; when the writer falls this far behind, lines are
// dropped and counted (sluice_access_log_dropped_total).
const accessLogQueue = 8192

// accessEntry is one request of the traffic listener, as the access log
// writes it.
type accessEntry struct {
	start    time.Time
	duration time.Duration
	client   string // the address the limiter keys, after trusted proxies
	method   string
	path     string // the normal form matched and passed on
	proto    string
	status   int
	bytes    int64
	agent    string
	referer  string
	decision httplimit.AccessRecord
}

// accessLog writes entries from a bounded queue on a goroutine of its own,
// buffered, flushing whenever the queue runs empty. It is safe for
// concurrent use.
type accessLog struct {
	format  string
	file    string // a path, or "-" for standard output
	log     *slog.Logger
	dropped prometheus.Counter

	mu     sync.RWMutex // guards closed against sends on a closed queue
	closed bool
	queue  chan accessEntry
	reopen chan chan error
	done   chan struct{}

	out     io.WriteCloser
	w       *bufio.Writer
	failing bool // the last write failed (logged once until one succeeds)
}

// newAccessLog opens the access log of cfg, or returns nil when there is
// none.
func newAccessLog(cfg *config.AccessLog, reg prometheus.Registerer, log *slog.Logger) (*accessLog, error) {
	if !cfg.Enabled() {
		return nil, nil
	}
	a := &accessLog{
		format: cfg.Format,
		file:   cfg.File(),
		log:    log,
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_access_log_dropped_total",
			Help: "Access log lines dropped because the writer could not keep up.",
		}),
		queue:  make(chan accessEntry, accessLogQueue),
		reopen: make(chan chan error),
		done:   make(chan struct{}),
	}
	out, err := a.open()
	if err != nil {
		return nil, err
	}
	if err := reg.Register(a.dropped); err != nil {
		_ = out.Close()
		return nil, err
	}
	a.out, a.w = out, bufio.NewWriterSize(out, 64<<10)
	go a.run()
	return a, nil
}

func (a *accessLog) open() (io.WriteCloser, error) {
	if a.file == config.AccessLogStdout {
		return nopCloser{os.Stdout}, nil
	}
	f, err := os.OpenFile(a.file, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("access_log.path: %w", err)
	}
	return f, nil
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

// add queues e, or drops and counts it when the queue is full or the log
// closed.
func (a *accessLog) add(e accessEntry) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	if a.closed {
		a.dropped.Inc()
		return
	}
	select {
	case a.queue <- e:
	default:
		a.dropped.Inc()
	}
}

func (a *accessLog) run() {
	defer close(a.done)
	var buf []byte
	for {
		select {
		case e, ok := <-a.queue:
			if !ok {
				a.flush()
				_ = a.out.Close()
				return
			}
			buf = a.appendEntry(buf[:0], &e)
			a.write(buf)
			if len(a.queue) == 0 {
				a.flush()
			}
		case reply := <-a.reopen:
			reply <- a.swap()
		}
	}
}

func (a *accessLog) write(line []byte) {
	if _, err := a.w.Write(line); err != nil {
		a.writeFailed(err)
	}
}

func (a *accessLog) flush() {
	if err := a.w.Flush(); err != nil {
		a.writeFailed(err)
		a.w.Reset(a.out) // drop what cannot be written rather than keep failing on it
		return
	}
	a.failing = false
}

func (a *accessLog) writeFailed(err error) {
	if !a.failing {
		a.log.Error("sluice: cannot write the access log", "file", a.file, "err", err)
	}
	a.failing = true
}

// swap flushes and closes the file and opens its path again (after
// logrotate renamed it). When the path cannot be opened the old file stays.
func (a *accessLog) swap() error {
	var buf []byte
	for n := len(a.queue); n > 0; n-- { // the lines queued before the signal go to the old file
		e, ok := <-a.queue
		if !ok {
			break
		}
		buf = a.appendEntry(buf[:0], &e)
		a.write(buf)
	}
	a.flush()
	if a.file == config.AccessLogStdout {
		return nil
	}
	out, err := a.open()
	if err != nil {
		return err
	}
	_ = a.out.Close()
	a.out = out
	a.w.Reset(out)
	return nil
}

// Reopen writes the lines queued so far to the current file and opens
// the path again, for logrotate.
func (a *accessLog) Reopen() error {
	a.mu.RLock()
	defer a.mu.RUnlock()
	if a.closed {
		return nil
	}
	reply := make(chan error, 1)
	a.reopen <- reply
	return <-reply
}

// Close writes every queued line and closes the file. Lines added later
// are dropped.
func (a *accessLog) Close() {
	a.mu.Lock()
	if !a.closed {
		a.closed = true
		close(a.queue)
	}
	a.mu.Unlock()
	<-a.done
}

// appendEntry renders e as one line of the log's format.
func (a *accessLog) appendEntry(b []byte, e *accessEntry) []byte {
	if a.format == config.AccessLogJSON {
		return appendJSONEntry(b, e)
	}
	return appendCombinedEntry(b, e)
}

// appendCombinedEntry writes the combined format, in UTC, followed by
// sluice's fields, quoted, "-" when empty: policy, key class, decision,
// what decided, then the duration in seconds.
//
//	203.0.113.7 - - [03/Dec/2026:17:05:43 +0000] "GET /products/1 HTTP/1.1" 429 61 "-" "curl/8.5.0" "products" "anonymous" "denied" "store" 0.000
func appendCombinedEntry(b []byte, e *accessEntry) []byte {
	b = appendBare(b, e.client)
	b = append(b, " - "...)
	b = appendBare(b, e.decision.Identity)
	b = e.start.UTC().AppendFormat(append(b, " ["...), "02/Jan/2006:15:04:05 -0700")
	b = append(b, "] \""...)
	b = appendEscaped(b, e.method)
	b = append(b, ' ')
	b = appendEscaped(b, e.path)
	b = append(b, ' ')
	b = appendEscaped(b, e.proto)
	b = append(b, "\" "...)
	b = strconv.AppendInt(b, int64(e.status), 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, e.bytes, 10)
	for _, s := range [...]string{e.referer, e.agent, e.decision.Policy, e.decision.Class, e.decision.Outcome, e.decision.DecidedBy} {
		b = append(b, " \""...)
		if s == "" {
			s = "-"
		}
		b = appendEscaped(b, s)
		b = append(b, '"')
	}
	b = append(b, ' ')
	b = strconv.AppendFloat(b, e.duration.Seconds(), 'f', 3, 64)
	return append(b, '\n')
}

// appendJSONEntry writes one JSON object with the field names `sluice
// advise` reads by default; user is there only for an authenticated
// caller, and sluice_* only when a policy matched.
func appendJSONEntry(b []byte, e *accessEntry) []byte {
	b = append(b, `{"time":"`...)
	b = e.start.UTC().AppendFormat(b, "2006-01-02T15:04:05.000Z07:00")
	b = append(b, '"')
	b = appendJSONField(b, "remote_addr", e.client)
	if e.decision.Identity != "" {
		b = appendJSONField(b, "user", e.decision.Identity)
	}
	b = appendJSONField(b, "method", e.method)
	b = appendJSONField(b, "path", e.path)
	b = appendJSONField(b, "protocol", e.proto)
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(e.status), 10)
	b = append(b, `,"bytes":`...)
	b = strconv.AppendInt(b, e.bytes, 10)
	b = append(b, `,"duration_ms":`...)
	b = strconv.AppendFloat(b, float64(e.duration)/float64(time.Millisecond), 'f', 3, 64)
	if e.referer != "" {
		b = appendJSONField(b, "referer", e.referer)
	}
	if e.agent != "" {
		b = appendJSONField(b, "user_agent", e.agent)
	}
	d := &e.decision
	for _, f := range [...]struct{ name, v string }{{"sluice_policy", d.Policy}, {"sluice_class", d.Class}, {"sluice_decision", d.Outcome}, {"sluice_decided_by", d.DecidedBy}} {
		if f.v != "" {
			b = appendJSONField(b, f.name, f.v)
		}
	}
	return append(b, "}\n"...)
}

func appendJSONField(b []byte, name, v string) []byte {
	b = append(b, ',', '"')
	b = append(b, name...)
	b = append(b, `":"`...)
	for i := 0; i < len(v); {
		c := v[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20 || c == 0x7f:
			b = fmt.Appendf(b, `\u%04x`, c)
		case c < utf8.RuneSelf:
			b = append(b, c)
		default:
			r, n := utf8.DecodeRuneInString(v[i:])
			if r == utf8.RuneError && n == 1 {
				b = append(b, `\ufffd`...)
			} else {
				b = append(b, v[i:i+n]...)
			}
			i += n
			continue
		}
		i++
	}
	return append(b, '"')
}

// appendEscaped writes s for a quoted field of the combined format: a
// quote, a backslash, a control byte or a byte beyond ASCII as \xHH, as
// nginx does, so a client cannot end the field or the line.
func appendEscaped(b []byte, s string) []byte {
	const hex = "0123456789ABCDEF"
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '"' || c == '\\' || c < 0x20 || c >= 0x7f {
			b = append(b, '\\', 'x', hex[c>>4], hex[c&15])
			continue
		}
		b = append(b, c)
	}
	return b
}

// appendBare writes s for an unquoted field (client, user): "-" when
// empty, and a space escaped too.
func appendBare(b []byte, s string) []byte {
	if s == "" {
		return append(b, '-')
	}
	const hex = "0123456789ABCDEF"
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == ' ' || c == '"' || c == '\\' || c == '[' || c < 0x20 || c >= 0x7f {
			b = append(b, '\\', 'x', hex[c>>4], hex[c&15])
			continue
		}
		b = append(b, c)
	}
	return b
}

// statusWriter records what a handler answered, for the access log.
type statusWriter struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 && (code >= 200 || code == http.StatusSwitchingProtocols) { // not 100 or 103
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(p)
	w.bytes += int64(n)
	return n, err
}

// Unwrap lets http.ResponseController reach the connection (flushes,
// upgrades).
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// serveLogged serves r with serve and writes its access log line.
func (g *Gateway) serveLogged(w http.ResponseWriter, r *http.Request, serve func(http.ResponseWriter, *http.Request)) {
	start := time.Now()
	e := accessEntry{start: start, method: r.Method, proto: r.Proto, agent: r.UserAgent(), referer: r.Referer()}
	r = r.WithContext(httplimit.WithAccessRecord(r.Context(), &e.decision))
	sw := &statusWriter{ResponseWriter: w}
	serve(sw, r)
	e.duration = time.Since(start)
	e.status, e.bytes = sw.status, sw.bytes
	if e.status == 0 {
		e.status = http.StatusOK // what net/http answers for a handler that wrote nothing
		if r.Context().Err() != nil {
			e.status = statusClientGone
		}
	}
	e.path = e.decision.Path
	if e.path == "" {
		e.path = r.URL.EscapedPath() // refused before normalising
	}
	st := g.state.Load()
	if a := httplimit.ClientIP(r, st.trusted, st.forwardedFrom); a.IsValid() {
		e.client = a.String()
	}
	g.accessLog.add(e)
}

// reopenAccessLog opens the access log's path again (SIGHUP, after
// logrotate moved the file); on failure the log goes on to the old file.
func (g *Gateway) reopenAccessLog() {
	if g.accessLog == nil {
		return
	}
	if err := g.accessLog.Reopen(); err != nil {
		g.log.Error("sluice: cannot reopen the access log; writing on to the old file", "file", g.accessLog.file, "err", err)
	}
}

// closeAccessLog writes out the queued lines and closes the file.
func (g *Gateway) closeAccessLog() {
	if g.accessLog != nil {
		g.accessLog.Close()
	}
}
