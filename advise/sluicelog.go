package advise

import "bytes"

// sluice's own access log (internal/gateway/accesslog.go) carries what the
// gateway decided: in the combined format, six fields after the status
// and size ("referer" "agent" "policy" "class" "decision" "decided_by"
// and the duration), in JSON sluice_class and sluice_decision. The
// advisor reads two of them:
//
//   - the key class: a caller the gateway keyed as authenticated (or by
//     an override) is authenticated whatever its identity, even one that
//     reads like "guest"; one it keyed as anonymous is keyed by address;
//   - the decision: a request the gateway refused (denied, cache_denied,
//     local_denied, failed_closed) is no traffic the service served. It
//     counts toward its caller's denied share (keys.go), and nothing
//     else: not the distributions, the proposal, nor the replay.

// statusRefused marks, in a record's status, a request sluice refused.
const statusRefused = 1 << 15

// refusedDecisions are the decisions of sluice's access log that refused
// the request.
var refusedDecisions = [...]string{"denied", "cache_denied", "local_denied", "failed_closed"}

// gatewayClasses are the key classes sluice's access log writes.
var gatewayClasses = [...]string{"anonymous", "authenticated", "override"}

// sluiceCombinedFields reads the fields sluice's combined access log
// writes after the status: the size, then six quoted fields and the
// duration. It returns the key class and the decision ("-" when empty),
// or ok false when rest is not in that shape (any other log's trailing
// fields), so that nothing is read from a line sluice did not write.
func sluiceCombinedFields(rest []byte) (class, decision []byte, ok bool) {
	i := 0
	for i < len(rest) && rest[i] >= '0' && rest[i] <= '9' || i < len(rest) && i == 0 && rest[i] == '-' {
		i++
	}
	if i == 0 {
		return nil, nil, false
	}
	var q [6][]byte
	for n := range q {
		if i+1 >= len(rest) || rest[i] != ' ' || rest[i+1] != '"' {
			return nil, nil, false
		}
		i += 2
		start := i
		for i < len(rest) && rest[i] != '"' {
			if rest[i] == '\\' {
				i++
			}
			i++
		}
		if i >= len(rest) {
			return nil, nil, false
		}
		q[n] = rest[start:i]
		i++
	}
	// the duration in seconds: digits, a dot, three digits
	if i >= len(rest) || rest[i] != ' ' || bytes.IndexByte(rest[i+1:], ' ') >= 0 || bytes.IndexByte(rest[i+1:], '.') < 1 {
		return nil, nil, false
	}
	if !oneOf(q[3], gatewayClasses[:]) && string(q[3]) != "-" {
		return nil, nil, false
	}
	return q[3], q[4], true
}

// applyGateway applies what sluice's access log says of the caller and
// the decision to e.
func (p *parser) applyGateway(e *entry, class, decision []byte) {
	switch {
	case string(class) == "anonymous":
		e.user = nil
		e.gatewayAuth = false
	case len(e.user) > 0 && (string(class) == "authenticated" || string(class) == "override"):
		e.gatewayAuth = true
	}
	e.refused = oneOf(decision, refusedDecisions[:])
}

func oneOf(v []byte, set []string) bool {
	for _, s := range set {
		if string(v) == s {
			return true
		}
	}
	return false
}
