package httplimit

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/sluicehq/sluice"
)

// serveAllowed calls next for a request of p that res allowed at decided.
// When the response carries rate limit headers or p has a CostHeader, next
// writes through a limitWriter; otherwise straight to w.
func (l *Limiter) serveAllowed(w http.ResponseWriter, r *http.Request, next http.Handler, p *policy, rs *ruleSet, key string, res sluice.Result, decided moment) {
	headers := !p.Shadow && l.sendsHeaders()
	if !headers && p.CostHeader == "" {
		next.ServeHTTP(w, r)
		return
	}
	lw := &limitWriter{ResponseWriter: w, l: l, p: p, rs: rs, key: key, r: r, decided: decided, headers: headers}
	lw.keep(res)
	next.ServeHTTP(lw, r)
	lw.finish()
}

// limitWriter is the ResponseWriter of an allowed request. When the
// response header is written (WriteHeader, the first Write or Flush, or the
// handler's return) it sets the rate limit headers, computed at that moment,
// over any of the same names that the handler set (an upstream's own,
// through a proxy: they would otherwise be joined with sluice's into one
// list that parsers reject). It also removes the cost the handler reported
// in Policy.CostHeader and charges the difference to the cost taken up
// front; a cost declared as a trailer is charged when the handler returns.
type limitWriter struct {
	http.ResponseWriter
	l       *Limiter
	p       *policy
	rs      *ruleSet
	key     string
	r       *http.Request
	decided moment // when the result was decided: t counts from here
	rule    int    // of the result: see sluice.Result
	left    int64  // sluice.Result.Remaining
	reset   time.Duration
	headers bool // set the rate limit headers
	// open: the store failed and the request is served open, with no
	// figures to report: the names sluice owns are taken off the
	// handler's response instead (an upstream's own would read as
	// sluice's), and no cost is charged.
	open     bool
	wrote    bool // the response header is out (or hijacked)
	charged  bool
	hijacked bool
	vals     [numVals]string
}

// start runs once, just before the response header is written.
func (c *limitWriter) start() {
	if c.wrote {
		return
	}
	c.wrote = true
	h := c.ResponseWriter.Header()
	if c.open {
		for k := range h {
			if c.l.owns(k) || (c.p.CostHeader != "" && k == http.CanonicalHeaderKey(c.p.CostHeader)) {
				delete(h, k)
			}
		}
		c.undeclareTrailer(h)
		return
	}
	if c.p.CostHeader != "" {
		if v := h.Get(c.p.CostHeader); v != "" {
			h.Del(c.p.CostHeader)
			c.charge(v)
		}
	}
	if c.headers {
		// t counts from now: the reset less the time since the decision.
		t := ceilSeconds(c.reset - sinceMoment(c.decided))
		c.l.putHeaders(h, c.rs, c.rule, c.left, t, &c.vals)
		c.undeclareTrailer(h)
	}
}

// undeclareTrailer takes the names sluice owns off h's Trailer.
func (c *limitWriter) undeclareTrailer(h http.Header) {
	if tr, ok := h["Trailer"]; ok {
		if tr = c.l.undeclareOwned(tr); tr == nil {
			delete(h, "Trailer")
		} else {
			h["Trailer"] = tr
		}
	}
}

func (c *limitWriter) WriteHeader(code int) {
	if code >= 200 {
		c.start()
	}
	c.ResponseWriter.WriteHeader(code)
}

func (c *limitWriter) Write(b []byte) (int, error) {
	c.start()
	return c.ResponseWriter.Write(b)
}

// ReadFrom keeps the connection's own ReadFrom (sendfile) reachable.
func (c *limitWriter) ReadFrom(src io.Reader) (int64, error) {
	c.start()
	if rf, ok := c.ResponseWriter.(io.ReaderFrom); ok {
		return rf.ReadFrom(src)
	}
	return io.Copy(writerOnly{c.ResponseWriter}, src)
}

// writerOnly hides a writer's ReadFrom, so io.Copy does not loop back.
type writerOnly struct{ io.Writer }

// Flush sends the header (charging first) and what is buffered.
func (c *limitWriter) Flush() { _ = c.FlushError() }

// FlushError is Flush for http.ResponseController, with the error.
func (c *limitWriter) FlushError() error {
	c.start()
	return http.NewResponseController(c.ResponseWriter).Flush()
}

// Hijack hands the connection over (a WebSocket upgrade, say); the rate
// limit headers are then the handler's business.
func (c *limitWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, rw, err := http.NewResponseController(c.ResponseWriter).Hijack()
	if err == nil {
		c.wrote, c.hijacked = true, true
	}
	return conn, rw, err
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (c *limitWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }

// finish runs after the handler returned: a handler that wrote nothing
// gets its headers (and is charged) now, before net/http writes the
// header; a cost in a trailer is charged now.
func (c *limitWriter) finish() {
	if c.hijacked {
		return
	}
	if !c.wrote {
		c.start()
		return
	}
	if c.p.CostHeader == "" || c.open {
		return
	}
	h := c.ResponseWriter.Header()
	for _, k := range [...]string{http.TrailerPrefix + c.p.CostHeader, c.p.CostHeader} {
		if v := h.Get(k); v != "" {
			h.Del(k)
			c.charge(v)
			return
		}
	}
}

// charge adjusts the buckets by the real cost v less the cost taken up
// front; the result, when the store answers, is what the headers report.
func (c *limitWriter) charge(v string) {
	if c.charged {
		return
	}
	c.charged = true
	real, err := strconv.ParseInt(v, 10, 64)
	if err != nil || real < 0 {
		c.l.core.WarnLimited("sluice: ignoring a cost header that is not a whole number ≥ 0", "policy", c.p.Name, "header", c.p.CostHeader, "value", v)
		return
	}
	delta := real - c.p.Cost
	if delta == 0 {
		return
	}
	res, err := c.l.core.Adjust(context.WithoutCancel(c.r.Context()), c.p.Compiled, c.key, delta, c.rs.Rules)
	if err == nil {
		c.keep(res)
		c.decided = monoNow()
	}
}

// keep keeps what the headers report of res.
func (c *limitWriter) keep(res sluice.Result) {
	c.rule, c.left, c.reset = res.Rule, res.Remaining, res.ResetAfter
}
