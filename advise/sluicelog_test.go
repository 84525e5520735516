package advise

import "testing"

// TestSluiceAccessLogFields: the key class and decision of sluice's own
// access log (the lines of docs/http.md, in both formats) are read; a
// caller the gateway keyed as authenticated stays so even with an
// identity that reads like no one; a request it refused is marked; other
// logs' trailing fields are never taken for sluice's.
func TestSluiceAccessLogFields(t *testing.T) {
	for _, tc := range []struct {
		line          string
		user          string
		refused, auth bool
	}{
		// docs/http.md's example lines
		{`203.0.113.7 - - [03/Dec/2026:17:05:43 +0000] "GET /search HTTP/1.1" 429 61 "-" "curl/8.5.0" "search" "anonymous" "denied" "store" 0.001`, "", true, false},
		{`{"time":"2026-12-03T17:05:43.250Z","remote_addr":"203.0.113.7","user":"alice","method":"GET","path":"/search","protocol":"HTTP/1.1","status":200,"bytes":2,"duration_ms":1.250,"user_agent":"curl/8.5.0","sluice_policy":"search","sluice_class":"authenticated","sluice_decision":"allowed","sluice_decided_by":"store"}`, "alice", false, true},
		// an identity named guest that the gateway verified
		{`203.0.113.7 - guest [03/Dec/2026:17:05:43 +0000] "GET /search HTTP/1.1" 200 2 "-" "curl/8.5.0" "search" "authenticated" "allowed" "store" 0.001`, "guest", false, true},
		{`{"time":"2026-12-03T17:05:43Z","remote_addr":"203.0.113.7","user":"Guest","method":"GET","path":"/s","status":429,"sluice_class":"override","sluice_decision":"cache_denied"}`, "Guest", true, true},
		// what decided outside the store, and shadow mode (served)
		{`203.0.113.7 - bob [03/Dec/2026:17:05:43 +0000] "GET /s HTTP/1.1" 503 0 "-" "-" "s" "authenticated" "failed_closed" "-" 0.000`, "bob", true, true},
		{`203.0.113.7 - - [03/Dec/2026:17:05:43 +0000] "GET /s HTTP/1.1" 200 9 "-" "-" "s" "anonymous" "shadow_denied" "store" 0.002`, "", false, false},
		// no policy matched
		{`203.0.113.7 - - [03/Dec/2026:17:05:43 +0000] "GET /x HTTP/1.1" 200 9 "-" "-" "-" "-" "-" "-" 0.002`, "", false, false},
		// not sluice's: the sentinel rule applies, nothing is refused
		{`203.0.113.7 - guest [03/Dec/2026:17:05:43 +0000] "GET /s HTTP/1.1" 429 9 "-" "-"`, "", false, false},
		{`203.0.113.7 - guest [03/Dec/2026:17:05:43 +0000] "GET /s HTTP/1.1" 429 9 "-" "-" "a" "b" "denied" "d" 0.1`, "", false, false},
		{`203.0.113.7 - guest [03/Dec/2026:17:05:43 +0000] "GET /s HTTP/1.1" 429 9 "-" "-" "s" "anonymous" "denied" "store" 0.1 extra`, "", false, false},
		{`{"time":"2026-12-03T17:05:43Z","remote_addr":"203.0.113.7","user":"guest","method":"GET","path":"/s","status":429}`, "", false, false},
	} {
		p := newParser(nil)
		var e entry
		if err := p.parse([]byte(tc.line), &e); err != nil {
			t.Errorf("%s: %v", tc.line, err)
			continue
		}
		if string(e.user) != tc.user || e.refused != tc.refused || e.gatewayAuth != tc.auth {
			t.Errorf("%s:\n user %q refused %v keyed by identity %v; want %q %v %v", tc.line, e.user, e.refused, e.gatewayAuth, tc.user, tc.refused, tc.auth)
		}
	}
}
