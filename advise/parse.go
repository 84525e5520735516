package advise

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"unicode/utf8"
)

// entry is what the advisor needs of one log line. The byte slices point
// into the line or into the parser's scratch space and are valid until the
// next parse.
type entry struct {
	time   int64 // Unix microseconds
	method []byte
	path   []byte // without query or fragment
	ip     []byte
	user   []byte // empty for anonymous callers
	status int
	// from sluice's own access log (sluicelog.go): the gateway keyed the
	// caller by its identity; the gateway refused the request
	gatewayAuth bool
	refused     bool
}

// Reasons a line is malformed. They are static so that a bad line costs
// no allocation.
var (
	errEmpty     = errors.New("empty line")
	errTruncated = errors.New("truncated line")
	errTime      = errors.New("no valid timestamp")
	errRequest   = errors.New("no METHOD PATH request")
	errMethod    = errors.New("method is not an HTTP token")
	errPath      = errors.New("path does not start with /")
	errStatus    = errors.New("status is not a 3-digit number")
	errCaller    = errors.New("neither a client address nor a user")
	errJSON      = errors.New("not a valid JSON object")
	errFieldType = errors.New("a field has the wrong type")
)

// fieldKind is what a JSON field holds.
type fieldKind uint8

const (
	fieldNone fieldKind = iota
	fieldTime
	fieldMethod
	fieldPath
	fieldRequest // "GET /path HTTP/1.1", when method and path are not separate
	fieldIP
	fieldUser
	fieldStatus
	fieldGatewayClass    // sluice_class of sluice's JSON access log
	fieldGatewayDecision // sluice_decision
	numFields
)

var fieldKindNames = [numFields]string{"", "time", "method", "path", "request", "ip", "user", "status", "sluice_class", "sluice_decision"}

// defaultFields are the JSON field names read by default, in order of
// preference within each kind: what nginx json log formats, Caddy, Traefik,
// Envoy, ECS and Datadog attributes, and the usual Go and Node loggers
// write. A dotted name reaches into nested objects.
var defaultFields = [numFields][]string{
	fieldTime:            {"time", "timestamp", "ts", "@timestamp", "time_local", "time_iso8601", "datetime", "date", "start_time", "StartUTC"},
	fieldMethod:          {"method", "request_method", "http_method", "verb", "RequestMethod", "http.method", "http.request_method", "http.request.method", "request.method"},
	fieldPath:            {"path", "uri", "request_uri", "url", "request_path", "RequestPath", "http.path", "http.request_uri", "http.url", "http.url_details.path", "url.path", "url.original", "request.uri", "request.path", "request.url"},
	fieldRequest:         {"request", "request_line", "http.request_line"},
	fieldIP:              {"remote_addr", "client_ip", "ip", "remote_ip", "clientip", "client", "ClientHost", "ClientAddr", "client.ip", "source.ip", "network.client.ip", "request.remote_ip", "request.remote_addr"},
	fieldUser:            {"api_key", "apikey", "user", "user_id", "userId", "remote_user", "user.id", "usr.id", "user.name", "consumer", "client_id", "subject", "sub"},
	fieldStatus:          {"status", "status_code", "statusCode", "response_code", "DownstreamStatus", "http.status", "http.status_code", "response.status", "http.response.status_code"},
	fieldGatewayClass:    {"sluice_class"},
	fieldGatewayDecision: {"sluice_decision"},
}

type fieldSpec struct {
	kind fieldKind
	rank uint8 // lower is preferred when a line has several fields of a kind
}

// defaultAnonymousUsers are user field values that name no one: a caller
// logged with one of them is anonymous, keyed by address (compared
// without case). Servers and frameworks write these for "not logged in";
// taken as a user, each would make every anonymous caller one key.
var defaultAnonymousUsers = []string{"-", "guest", "anonymous", "unknown", "none", "null", "nobody"}

// parser reads log lines; one per goroutine.
type parser struct {
	anonymous [][]byte // user values that mean an anonymous caller
	fields    map[string]fieldSpec
	scratch   []byte // unescaped JSON strings of the current line
	name      []byte // dotted name of the current JSON field
	rank      [numFields]uint8
	request   []byte
	// trusted are the proxies whose X-Forwarded-For entries are believed
	// (--trusted-proxy); none: the leftmost entry is the client
	trusted []netip.Prefix
	// sluice_class and sluice_decision of the current JSON line
	gwClass, gwDecision []byte
}

// newParser returns a parser for the default JSON field names, with
// overrides: kind → names, which replace the defaults of that kind.
func newParser(overrides map[fieldKind][]string) *parser {
	p := &parser{fields: make(map[string]fieldSpec)}
	p.setAnonymous(defaultAnonymousUsers)
	for k := fieldKind(1); k < numFields; k++ {
		names := defaultFields[k]
		if o, ok := overrides[k]; ok {
			names = o
		}
		for i, n := range names {
			if _, dup := p.fields[n]; !dup {
				p.fields[n] = fieldSpec{kind: k, rank: uint8(min(i, 254))}
			}
		}
	}
	return p
}

// setAnonymous sets the user values that mean an anonymous caller.
func (p *parser) setAnonymous(users []string) {
	p.anonymous = p.anonymous[:0]
	for _, u := range users {
		p.anonymous = append(p.anonymous, []byte(u))
	}
}

// parseFieldOverrides reads KIND=NAME[,NAME...] flags, such as
// user=x_api_key or time=logged_at,ts.
func parseFieldOverrides(specs []string) (map[fieldKind][]string, error) {
	out := make(map[fieldKind][]string)
	for _, s := range specs {
		kind, names, ok := strings.Cut(s, "=")
		k := fieldNone
		for i, n := range fieldKindNames {
			if n != "" && n == kind {
				k = fieldKind(i)
			}
		}
		if !ok || k == fieldNone || names == "" {
			return nil, fmt.Errorf("--field %q: want KIND=NAME[,NAME...] with KIND one of time, method, path, request, ip, user, status", s)
		}
		out[k] = append(out[k], strings.Split(names, ",")...)
	}
	return out, nil
}

// parse reads one line (without its newline) of any supported format: a
// line that starts with '{' is JSON, anything else Common or Combined Log
// Format.
func (p *parser) parse(line []byte, e *entry) error {
	*e = entry{}
	p.scratch = p.scratch[:0]
	i := 0
	for i < len(line) && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r') {
		i++
	}
	line = line[i:]
	// a byte order mark starts a file some Windows tools write, or a
	// file concatenated after another
	line = bytes.TrimPrefix(line, []byte("\xef\xbb\xbf"))
	for len(line) > 0 && (line[len(line)-1] == '\r' || line[len(line)-1] == ' ') {
		line = line[:len(line)-1]
	}
	if len(line) == 0 {
		return errEmpty
	}
	var err error
	if line[0] == '{' {
		err = p.parseJSON(line, e)
	} else {
		err = p.parseCLF(line, e)
	}
	if err != nil {
		return err
	}
	return p.finish(e)
}

// finish checks and normalizes what a format parser found.
func (p *parser) finish(e *entry) error {
	if e.time == 0 {
		return errTime
	}
	if len(e.method) == 0 || len(e.path) == 0 {
		return errRequest
	}
	if len(e.method) > 20 {
		return errMethod
	}
	lower := false
	for _, c := range e.method {
		if c >= 'a' && c <= 'z' {
			lower = true
		} else if c < 'A' || c > 'Z' {
			return errMethod
		}
	}
	if lower {
		// ECS before 1.7 asked for http.request.method in lower case
		off := len(p.scratch)
		for _, c := range e.method {
			p.scratch = append(p.scratch, c&^0x20)
		}
		e.method = p.scratch[off:]
	}
	e.path = stripURL(e.path)
	if len(e.path) == 0 || e.path[0] != '/' {
		return errPath
	}
	if bytes.IndexByte(e.path, '%') >= 0 {
		off := len(p.scratch)
		p.scratch = appendUnreservedDecoded(p.scratch, e.path)
		e.path = p.scratch[off:]
	}
	for _, a := range p.anonymous {
		if !e.gatewayAuth && bytes.EqualFold(e.user, a) {
			e.user = nil
			break
		}
	}
	if len(p.trusted) > 0 {
		e.ip = clientAfterProxies(e.ip, p.trusted)
	} else {
		e.ip = firstAddress(e.ip)
	}
	if len(e.ip) == 1 && e.ip[0] == '-' {
		e.ip = nil
	}
	if len(e.ip) == 0 && len(e.user) == 0 {
		return errCaller
	}
	return nil
}

// appendUnreservedDecoded appends path to dst with its percent-encoded
// unreserved characters (letters, digits, - . _ ~) decoded, as the gateway
// normalizes a path before matching it (/%62log → /blog); other escapes
// stay as they are.
func appendUnreservedDecoded(dst, path []byte) []byte {
	for i := 0; i < len(path); i++ {
		if path[i] == '%' && i+2 < len(path) {
			hi, lo := unhex(path[i+1]), unhex(path[i+2])
			if hi >= 0 && lo >= 0 {
				c := byte(hi<<4 | lo)
				if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~' {
					dst = append(dst, c)
					i += 2
					continue
				}
			}
		}
		dst = append(dst, path[i])
	}
	return dst
}

func unhex(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

// clientAfterProxies is the client of an X-Forwarded-For list as the
// gateway finds it behind trusted proxies: the rightmost address that is
// not one of them (entries that name no address are passed over); the
// leftmost when all are trusted. A single address is itself.
func clientAfterProxies(ip []byte, trusted []netip.Prefix) []byte {
	if bytes.IndexByte(ip, ',') < 0 {
		return ip
	}
	rest := ip
	for len(rest) > 0 {
		var e []byte
		if i := bytes.LastIndexByte(rest, ','); i >= 0 {
			e, rest = bytes.TrimSpace(rest[i+1:]), rest[:i]
		} else {
			e, rest = bytes.TrimSpace(rest), nil
		}
		a, err := netip.ParseAddr(string(e))
		if err != nil {
			continue // unknown, -, or a name: no address
		}
		if !slices.ContainsFunc(trusted, func(p netip.Prefix) bool { return p.Contains(a.Unmap()) }) {
			return e
		}
	}
	return firstAddress(ip)
}

// firstAddress is the leftmost address of an X-Forwarded-For list
// ("203.0.113.7, 10.0.0.1"), which servers behind a proxy log in place of
// the client address: the client the first proxy saw. It is the address
// the client claims, so a client that writes the header itself picks its
// key; the gateway believes only what trusted proxies add, which
// a log does not say. Entries that name no address ("unknown", "-", as
// proxies write for a client they could not see) are passed over.
func firstAddress(ip []byte) []byte {
	if bytes.IndexByte(ip, ',') < 0 {
		return ip
	}
	rest := ip
	for len(rest) > 0 {
		var e []byte
		if i := bytes.IndexByte(rest, ','); i >= 0 {
			e, rest = bytes.TrimSpace(rest[:i]), rest[i+1:]
		} else {
			e, rest = bytes.TrimSpace(rest), nil
		}
		if len(e) > 0 && !bytes.Equal(e, []byte("-")) && !bytes.EqualFold(e, []byte("unknown")) {
			return e
		}
	}
	return nil
}

// stripURL reduces an absolute URL to its path, and drops the query and
// fragment.
func stripURL(u []byte) []byte {
	if len(u) > 0 && u[0] != '/' {
		if i := bytes.Index(u, []byte("://")); i > 0 && i < 10 {
			rest := u[i+3:]
			j := bytes.IndexByte(rest, '/')
			if j < 0 {
				return []byte{'/'}
			}
			u = rest[j:]
		}
	}
	for i, c := range u {
		if c == '?' || c == '#' {
			return u[:i]
		}
	}
	return u
}

// parseCLF reads Common Log Format and its extensions that add fields at
// the end (Combined, with referer and user agent, and the like):
//
//	host ident authuser [10/Oct/2000:13:55:36 -0700] "GET /a HTTP/1.1" 200 2326 ...
func (p *parser) parseCLF(b []byte, e *entry) error {
	i := 0
	token := func() []byte {
		j := i
		for i < len(b) && b[i] != ' ' {
			i++
		}
		t := b[j:i]
		for i < len(b) && b[i] == ' ' {
			i++
		}
		return t
	}
	// list reads a field that may be a comma-separated list with spaces
	// (an X-Forwarded-For header logged as the client address)
	list := func() []byte {
		j := i
		t := token()
		for len(t) > 0 && t[len(t)-1] == ',' && i < len(b) && b[i] != '[' {
			t = token()
		}
		return bytes.TrimRight(b[j:i], " ")
	}
	e.ip = list()
	ident := list()
	e.user = token()
	if i < len(b) && b[i] != '[' {
		// Apache's vhost_combined: "vhost:port host ident user [time] ..."
		e.ip, e.user = ident, token()
	}
	if i >= len(b) || b[i] != '[' {
		return errTime
	}
	end := bytes.IndexByte(b[i:], ']')
	if end < 0 {
		return errTruncated
	}
	t, ok := parseCLFTime(b[i+1 : i+end])
	if !ok {
		return errTime
	}
	e.time = t
	i += end + 1
	for i < len(b) && b[i] == ' ' {
		i++
	}
	if i >= len(b) || b[i] != '"' {
		return errRequest
	}
	i++
	start := i
	for ; i < len(b) && b[i] != '"'; i++ {
		if b[i] == '\\' {
			i++
		}
	}
	if i >= len(b) {
		return errTruncated
	}
	if err := splitRequest(b[start:i], e); err != nil {
		return err
	}
	i++
	for i < len(b) && b[i] == ' ' {
		i++
	}
	st := token()
	if len(st) != 3 {
		if len(st) == 0 {
			return errTruncated
		}
		return errStatus
	}
	v, ok := digits(st, 0, 3)
	if !ok {
		return errStatus
	}
	e.status = int(v)
	if class, decision, ok := sluiceCombinedFields(b[i:]); ok {
		p.applyGateway(e, class, decision)
	}
	return nil
}

// splitRequest reads "METHOD URI [PROTO]".
func splitRequest(r []byte, e *entry) error {
	sp := bytes.IndexByte(r, ' ')
	if sp <= 0 {
		return errRequest
	}
	e.method = r[:sp]
	uri := r[sp+1:]
	if sp2 := bytes.IndexByte(uri, ' '); sp2 >= 0 {
		uri = uri[:sp2]
	}
	if len(uri) == 0 {
		return errRequest
	}
	e.path = uri
	return nil
}

// parseJSON reads one JSON object, taking the fields it knows and skipping
// the rest, nested objects included (their fields are known by dotted
// names, to a depth of 4).
func (p *parser) parseJSON(b []byte, e *entry) error {
	p.rank = [numFields]uint8{}
	for k := range p.rank {
		p.rank[k] = 255
	}
	p.name = p.name[:0]
	p.request = nil
	p.gwClass, p.gwDecision = nil, nil
	i, err := p.object(b, 0, e, 0)
	if err != nil {
		return err
	}
	if p.gwClass != nil || p.gwDecision != nil {
		p.applyGateway(e, p.gwClass, p.gwDecision)
	}
	if skipSpace(b, i) != len(b) {
		return errJSON
	}
	if (len(e.method) == 0 || len(e.path) == 0) && len(p.request) > 0 {
		if err := splitRequest(p.request, e); err != nil {
			return err
		}
	}
	return nil
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// object reads the object at b[i] == '{' and returns the index after it.
func (p *parser) object(b []byte, i int, e *entry, depth int) (int, error) {
	i++
	base := len(p.name)
	first := true
	for {
		i = skipSpace(b, i)
		if i >= len(b) {
			return i, errTruncated
		}
		if b[i] == '}' {
			p.name = p.name[:base]
			return i + 1, nil
		}
		if !first {
			if b[i] != ',' {
				return i, errJSON
			}
			i = skipSpace(b, i+1)
		}
		first = false
		if i >= len(b) {
			return i, errTruncated
		}
		if b[i] != '"' {
			return i, errJSON
		}
		key, next, err := p.str(b, i)
		if err != nil {
			return next, err
		}
		i = skipSpace(b, next)
		if i >= len(b) {
			return i, errTruncated
		}
		if b[i] != ':' {
			return i, errJSON
		}
		i = skipSpace(b, i+1)
		if i >= len(b) {
			return i, errTruncated
		}
		p.name = p.name[:base]
		if base > 0 {
			p.name = append(p.name, '.')
		}
		p.name = append(p.name, key...)
		spec := p.fields[string(p.name)]
		switch c := b[i]; {
		case c == '"':
			v, next, err := p.str(b, i)
			if err != nil {
				return next, err
			}
			i = next
			if spec.kind != fieldNone {
				if err := p.set(spec, v, true, e); err != nil {
					return i, err
				}
			}
		case c == '{' && depth < 3:
			if i, err = p.object(b, i, e, depth+1); err != nil {
				return i, err
			}
		case c == '{' || c == '[':
			if i, err = skipComposite(b, i); err != nil {
				return i, err
			}
		default:
			j := i
			for i < len(b) && b[i] != ',' && b[i] != '}' && b[i] != ' ' && b[i] != ']' && b[i] != '\t' {
				i++
			}
			v := b[j:i]
			if !validScalar(v) {
				return i, errJSON
			}
			if spec.kind != fieldNone {
				if err := p.set(spec, v, false, e); err != nil {
					return i, err
				}
			}
		}
	}
}

func validScalar(v []byte) bool {
	switch string(v) {
	case "true", "false", "null":
		return true
	}
	if len(v) == 0 {
		return false
	}
	for _, c := range v {
		if !(c >= '0' && c <= '9' || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E') {
			return false
		}
	}
	return true
}

// set stores a field's value when it is the most preferred of its kind so far.
func (p *parser) set(spec fieldSpec, v []byte, isString bool, e *entry) error {
	if spec.rank >= p.rank[spec.kind] {
		return nil
	}
	if !isString && string(v) == "null" {
		return nil
	}
	switch spec.kind {
	case fieldTime:
		var t int64
		var ok bool
		if isString {
			t, ok = parseAnyTime(v)
		} else {
			t, ok = parseEpoch(v)
		}
		if !ok {
			return errTime
		}
		e.time = t
	case fieldStatus:
		n, ok := digits(v, 0, 3)
		if !ok || len(v) != 3 {
			return errStatus
		}
		e.status = int(n)
	default:
		if !isString {
			if spec.kind != fieldUser {
				return errFieldType
			}
			// numeric user ids are common
		}
		switch spec.kind {
		case fieldMethod:
			e.method = v
		case fieldPath:
			e.path = v
		case fieldRequest:
			p.request = v
		case fieldIP:
			e.ip = v
		case fieldUser:
			e.user = v
		case fieldGatewayClass:
			p.gwClass = v
		case fieldGatewayDecision:
			p.gwDecision = v
		}
	}
	p.rank[spec.kind] = spec.rank
	return nil
}

// skipComposite skips the object or array at b[i], strings aware.
func skipComposite(b []byte, i int) (int, error) {
	depth := 0
	for ; i < len(b); i++ {
		switch b[i] {
		case '"':
			for i++; i < len(b) && b[i] != '"'; i++ {
				if b[i] == '\\' {
					i++
				}
			}
			if i >= len(b) {
				return i, errTruncated
			}
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth == 0 {
				return i + 1, nil
			}
		}
	}
	return i, errTruncated
}

// str reads the string at b[i] == '"'. Without escapes it returns a slice
// of b; with them, the unescaped text in p.scratch.
func (p *parser) str(b []byte, i int) ([]byte, int, error) {
	i++
	start := i
	for ; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			return b[start:i], i + 1, nil
		case c == '\\':
			return p.unescape(b, start)
		case c < 0x20:
			return nil, i, errJSON
		}
	}
	return nil, i, errTruncated
}

func (p *parser) unescape(b []byte, start int) ([]byte, int, error) {
	out := len(p.scratch)
	for i := start; i < len(b); i++ {
		c := b[i]
		switch {
		case c == '"':
			return p.scratch[out:], i + 1, nil
		case c < 0x20:
			return nil, i, errJSON
		case c != '\\':
			p.scratch = append(p.scratch, c)
			continue
		}
		i++
		if i >= len(b) {
			return nil, i, errTruncated
		}
		switch b[i] {
		case '"', '\\', '/':
			p.scratch = append(p.scratch, b[i])
		case 'b':
			p.scratch = append(p.scratch, '\b')
		case 'f':
			p.scratch = append(p.scratch, '\f')
		case 'n':
			p.scratch = append(p.scratch, '\n')
		case 'r':
			p.scratch = append(p.scratch, '\r')
		case 't':
			p.scratch = append(p.scratch, '\t')
		case 'u':
			r, ok := hex4(b, i+1)
			if !ok {
				return nil, i, errJSON
			}
			i += 4
			if r >= 0xD800 && r < 0xDC00 && i+6 < len(b) && b[i+1] == '\\' && b[i+2] == 'u' {
				if lo, ok := hex4(b, i+3); ok && lo >= 0xDC00 && lo < 0xE000 {
					r = 0x10000 + (r-0xD800)<<10 + (lo - 0xDC00)
					i += 6
				}
			}
			p.scratch = utf8.AppendRune(p.scratch, r)
		default:
			return nil, i, errJSON
		}
	}
	return nil, len(b), errTruncated
}

func hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}
