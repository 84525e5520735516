package advise

import (
	"bytes"
	"net/http"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/loggen"
)

func mustTime(t *testing.T, s string) int64 {
	t.Helper()
	tm, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatal(err)
	}
	return tm.UnixMicro()
}

func TestParseLines(t *testing.T) {
	at := mustTime(t, "2000-10-10T20:55:36Z")
	for _, tc := range []struct {
		line                   string
		time                   int64
		method, path, ip, user string
		status                 int
	}{
		{`127.0.0.1 - frank [10/Oct/2000:13:55:36 -0700] "GET /apache_pb.gif HTTP/1.0" 200 2326`, at, "GET", "/apache_pb.gif", "127.0.0.1", "frank", 200},
		{`127.0.0.1 - - [10/Oct/2000:13:55:36 -0700] "GET /a?b=1 HTTP/1.0" 200 2326 "http://x/" "Mozilla/4.08 [en] (Win98; I ;Nav)"`, at, "GET", "/a", "127.0.0.1", "", 200},
		{`::1 - - [10/Oct/2000:20:55:36 +0000] "POST http://example.com/p/q HTTP/1.1" 404 -`, at, "POST", "/p/q", "::1", "", 404},
		{`10.1.1.1 - - [10/Oct/2000:20:55:36.250 +0000] "GET /e\"scaped HTTP/1.1" 200 1`, at + 250000, "GET", `/e\"scaped`, "10.1.1.1", "", 200},
		{`{"time":"2000-10-10T20:55:36Z","remote_addr":"1.2.3.4","method":"GET","path":"/x","status":200}`, at, "GET", "/x", "1.2.3.4", "", 200},
		{`{"ts":971211336.5,"client_ip":"1.2.3.4","request_method":"PUT","request_uri":"\/x\/y?z","status":"201","user_id":42}`, at + 500000, "PUT", "/x/y", "1.2.3.4", "42", 201},
		{`{"@timestamp":"2000-10-10T22:55:36.000+02:00","http":{"request":{"method":"GET"},"url":"https://h/a/b"},"source":{"ip":"9.9.9.9"},"user":{"id":"u1"}}`, at, "GET", "/a/b", "9.9.9.9", "u1", 0},
		{`{"time_local":"10/Oct/2000:13:55:36 -0700","request":"DELETE /r HTTP/1.1","remote_addr":"5.6.7.8","remote_user":"-","nested":[1,{"a":"]"}]}`, at, "DELETE", "/r", "5.6.7.8", "", 0},
		{`{"timestamp":971211336123,"method":"GET","path":"/ms","ip":"1.1.1.1","api_key":"k\u00e9y"}`, at + 123000, "GET", "/ms", "1.1.1.1", "kéy", 0},
	} {
		p := newParser(nil)
		var e entry
		if err := p.parse([]byte(tc.line), &e); err != nil {
			t.Errorf("%s: %v", tc.line, err)
			continue
		}
		if err := p.finish(&e); err != nil {
			t.Errorf("%s: finish: %v", tc.line, err)
		}
		if e.time != tc.time || string(e.method) != tc.method || string(e.path) != tc.path || string(e.ip) != tc.ip || string(e.user) != tc.user || e.status != tc.status {
			t.Errorf("%s:\n got %d %s %s %s %q %d\nwant %d %s %s %s %q %d", tc.line,
				e.time, e.method, e.path, e.ip, e.user, e.status, tc.time, tc.method, tc.path, tc.ip, tc.user, tc.status)
		}
	}
}

func TestParseMalformed(t *testing.T) {
	for _, line := range []string{
		`127.0.0.1 - - [10/Oct/2000:13:55:36 -0700] "GET /a HTTP/1.0`,
		`127.0.0.1 - - [10/Oct/2000:13:55:36 -0700`,
		`127.0.0.1 - - [10/Foo/2000:13:55:36 -0700] "GET /a HTTP/1.0" 200 1`,
		`127.0.0.1 - - [10/Oct/2000:13:55:36 -0700] "\x16\x03\x01" 400 0`,
		`127.0.0.1 - - [10/Oct/2000:13:55:36 -0700] "GET a HTTP/1.0" 200 1`,
		`127.0.0.1 - - [10/Oct/2000:13:55:36 -0700] "GET /a HTTP/1.0" 2x0 1`,
		`- - - [10/Oct/2000:13:55:36 -0700] "GET /a HTTP/1.0" 200 1`,
		`{"time":"2000-10-10T20:55:36Z","remote_addr":"1.2.3.4","method":"GET","path":"/x"`,
		`{"time":"2000-10-10T20:55:36Z","remote_addr":"1.2.3.4","method":"GET","path":"/x"} trailing`,
		`{"time":"yesterday","remote_addr":"1.2.3.4","method":"GET","path":"/x"}`,
		`{"remote_addr":"1.2.3.4","method":"GET","path":"/x"}`,
		`{"time":1,"method":"GET","path":"/x","remote_addr":"1.2.3.4","bad":tru}`,
		`{"time":"2000-10-10T20:55:36Z","method":"GET","path":"/x","ip":"\u12"}`,
		`garbage`,
	} {
		var e entry
		if err := newParser(nil).parse([]byte(line), &e); err == nil {
			t.Errorf("%q parsed: %+v", line, e)
		}
	}
}

func TestParseTimes(t *testing.T) {
	want := mustTime(t, "2026-01-05T13:05:09.25Z")
	for _, s := range []string{
		"2026-01-05T13:05:09.25Z", "2026-01-05 13:05:09.250", "2026-01-05T15:05:09.250+02:00",
		"2026-01-05T08:05:09.25-0500", "05/Jan/2026:13:05:09.25 +0000", "1767618309.25",
		"1767618309250", "1767618309250000", "1767618309250000000", "1.76761830925e9",
	} {
		if got, ok := parseAnyTime([]byte(s)); !ok || got != want {
			t.Errorf("parseAnyTime(%q) = %d, %v; want %d", s, got, ok, want)
		}
	}
	for y := int64(1970); y < 2100; y += 7 {
		for _, md := range [][2]int64{{1, 1}, {2, 28}, {3, 1}, {12, 31}} {
			tm := time.Date(int(y), time.Month(md[0]), int(md[1]), 0, 0, 0, 0, time.UTC)
			if got := daysFromCivil(y, md[0], md[1]) * 86400; got != tm.Unix() {
				t.Fatalf("daysFromCivil(%d-%d-%d) wrong: %d vs %d", y, md[0], md[1], got, tm.Unix())
			}
		}
	}
}

// fuzzParse checks that any input parses or fails cleanly, and that what
// parses is sane: the slices lie within the line or the scratch space.
func fuzzParse(t *testing.T, line []byte) {
	p := newParser(nil)
	var e entry
	if err := p.parse(line, &e); err != nil {
		return
	}
	if len(e.method) == 0 || len(e.path) == 0 || e.path[0] != '/' || e.time <= 0 {
		t.Fatalf("parsed %q into an invalid entry %+v", line, e)
	}
	var dst []byte
	dst = appendPattern(dst, e.method, e.path)
	if err := registerPattern(http.NewServeMux(), string(dst)); err != nil {
		t.Fatalf("pattern %q of %q: %v", dst, line, err)
	}
	appendKey(nil, &e)
}

func FuzzParseCLF(f *testing.F) {
	f.Add([]byte(`127.0.0.1 - frank [10/Oct/2000:13:55:36 -0700] "GET /apache_pb.gif HTTP/1.0" 200 2326`))
	f.Add([]byte(`1.2.3.4 - - [05/Jan/2026:00:00:00 +0000] "GET /products/1?x HTTP/1.1" 200 5 "-" "curl"`))
	f.Fuzz(func(t *testing.T, line []byte) { fuzzParse(t, line) })
}

func FuzzParseJSON(f *testing.F) {
	f.Add([]byte(`{"time":"2026-01-05T00:00:00.123Z","remote_addr":"1.2.3.4","method":"GET","path":"/x","status":200}`))
	f.Add([]byte(`{"@timestamp":"2026-01-05T00:00:00Z","http":{"request_method":"GET","request_uri":"/a/1"},"client_ip":"::1","user_id":"u"}`))
	f.Fuzz(func(t *testing.T, line []byte) { fuzzParse(t, line) })
}

func FuzzParseTime(f *testing.F) {
	f.Add([]byte("2026-01-05T00:00:00.123Z"))
	f.Add([]byte("05/Jan/2026:00:00:00 +0000"))
	f.Add([]byte("1767571200.5"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if v, ok := parseAnyTime(b); ok && v < 0 {
			t.Fatalf("%q: negative time %d", b, v)
		}
	})
}

func benchLines(b *testing.B, f loggen.Format) [][]byte {
	g := loggen.New(loggen.Options{Seed: 1, Format: f})
	var buf bytes.Buffer
	g.Write(&buf, 4<<20, 0)
	return bytes.SplitAfter(buf.Bytes(), []byte{'\n'})
}

func benchParse(b *testing.B, f loggen.Format) {
	lines := benchLines(b, f)
	var n int64
	for _, l := range lines {
		n += int64(len(l))
	}
	w := &lineWorker{p: newParser(nil), names: []string{"bench"}}
	bt := &batch{data: bytes.Join(lines, nil), firstLine: 1}
	b.SetBytes(n)
	b.ReportAllocs()
	for b.Loop() {
		w.do(bt)
	}
	if bt.malformed != 0 {
		b.Fatalf("%d malformed", bt.malformed)
	}
}

// BenchmarkParseCLF and friends measure the parsing stage of the pipeline:
// lines to records with endpoint pattern and caller key.
func BenchmarkParseCLF(b *testing.B)      { benchParse(b, loggen.CLF) }
func BenchmarkParseCombined(b *testing.B) { benchParse(b, loggen.Combined) }
func BenchmarkParseJSON(b *testing.B)     { benchParse(b, loggen.JSON) }
func BenchmarkParseJSONAlt(b *testing.B)  { benchParse(b, loggen.JSONAlt) }

// FuzzBatch runs arbitrary bytes, many lines at once, through the parsing
// stage and the counting stage: whatever the input, no crash, and every
// line is counted once, parsed or malformed.
func FuzzBatch(f *testing.F) {
	f.Add([]byte("1.2.3.4 - - [05/Jan/2026:00:00:00 +0000] \"GET /a HTTP/1.1\" 200 1\n{\"time\":1767571200,\"method\":\"GET\",\"path\":\"/b\",\"ip\":\"::1\"}\njunk\n\n"))
	f.Add([]byte("1.2.3.4 - u [05/Jan/2026:00:00:09 +0000] \"GET /a/1 HTTP/1.1\" 200 1\n1.2.3.4 - u [05/Jan/2026:00:00:00 +0000] \"GET /a/2 HTTP/1.1\" 200 1"))
	f.Fuzz(func(t *testing.T, data []byte) {
		w := &lineWorker{p: newParser(nil), names: []string{"fuzz"}}
		b := &batch{data: data, firstLine: 1, endOfFile: true}
		w.do(b)
		if int64(len(b.recs))+b.malformed != b.lines {
			t.Fatalf("%d records + %d malformed != %d lines", len(b.recs), b.malformed, b.lines)
		}
		cls := &classes{max: 3, patterns: make(map[string]int32)}
		m := newMeasurer(cls, 7*86400, defaultReorder, true)
		m.batch(b)
		sec, _ := m.result()
		var n uint64
		for i := range sec {
			n += summarize(&sec[i]).Requests
		}
		if n > uint64(len(b.recs)) {
			t.Fatalf("%d requests counted from %d records", n, len(b.recs))
		}
	})
}

func TestFieldOverrides(t *testing.T) {
	ov, err := parseFieldOverrides([]string{"user=x_consumer,tenant.id", "time=logged_at"})
	if err != nil {
		t.Fatal(err)
	}
	p := newParser(ov)
	var e entry
	line := `{"logged_at":"2026-01-05T00:00:00Z","time":"junk","method":"GET","path":"/x","ip":"1.1.1.1","api_key":"ignored","tenant":{"id":"t1"}}`
	if err := p.parse([]byte(line), &e); err != nil {
		t.Fatal(err)
	}
	if string(e.user) != "t1" || e.time != mustTime(t, "2026-01-05T00:00:00Z") {
		t.Errorf("user %q time %d", e.user, e.time)
	}
	for _, bad := range []string{"user", "color=x", "user="} {
		if _, err := parseFieldOverrides([]string{bad}); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
