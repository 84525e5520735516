package httplimit

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/decide"
)

// Key says what a policy's buckets are keyed by, in place of the identity
// rules: decide.Key, which documents the keying.
type Key = decide.Key

// KeyPart is one attribute of a Key; exactly one field is set.
type KeyPart = decide.KeyPart

// PatternWildcard finds the wildcard {name} (or {name...}) in a ServeMux
// pattern: decide.PatternWildcard.
func PatternWildcard(pattern, name string) (seg int, multi bool, err error) {
	return decide.PatternWildcard(pattern, name)
}

// readValues reads the attributes of a policy's key parts from r, whose
// pattern matched the escaped path, into s.Values: what the decision core
// keys by. A header sent on several lines is keyed by its values joined
// with ", ", as a proxy would join them; an absent attribute stays empty.
func readValues(s *decide.Subject, parts []decide.Part, r *http.Request, path string) {
	for i := range parts {
		kp := &parts[i]
		switch kp.Kind {
		case decide.PartHeader:
			switch vs := r.Header[kp.Name]; len(vs) {
			case 0:
			case 1:
				s.Values[i] = vs[0]
			default:
				s.Values[i] = strings.Join(vs, ", ")
			}
		case decide.PartPath:
			s.Values[i] = pathValue(path, kp.Seg, kp.Multi)
		case decide.PartClaim:
			if s.Authenticated {
				s.Values[i] = claimValue(s.Claims[kp.Name])
			}
		}
	}
}

// pathValue is the segment seg of the escaped path (and, when multi, the
// rest of it), unescaped as Request.PathValue has it.
func pathValue(path string, seg int, multi bool) string {
	path = strings.TrimPrefix(path, "/")
	for range seg {
		i := strings.IndexByte(path, '/')
		if i < 0 {
			return ""
		}
		path = path[i+1:]
	}
	if !multi {
		if i := strings.IndexByte(path, '/'); i >= 0 {
			path = path[:i]
		}
	}
	if strings.IndexByte(path, '%') < 0 {
		return path
	}
	b := make([]byte, 0, len(path))
	for i := 0; i < len(path); i++ {
		c := path[i]
		if c == '%' && i+2 < len(path) && isHex(path[i+1]) && isHex(path[i+2]) {
			b = append(b, unhex(path[i+1])<<4|unhex(path[i+2]))
			i += 2
			continue
		}
		b = append(b, c)
	}
	return string(b)
}

// claimValue is a claim that is a string, a number or a boolean; anything
// else (a list, an object) is absent, so that no element can be picked
// over another.
func claimValue(c any) string {
	switch c := c.(type) {
	case string:
		return c
	case json.Number:
		return string(c)
	case float64:
		return strconv.FormatFloat(c, 'f', -1, 64)
	case int64:
		return strconv.FormatInt(c, 10)
	case int:
		return strconv.Itoa(c)
	case bool:
		return strconv.FormatBool(c)
	}
	return ""
}
