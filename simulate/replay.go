package simulate

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/advise"
)

// readLog reads an access log for the replay scenario: Common or Combined
// Log Format, or JSON lines, detected per line. Only two things are taken
// from a line: its time and its client key (the CLF user when it is not
// "-", else the host; or the JSON
// "key", "client", "client_ip", "remote_addr", "ip" or "user" field).
// Lines that carry no time or key are counted and skipped. A log's times
// are often whole seconds; the requests of one second are spread evenly
// over it, since the log only says they came some time in it.
func readLog(r io.Reader) (traffic, int, error) {
	type line struct {
		at  int64
		key string
	}
	var lines []line
	bad := 0
	take := func(text string) {
		if text = strings.TrimSpace(text); text == "" {
			return
		}
		var at time.Time
		var key string
		var ok bool
		if text[0] == '{' {
			at, key, ok = parseJSONLine(text)
		} else {
			at, key, ok = parseCLFLine(text)
		}
		if !ok {
			bad++
			return
		}
		lines = append(lines, line{at.UnixMicro(), key})
	}
	br := bufio.NewReaderSize(r, 1<<20)
	long := false // within a line over 1 MiB: skipped, one malformed line, as sluice advise counts it
	for {
		chunk, err := br.ReadSlice('\n')
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			if !long {
				bad++
			}
			long = true
			continue
		case err != nil && err != io.EOF:
			return traffic{}, bad, fmt.Errorf("reading the log: %w", err)
		case !long:
			take(string(chunk))
		}
		long = false
		if err == io.EOF {
			break
		}
	}
	if len(lines) == 0 {
		return traffic{}, bad, fmt.Errorf("no line of the log has a time and a client key (%d malformed); want Common Log Format or JSON lines", bad)
	}
	slices.SortStableFunc(lines, func(a, b line) int { return cmpInt(a.at, b.at) })

	tr := traffic{name: "replay"}
	index := map[string]int32{}
	for i := 0; i < len(lines); {
		j := i // lines[i:j] share one whole second
		for j < len(lines) && lines[j].at == lines[i].at {
			j++
		}
		spread := int64(0)
		if lines[i].at%1_000_000 == 0 {
			spread = 1_000_000 / int64(j-i)
		}
		for k := i; k < j; k++ {
			id, ok := index[lines[k].key]
			if !ok {
				id = int32(len(tr.keys))
				index[lines[k].key] = id
				tr.keys = append(tr.keys, lines[k].key)
			}
			tr.events = append(tr.events, event{lines[k].at + int64(k-i)*spread, id})
		}
		i = j
	}
	tr.about = strconv.Itoa(len(tr.keys)) + " clients from the log"
	return tr, bad, nil
}

// parseCLFLine reads `host ident user [02/Jan/2006:15:04:05 -0700] "…" …`.
func parseCLFLine(s string) (time.Time, string, bool) {
	host, rest, ok := strings.Cut(s, " ")
	if !ok || host == "" {
		return time.Time{}, "", false
	}
	open := strings.IndexByte(rest, '[')
	end := strings.IndexByte(rest, ']')
	if open < 0 || end < open {
		return time.Time{}, "", false
	}
	us, ok := advise.ParseTime([]byte(rest[open+1 : end]))
	if !ok {
		return time.Time{}, "", false
	}
	at := time.UnixMicro(us)
	// The authenticated user, when there is one, is the caller's identity.
	if f := strings.Fields(rest[:open]); len(f) == 2 && f[1] != "-" {
		return at, f[1], true
	}
	return at, host, true
}

// parseJSONLine reads a JSON object's time (as sluice advise reads one:
// RFC 3339 text, or a Unix time in seconds, milliseconds, microseconds or
// nanoseconds, told apart by its magnitude) and client key.
func parseJSONLine(s string) (time.Time, string, bool) {
	var m map[string]any
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber() // the digits as written: an epoch in ns does not fit a float64
	if dec.Decode(&m) != nil {
		return time.Time{}, "", false
	}
	var at time.Time
	for _, f := range []string{"time", "timestamp", "ts", "@timestamp"} {
		var raw string
		switch v := m[f].(type) {
		case string:
			raw = v
		case json.Number:
			raw = v.String()
		}
		if us, ok := advise.ParseTime([]byte(raw)); ok {
			at = time.UnixMicro(us)
			break
		}
	}
	for _, f := range []string{"key", "client", "client_ip", "remote_addr", "ip", "user"} {
		if v, ok := m[f].(string); ok && v != "" && !at.IsZero() {
			return at, v, true
		}
	}
	return time.Time{}, "", false
}
