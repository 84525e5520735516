package loggen

import (
	"bytes"
	"io"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestDeterministic(t *testing.T) {
	var a, b bytes.Buffer
	if _, err := New(Options{Seed: 7, Format: Mixed}).Write(&a, 1<<20, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Options{Seed: 7, Format: Mixed}).Write(&b, 1<<20, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Fatal("same seed wrote different logs")
	}
	var c bytes.Buffer
	New(Options{Seed: 8, Format: Mixed}).Write(&c, 1<<20, 0)
	if bytes.Equal(a.Bytes()[:1000], c.Bytes()[:1000]) {
		t.Fatal("different seeds wrote the same log")
	}
}

func TestTimeOrderAndFormats(t *testing.T) {
	g := New(Options{Seed: 1})
	last := int64(0)
	for range 50000 {
		e := g.Next()
		if e.Time < last {
			t.Fatalf("time went back: %d after %d", e.Time, last)
		}
		last = e.Time
	}
	e := &Event{Time: time.Date(2026, 3, 1, 13, 5, 9, 123456000, time.UTC).UnixMicro(), Method: "GET", Path: "/x", IP: "1.2.3.4", User: "k", Status: 200, Size: 5, Agent: "a"}
	for f, want := range map[Format]string{
		CLF:      "1.2.3.4 - k [01/Mar/2026:13:05:09 +0000] \"GET /x HTTP/1.1\" 200 5\n",
		Combined: "1.2.3.4 - k [01/Mar/2026:13:05:09 +0000] \"GET /x HTTP/1.1\" 200 5 \"-\" \"a\"\n",
		JSON:     `{"time":"2026-03-01T13:05:09.123Z","remote_addr":"1.2.3.4","method":"GET","path":"/x","status":200,"bytes":5,"api_key":"k","user_agent":"a"}` + "\n",
	} {
		if got := string(AppendLine(nil, e, f)); got != want {
			t.Errorf("format %d:\n got %q\nwant %q", f, got, want)
		}
	}
	for _, sec := range []int64{0, 951782400, 1709251199, 4102444800, -86400} {
		want := time.Unix(sec, 0).UTC().Format("02/Jan/2006:15:04:05 -0700")
		if got := string(appendCLFTime(nil, sec)); got != want {
			t.Errorf("appendCLFTime(%d) = %q, want %q", sec, got, want)
		}
	}
}

func BenchmarkWrite(b *testing.B) {
	g := New(Options{Seed: 1, Format: Combined})
	b.SetBytes(1 << 20)
	for b.Loop() {
		g.Write(io.Discard, 1<<20, 0)
	}
}

// TestRealistic checks the traits the advisor's tests rely on: both kinds
// of caller, IPv6 callers, heavy-tailed per-key rates, bursts, and abusers
// far above everyone else.
func TestRealistic(t *testing.T) {
	g := New(Options{Seed: 2})
	perKey := make(map[string]int)
	perKeySecond := make(map[[2]string]int)
	var auth, anon, v6 int
	for range 2000 * 90 { // about a minute and a half, abusers on
		e := g.Next()
		k := e.User
		if k == "" {
			k = e.IP
			anon++
			if strings.Contains(e.IP, ":") {
				v6++
				k = e.IP[:strings.LastIndex(e.IP[:strings.Index(e.IP, "::")], ":")]
			}
		} else {
			auth++
		}
		perKey[k]++
		perKeySecond[[2]string{k, strconv.FormatInt(e.Time/1e6, 10)}]++
	}
	if auth == 0 || anon == 0 || v6 == 0 {
		t.Fatalf("auth %d anon %d v6 %d", auth, anon, v6)
	}
	counts := make([]int, 0, len(perKey))
	for _, c := range perKey {
		counts = append(counts, c)
	}
	slices.Sort(counts)
	median, top := counts[len(counts)/2], counts[len(counts)-1]
	if top < 100*median {
		t.Errorf("per-key totals: median %d, max %d: not heavy-tailed", median, top)
	}
	maxSecond := 0
	for _, c := range perKeySecond {
		maxSecond = max(maxSecond, c)
	}
	if maxSecond < 40 {
		t.Errorf("busiest (key, second) has %d requests: no abuser or burst", maxSecond)
	}
	t.Logf("%d keys, median %d, max %d requests; busiest second %d", len(counts), median, top, maxSecond)
}
