package httplimit

import (
	"context"
	"net/http"
	"strconv"
)

// costWriter removes the cost header the next handler set and charges the
// difference between the real cost and the one taken up front. The header
// is read when the response header is written; a cost declared as a
// trailer is read when the handler returns.
type costWriter struct {
	http.ResponseWriter
	l       *Limiter
	p       *policy
	rs      *ruleSet
	key     string
	ctx     context.Context
	wrote   bool
	charged bool
}

func (c *costWriter) WriteHeader(code int) {
	if !c.wrote && code >= 200 {
		c.wrote = true
		c.fromHeader(true)
	}
	c.ResponseWriter.WriteHeader(code)
}

func (c *costWriter) Write(b []byte) (int, error) {
	if !c.wrote {
		c.wrote = true
		c.fromHeader(true)
	}
	return c.ResponseWriter.Write(b)
}

// Flush sends the header (charging first) and what is buffered.
func (c *costWriter) Flush() {
	if !c.wrote {
		c.wrote = true
		c.fromHeader(true)
	}
	_ = http.NewResponseController(c.ResponseWriter).Flush()
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (c *costWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }

// finish runs after the handler returned: a handler that wrote nothing is
// charged now; a cost in a trailer is charged now.
func (c *costWriter) finish() {
	if !c.wrote {
		c.fromHeader(true)
		return
	}
	h := c.ResponseWriter.Header()
	for _, k := range [...]string{http.TrailerPrefix + c.p.CostHeader, c.p.CostHeader} {
		if v := h.Get(k); v != "" {
			h.Del(k)
			c.charge(v, false)
			return
		}
	}
}

func (c *costWriter) fromHeader(updateHeaders bool) {
	h := c.ResponseWriter.Header()
	v := h.Get(c.p.CostHeader)
	if v == "" {
		return
	}
	h.Del(c.p.CostHeader)
	c.charge(v, updateHeaders)
}

func (c *costWriter) charge(v string, updateHeaders bool) {
	if c.charged {
		return
	}
	c.charged = true
	real, err := strconv.ParseInt(v, 10, 64)
	if err != nil || real < 0 {
		if c.l.errLog.allow() {
			c.l.log.Warn("sluice: ignoring a cost header that is not a whole number ≥ 0", "policy", c.p.Name, "header", c.p.CostHeader, "value", v)
		}
		return
	}
	delta := real - c.p.Cost
	if delta == 0 {
		return
	}
	res, err := c.l.adjust(c.ctx, c.p, c.key, delta, c.rs.rules)
	if err == nil && updateHeaders && !c.p.Shadow {
		c.l.setHeaders(c.ResponseWriter.Header(), c.p, c.rs, res)
	}
}
