package loggen

import (
	"bytes"
	"io"
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
