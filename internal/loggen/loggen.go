// Package loggen writes realistic HTTP access logs for tests and demos of
// the advisor: many callers whose request rates follow a heavy-tailed
// (Pareto) distribution, occasional bursts, a few abusive clients hammering
// one endpoint, anonymous callers keyed by IP (some of them IPv6) and
// authenticated callers with an API key, in Common, Combined or JSON lines
// format, or a mix of them.
//
// The output is a pure function of Options: the same seed writes the same
// bytes. Generation streams second by second of simulated time, so memory
// does not grow with the size of the log; a Generator also hands out the
// events themselves, so a test can hold an analysis of the written log
// against the truth it was written from.
package loggen

import (
	"bufio"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"
)

// Format is the line format of a log.
type Format int

// The formats a Generator writes.
const (
	CLF      Format = iota // Common Log Format
	Combined               // Combined Log Format: CLF with referer and user agent
	JSON                   // JSON lines with time, remote_addr, method, path, status, api_key
	JSONAlt                // JSON lines with other common names: @timestamp, client_ip, request_method, request_uri, user_id
	Mixed                  // each line in one of the above, at random
)

// ParseFormat reads a format name: clf, combined, json, jsonalt or mixed.
func ParseFormat(s string) (Format, bool) {
	switch s {
	case "clf", "common":
		return CLF, true
	case "combined":
		return Combined, true
	case "json":
		return JSON, true
	case "jsonalt":
		return JSONAlt, true
	case "mixed":
		return Mixed, true
	}
	return 0, false
}

// Options configures a Generator. The zero value is a useful default:
// 2000 requests per second from 5000 API keys and 20000 IPs, 3 abusers,
// combined format, starting 2026-01-05 00:00:00 UTC.
type Options struct {
	Seed    uint64
	Start   time.Time // first second of the log; zero means 2026-01-05T00:00:00Z
	Rate    float64   // mean requests per second from ordinary callers; zero means 2000
	Users   int       // authenticated callers; zero means 5000
	IPs     int       // anonymous callers; zero means 20000
	Abusers int       // clients far above everyone else; zero means 3, negative none
	Format  Format
}

// Event is one request of the log.
type Event struct {
	Time     int64  // Unix microseconds
	Method   string // GET, POST, ...
	Path     string // the concrete path, such as /products/123
	Template string // the endpoint it was drawn from, such as /products/{id}
	IP       string // the client address
	User     string // the API key, "" for anonymous callers
	Status   int
	Size     int
	Agent    string
}

// endpoint is one route of the simulated service.
type endpoint struct {
	method, template string
	id               idKind
	anon, auth       float64 // relative weight for anonymous and authenticated callers
}

type idKind int

const (
	noID idKind = iota
	numID
	uuidID
	hexID
)

var endpoints = []endpoint{
	{"GET", "/", noID, 6, 1},
	{"GET", "/products", noID, 20, 15},
	{"GET", "/products/{id}", numID, 35, 25},
	{"GET", "/search", noID, 10, 8},
	{"GET", "/static/app.js", noID, 8, 2},
	{"POST", "/login", noID, 3, 0},
	{"GET", "/users/{id}/orders", uuidID, 0, 12},
	{"POST", "/payments", noID, 0, 3},
	{"PUT", "/cart/items/{id}", numID, 2, 8},
	{"DELETE", "/sessions/{id}", hexID, 0, 2},
}

var agents = []string{
	"Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0 Safari/537.36",
	"Mozilla/5.0 (iPhone; CPU iPhone OS 18_1 like Mac OS X) AppleWebKit/605.1.15 Mobile/15E148",
	"curl/8.5.0",
	"python-requests/2.32.3",
	"Go-http-client/2.0",
}

// caller is one client: anonymous (user == "") or authenticated.
type caller struct {
	ip   string
	v6   bool // ip is a /64 prefix; each request gets its own interface id
	user string
}

// abuser sends rate requests per second to one endpoint, 5 minutes in
// every 30.
type abuser struct {
	caller
	ep   int
	rate float64
}

// Generator produces the events and lines of one log.
type Generator struct {
	opts    Options
	rng     *rand.Rand // events
	fmtRng  *rand.Rand // formats of Mixed lines, apart so that events do not depend on them
	anon    []caller
	users   []caller
	anonW   alias
	userW   alias
	anonEp  alias
	userEp  alias
	abusers []abuser
	sec     int64 // the simulated second being emitted
	pending []Event
	next    int
	burstP  float64
	authP   float64
}

// New returns a Generator for opts.
func New(opts Options) *Generator {
	if opts.Start.IsZero() {
		opts.Start = time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC)
	}
	if opts.Rate <= 0 {
		opts.Rate = 2000
	}
	if opts.Users <= 0 {
		opts.Users = 5000
	}
	if opts.IPs <= 0 {
		opts.IPs = 20000
	}
	if opts.Abusers == 0 {
		opts.Abusers = 3
	}
	g := &Generator{
		opts:   opts,
		rng:    rand.New(rand.NewPCG(opts.Seed, 0x5eed_1ce)),
		fmtRng: rand.New(rand.NewPCG(opts.Seed, 0xf0_4a7)),
		sec:    opts.Start.Unix(),
		burstP: 0.002,
		authP:  0.6,
	}
	g.users = make([]caller, opts.Users)
	for i := range g.users {
		g.users[i] = caller{ip: g.randIPv4(), user: "key-" + strconv.FormatUint(g.rng.Uint64()>>16, 36)}
	}
	g.anon = make([]caller, opts.IPs)
	for i := range g.anon {
		if g.rng.IntN(10) == 0 {
			g.anon[i] = caller{ip: g.randIPv6Prefix(), v6: true}
		} else {
			g.anon[i] = caller{ip: g.randIPv4()}
		}
	}
	g.anonW = newAlias(paretoWeights(g.rng, opts.IPs, 1.3, 300))
	g.userW = newAlias(paretoWeights(g.rng, opts.Users, 1.2, 1000))
	aw, uw := make([]float64, len(endpoints)), make([]float64, len(endpoints))
	for i, e := range endpoints {
		aw[i], uw[i] = e.anon, e.auth
	}
	g.anonEp, g.userEp = newAlias(aw), newAlias(uw)
	for i := 0; i < opts.Abusers; i++ {
		a := abuser{rate: 30 + 20*float64(i%4)}
		switch i % 3 {
		case 0: // a scraper of product pages
			a.caller, a.ep = caller{ip: g.randIPv4()}, 2
		case 1: // credential stuffing
			a.caller, a.ep = caller{ip: g.randIPv4()}, 5
		default: // a runaway integration with a valid key
			a.caller, a.ep = caller{ip: g.randIPv4(), user: "key-runaway" + strconv.Itoa(i)}, 6
		}
		g.abusers = append(g.abusers, a)
	}
	return g
}

// paretoWeights draws n weights from a Pareto distribution of shape alpha:
// most callers are light, a few are heavy.
func paretoWeights(rng *rand.Rand, n int, alpha, limit float64) []float64 {
	w := make([]float64, n)
	for i := range w {
		w[i] = math.Min(1/math.Pow(1-rng.Float64(), 1/alpha), limit)
	}
	return w
}

func (g *Generator) randIPv4() string {
	b := make([]byte, 0, 15)
	b = strconv.AppendInt(b, int64(1+g.rng.IntN(223)), 10)
	for range 3 {
		b = append(b, '.')
		b = strconv.AppendInt(b, int64(g.rng.IntN(256)), 10)
	}
	return string(b)
}

func (g *Generator) randIPv6Prefix() string {
	b := []byte("2001:db8")
	for range 2 {
		b = append(b, ':')
		b = strconv.AppendUint(b, uint64(g.rng.IntN(1<<16)), 16)
	}
	return string(b)
}

// Next returns the next event of the log, in time order.
func (g *Generator) Next() *Event {
	for g.next >= len(g.pending) {
		g.fillSecond()
	}
	e := &g.pending[g.next]
	g.next++
	return e
}

// fillSecond draws every event of the next simulated second.
func (g *Generator) fillSecond() {
	g.pending, g.next = g.pending[:0], 0
	sec := g.sec
	g.sec++
	n := g.poisson(g.opts.Rate)
	for range n {
		var c *caller
		var ep int
		if g.rng.Float64() < g.authP {
			c, ep = &g.users[g.userW.draw(g.rng)], g.userEp.draw(g.rng)
		} else {
			c, ep = &g.anon[g.anonW.draw(g.rng)], g.anonEp.draw(g.rng)
		}
		burst := 1
		if g.rng.Float64() < g.burstP {
			burst += 4 + g.rng.IntN(36)
		}
		for range burst {
			g.add(sec, c, ep, 200)
		}
	}
	for i := range g.abusers {
		a := &g.abusers[i]
		if (sec/60+int64(7*i))%30 >= 5 {
			continue // abusers strike 5 minutes in every 30
		}
		for range g.poisson(a.rate) {
			g.add(sec, &a.caller, a.ep, 401)
		}
	}
	slices.SortFunc(g.pending, func(a, b Event) int { return int(a.Time - b.Time) })
}

func (g *Generator) add(sec int64, c *caller, ep int, errStatus int) {
	e := endpoints[ep]
	ev := Event{
		Time:     sec*1e6 + g.rng.Int64N(1e6),
		Method:   e.method,
		Template: e.template,
		User:     c.user,
		Status:   200,
		Size:     200 + g.rng.IntN(20000),
		Agent:    agents[g.rng.IntN(len(agents))],
	}
	if c.v6 {
		ev.IP = c.ip + ":" + strconv.FormatUint(uint64(g.rng.IntN(1<<16)), 16) + "::" + strconv.FormatUint(uint64(1+g.rng.IntN(1<<16)), 16)
	} else {
		ev.IP = c.ip
	}
	switch r := g.rng.IntN(1000); {
	case errStatus != 200 && r < 700:
		ev.Status = errStatus
	case r < 30:
		ev.Status = 404
	case r < 33:
		ev.Status = 500
	}
	ev.Path = concretePath(g.rng, e)
	g.pending = append(g.pending, ev)
}

func concretePath(rng *rand.Rand, e endpoint) string {
	var id string
	switch e.id {
	case noID:
		return e.template
	case numID:
		id = strconv.Itoa(1 + rng.IntN(99999))
	case hexID:
		id = strconv.FormatUint(rng.Uint64()|1<<60, 16)
	case uuidID:
		h := strconv.FormatUint(rng.Uint64()|1<<63, 16) + strconv.FormatUint(rng.Uint64()|1<<63, 16)
		id = h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
	}
	for i := 0; i+4 <= len(e.template); i++ {
		if e.template[i:i+4] == "{id}" {
			return e.template[:i] + id + e.template[i+4:]
		}
	}
	return e.template
}

// poisson draws a Poisson count of mean m: exactly for small means, by the
// normal approximation above 50.
func (g *Generator) poisson(m float64) int {
	if m > 50 {
		n := int(math.Round(m + math.Sqrt(m)*g.rng.NormFloat64()))
		return max(n, 0)
	}
	l, k, p := math.Exp(-m), 0, 1.0
	for {
		p *= g.rng.Float64()
		if p <= l {
			return k
		}
		k++
	}
}

// Stats sums up what Write wrote.
type Stats struct {
	Lines, Bytes int64
}

// Write writes lines of g's log to w until at least maxBytes bytes or
// maxLines lines (whichever limit is positive and reached first).
func (g *Generator) Write(w io.Writer, maxBytes, maxLines int64) (Stats, error) {
	bw := bufio.NewWriterSize(w, 1<<20)
	var st Stats
	var line []byte
	for (maxBytes <= 0 || st.Bytes < maxBytes) && (maxLines <= 0 || st.Lines < maxLines) {
		if maxBytes <= 0 && maxLines <= 0 {
			break
		}
		e := g.Next()
		f := g.opts.Format
		if f == Mixed {
			f = Format(g.fmtRng.IntN(int(Mixed)))
		}
		line = AppendLine(line[:0], e, f)
		if _, err := bw.Write(line); err != nil {
			return st, err
		}
		st.Lines++
		st.Bytes += int64(len(line))
	}
	return st, bw.Flush()
}

// alias samples from a discrete distribution in constant time (Vose's
// alias method).
type alias struct {
	prob  []float64
	alias []int32
}

func newAlias(w []float64) alias {
	n := len(w)
	a := alias{prob: make([]float64, n), alias: make([]int32, n)}
	var sum float64
	for _, x := range w {
		sum += x
	}
	scaled := make([]float64, n)
	var small, large []int32
	for i, x := range w {
		scaled[i] = x * float64(n) / sum
		if scaled[i] < 1 {
			small = append(small, int32(i))
		} else {
			large = append(large, int32(i))
		}
	}
	for len(small) > 0 && len(large) > 0 {
		s, l := small[len(small)-1], large[len(large)-1]
		small = small[:len(small)-1]
		a.prob[s], a.alias[s] = scaled[s], l
		scaled[l] -= 1 - scaled[s]
		if scaled[l] < 1 {
			large = large[:len(large)-1]
			small = append(small, l)
		}
	}
	for _, i := range large {
		a.prob[i] = 1
	}
	for _, i := range small {
		a.prob[i] = 1
	}
	return a
}

func (a alias) draw(rng *rand.Rand) int {
	i := rng.IntN(len(a.prob))
	if rng.Float64() < a.prob[i] {
		return i
	}
	return int(a.alias[i])
}
