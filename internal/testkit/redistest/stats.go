package redistest

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// CommandStat is one command's line of INFO commandstats.
type CommandStat struct {
	Calls         int64   // times the command ran
	Usec          int64   // total CPU time spent in it, in microseconds
	UsecPerCall   float64 // Usec / Calls
	RejectedCalls int64   // refused before running (wrong arity, ACL, OOM, ...)
	FailedCalls   int64   // ran and returned an error
}

// CommandStats returns INFO commandstats keyed by lower-case command name:
// "evalsha", "eval", "get", and "client|setinfo" style names for subcommands.
// Counts include the connection setup of clients (HELLO, CLIENT SETINFO), so
// call ResetStats after connecting and before the part under test.
func (s *Server) CommandStats(t testing.TB) map[string]CommandStat {
	t.Helper()
	info, err := s.do("INFO", "commandstats")
	if err != nil {
		t.Fatalf("redistest: INFO commandstats on %s: %v", s.Addr(), err)
	}
	text, _ := info.(string)
	stats, err := parseCommandStats(text)
	if err != nil {
		t.Fatalf("redistest: INFO commandstats on %s: %v", s.Addr(), err)
	}
	return stats
}

// ResetStats clears the server's statistics (CONFIG RESETSTAT), command
// counts included.
func (s *Server) ResetStats(t testing.TB) {
	t.Helper()
	if _, err := s.do("CONFIG", "RESETSTAT"); err != nil {
		t.Fatalf("redistest: CONFIG RESETSTAT on %s: %v", s.Addr(), err)
	}
}

// parseCommandStats parses lines such as
// cmdstat_get:calls=3,usec=12,usec_per_call=4.00,rejected_calls=0,failed_calls=0.
func parseCommandStats(info string) (map[string]CommandStat, error) {
	stats := make(map[string]CommandStat)
	for line := range strings.Lines(info) {
		line = strings.TrimSpace(line)
		name, fields, ok := strings.Cut(line, ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		var st CommandStat
		for field := range strings.SplitSeq(fields, ",") {
			k, v, _ := strings.Cut(field, "=")
			var err error
			switch k {
			case "calls":
				st.Calls, err = strconv.ParseInt(v, 10, 64)
			case "usec":
				st.Usec, err = strconv.ParseInt(v, 10, 64)
			case "usec_per_call":
				st.UsecPerCall, err = strconv.ParseFloat(v, 64)
			case "rejected_calls":
				st.RejectedCalls, err = strconv.ParseInt(v, 10, 64)
			case "failed_calls":
				st.FailedCalls, err = strconv.ParseInt(v, 10, 64)
			}
			if err != nil {
				return nil, fmt.Errorf("parse %q in %q: %w", field, line, err)
			}
		}
		stats[strings.ToLower(strings.TrimPrefix(name, "cmdstat_"))] = st
	}
	return stats, nil
}
