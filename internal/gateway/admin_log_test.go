package gateway

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/testkit/syncbuf"
)

// The memory store's overrides file is an append-only log (issue 22,
// item 5): a change appends and syncs one line, whatever the number of
// identities; the log is compacted now and then; a torn last line (a
// crash while it was written) is ignored with a warning and never costs
// an earlier change.

// openLog starts the overrides of the memory store on the file at path,
// compacting after every changes at least (0: the default), logging to
// buf.
func openLog(t testing.TB, path string, every int, buf *syncbuf.Buffer) (*overrideSync, error) {
	t.Helper()
	s := &overrideSync{backend: &memoryOverrides{path: path, log: slog.New(slog.NewTextHandler(buf, nil)), every: every},
		live: &httplimit.Overrides{}, log: slog.New(slog.NewTextHandler(buf, nil)), errors: func() {},
		zone: func() *time.Location { return time.UTC }}
	if err := s.start(); err != nil {
		return nil, err
	}
	t.Cleanup(s.close)
	return s, nil
}

func burstOf(n int64) policyOverrides {
	return policyOverrides{"payments": {{Rate: "1/h", Burst: n}}}
}

// mustSet makes a change that must succeed.
func mustSet(t testing.TB, s *overrideSync, id string, o policyOverrides) {
	t.Helper()
	if _, err := s.set(context.Background(), id, o, nil); err != nil {
		t.Fatal(err)
	}
}

// TestOverridesLogTornLine: the log cut at every byte of its last line
// (a crash while it was appended) starts with every earlier change, warns
// naming the file and the line, and is compacted: a change after it and
// another restart hold too.
func TestOverridesLogTornLine(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "overrides.json")
	s, err := openLog(t, path, 0, &syncbuf.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		mustSet(t, s, fmt.Sprintf("id-%d", i), burstOf(int64(10+i)))
	}
	mustSet(t, s, "id-1", nil)
	mustSet(t, s, "id-2", burstOf(99))
	want := s.all()
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	mustSet(t, s, "id-3", burstOf(42)) // the change a crash tears
	full, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(full, before) || bytes.Count(full[len(before):], []byte("\n")) != 1 {
		t.Fatalf("a change did not append exactly one line:\n%s\nthen\n%s", before, full)
	}
	line := strings.Count(string(before), "\n") + 1
	for cut := len(before) + 1; cut < len(full); cut++ {
		torn := filepath.Join(dir, fmt.Sprintf("torn-%d.json", cut))
		if err := os.WriteFile(torn, full[:cut], 0o600); err != nil {
			t.Fatal(err)
		}
		var logs syncbuf.Buffer
		s2, err := openLog(t, torn, 0, &logs)
		if err != nil {
			t.Fatalf("cut at byte %d of %d: %v", cut, len(full), err)
		}
		if got := s2.all(); !reflect.DeepEqual(got, want) {
			t.Fatalf("cut at byte %d: the table is %v, want %v", cut, got, want)
		}
		if !strings.Contains(logs.String(), "torn line") || !strings.Contains(logs.String(), torn) || !strings.Contains(logs.String(), fmt.Sprintf("line=%d", line)) {
			t.Fatalf("cut at byte %d: want a warning naming the file and line %d, logged:\n%s", cut, line, logs.String())
		}
		mustSet(t, s2, "after", burstOf(7))
		s2.close()
		s3, err := openLog(t, torn, 0, &syncbuf.Buffer{})
		if err != nil {
			t.Fatalf("cut at byte %d, a change, a restart: %v", cut, err)
		}
		wantAfter := maps.Clone(want)
		wantAfter["after"] = burstOf(7)
		if got := s3.all(); !reflect.DeepEqual(got, wantAfter) {
			t.Fatalf("cut at byte %d, a change, a restart: %v, want %v", cut, got, wantAfter)
		}
		s3.close()
	}
	// Uncut, the last change holds.
	s.close()
	s4, err := openLog(t, path, 0, &syncbuf.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if got := s4.all()["id-3"]; !reflect.DeepEqual(got, burstOf(42)) {
		t.Errorf("the last change after a restart: %v", got)
	}
	if rs, ok := s4.live.Rules("payments", "id-2"); !ok || rs[0].Burst != 99 {
		t.Errorf("after a restart id-2 applies %v %v, want burst 99", rs, ok)
	}
}

// TestOverridesLogCompaction: the log is compacted once the changes
// appended reach the threshold (or the number of identities), into one
// line holding the table; it never grows past that, and a restart after
// any change reads the table in force.
func TestOverridesLogCompaction(t *testing.T) {
	path := filepath.Join(t.TempDir(), "overrides.json")
	const every = 4
	s, err := openLog(t, path, every, &syncbuf.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	compactions := 0
	for i := range 40 {
		id := fmt.Sprintf("id-%d", i%7)
		o := burstOf(int64(i + 1))
		if i%5 == 4 {
			o = nil
		}
		mustSet(t, s, id, o)
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		lines := bytes.Count(data, []byte("\n"))
		if lines == 1 {
			compactions++
		}
		if limit := 1 + max(every, len(s.all())+1); lines > limit { // +1: a delete shrank the table
			t.Fatalf("after change %d the log has %d lines, above %d", i, lines, limit)
		}
		r, err := openLog(t, path, every, &syncbuf.Buffer{})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := r.all(), s.all(); !reflect.DeepEqual(got, want) {
			t.Fatalf("after change %d a restart reads %v, want %v", i, got, want)
		}
		r.close()
	}
	if compactions < 5 {
		t.Errorf("%d compactions in 40 changes at most %d lines apart, want more", compactions, every)
	}
	if matches, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".overrides.json.*")); len(matches) != 0 {
		t.Errorf("temporary files left: %v", matches)
	}
}

// TestOverridesLogBadFiles: a line that is complete but not valid is an
// error naming the file and its line; a file of the format before the log
// (version 1) is read, and rewritten as a log at the first change.
func TestOverridesLogBadFiles(t *testing.T) {
	dir := t.TempDir()
	head := `{"version":2,"overrides":{"a":{"payments":[{"rate":"1/h","burst":5}]}}}` + "\n"
	for _, c := range []struct{ name, data, want string }{
		{"bad json", head + `{"identity":"b","policies":{"payments":[{"rate":"1/h","burst":6}]}}` + "\n" + `{"identity":` + "\n" + `{"identity":"c","policies":null}` + "\n", "line 3"},
		{"unknown field", head + `{"identity":"b","policy":{}}` + "\n", "line 2"},
		{"no identity", head + `{"policies":null}` + "\n", "line 2 is not valid (no identity)"},
		{"bad rule", head + `{"identity":"b","policies":{"payments":[{"rate":"0/h","burst":6}]}}` + "\n", "line 2"},
		{"two on a line", head + `{"identity":"b","policies":null}{"identity":"c","policies":null}` + "\n", "line 2"},
		{"version", `{"version":3,"overrides":{}}` + "\n", "format version 3"},
		{"text after the table", strings.TrimSuffix(head, "\n") + ` {"identity":"b","policies":null}` + "\n", "line 1"},
	} {
		path := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "-")+".json")
		if err := os.WriteFile(path, []byte(c.data), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := openLog(t, path, 0, &syncbuf.Buffer{})
		if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error naming %s and %q", c.name, err, path, c.want)
		}
	}

	v1 := filepath.Join(dir, "v1.json")
	if err := os.WriteFile(v1, []byte("{\n  \"version\": 1,\n  \"overrides\": {\n    \"a\": {\"payments\": [{\"rate\": \"1/h\", \"burst\": 5}]}\n  }\n}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := openLog(t, v1, 0, &syncbuf.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	mustSet(t, s, "b", burstOf(6))
	data, _ := os.ReadFile(v1)
	if !strings.HasPrefix(string(data), `{"version":2,`) || strings.Count(string(data), "\n") != 1 {
		t.Errorf("a version 1 file after a change:\n%s\nwant it rewritten as a log", data)
	}
	s.close()
	s, err = openLog(t, v1, 0, &syncbuf.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if got := s.all(); len(got) != 2 || !reflect.DeepEqual(got["a"], burstOf(5)) {
		t.Errorf("a version 1 file, a change, a restart: %v", got)
	}
}

// BenchmarkOverrideChangeMemoryFile: the cost of one change of an
// identity's overrides on the memory store with admin.overrides_file,
// synced, at 10 and 10,000 identities (compactions included, amortized).
func BenchmarkOverrideChangeMemoryFile(b *testing.B) {
	for _, n := range []int{10, 10000} {
		b.Run(fmt.Sprintf("overrides=%d", n), func(b *testing.B) {
			path := filepath.Join(b.TempDir(), "overrides.json")
			table := overrideTable{}
			for i := range n {
				table[fmt.Sprintf("identity-%d", i)] = burstOf(int64(i%1000 + 1))
			}
			m := &memoryOverrides{path: path}
			if err := m.compact(table); err != nil {
				b.Fatal(err)
			}
			s, err := openLog(b, path, 0, &syncbuf.Buffer{})
			if err != nil {
				b.Fatal(err)
			}
			i := 0
			for b.Loop() {
				i++
				mustSet(b, s, fmt.Sprintf("identity-%d", i%n), burstOf(int64(i%1000+1)))
			}
		})
	}
}

// BenchmarkOverridesLogCompaction: one compaction of the log at 10,000
// identities, which happens once every 10,000 changes at that size.
func BenchmarkOverridesLogCompaction(b *testing.B) {
	table := overrideTable{}
	for i := range 10000 {
		table[fmt.Sprintf("identity-%d", i)] = burstOf(int64(i%1000 + 1))
	}
	m := &memoryOverrides{path: filepath.Join(b.TempDir(), "overrides.json")}
	for b.Loop() {
		if err := m.compact(table); err != nil {
			b.Fatal(err)
		}
	}
}

// TestAdminOverridesFileTorn: a gateway whose overrides file ends in a
// torn line (it crashed while it appended a change) starts, applies every
// change before it, and logs a warning naming the file.
func TestAdminOverridesFileTorn(t *testing.T) {
	dir := t.TempDir()
	path := writeDeployment(t, dir, "admin: {token_file: admin.token, overrides_file: overrides.json}\n"+adminPolicies)
	gw := startAdminGW(t, path)
	for _, body := range []string{`{"policies":{"payments":[{"rate":"100/h","burst":40}]}}`, `{"policies":{"payments":[{"rate":"100/h","burst":41}]}}`} {
		if code, answer := gw.call(t, "PUT", "/v1/admin/overrides/acme", body); code != 200 {
			t.Fatalf("PUT: %d %s", code, answer)
		}
	}
	gw.stop()
	file := filepath.Join(dir, "overrides.json")
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(`{"identity":"acme","policies":{"payments":[{"rate":"100/h","bu`); err != nil {
		t.Fatal(err)
	}
	f.Close()
	gw = startAdminGW(t, path)
	if got := gw.limit(t, "acme"); got != 41 {
		t.Errorf("after a torn line acme's limit is %d, want 41 from the line before it", got)
	}
	if log := gw.log.String(); !strings.Contains(log, "torn line") || !strings.Contains(log, file) {
		t.Errorf("no warning naming %s:\n%s", file, log)
	}
}
