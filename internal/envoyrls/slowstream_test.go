package envoyrls_test

import (
	"bytes"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/testkit/stall"
)

// rawClient is a hostile HTTP/2 client on one connection: it opens
// streams with headers and never sends their message, ignores the
// server's SETTINGS_MAX_CONCURRENT_STREAMS, and records how each stream
// ends.
type rawClient struct {
	conn net.Conn
	fr   *http2.Framer
	wmu  sync.Mutex // the framer's writes

	mu   sync.Mutex
	sent map[uint32]time.Time
	ends map[uint32]streamEnd
}

// streamEnd is how a stream ended: an RST_STREAM code or a grpc-status.
type streamEnd struct {
	at      time.Time
	rst     http2.ErrCode
	grpc    string // grpc-status; "" when reset without one
	message string
}

func dialRaw(t testing.TB, addr string) *rawClient {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	rc := &rawClient{conn: c, fr: http2.NewFramer(c, c), sent: map[uint32]time.Time{}, ends: map[uint32]streamEnd{}}
	rc.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if _, err := c.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	if err := rc.fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	go rc.read()
	return rc
}

// read records the end of each stream until the connection closes.
func (rc *rawClient) read() {
	for {
		f, err := rc.fr.ReadFrame()
		if err != nil {
			return
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				rc.wmu.Lock()
				_ = rc.fr.WriteSettingsAck()
				rc.wmu.Unlock()
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				rc.wmu.Lock()
				_ = rc.fr.WritePing(true, f.Data)
				rc.wmu.Unlock()
			}
		case *http2.MetaHeadersFrame:
			if f.StreamEnded() {
				rc.end(f.StreamID, streamEnd{grpc: value(f, "grpc-status"), message: value(f, "grpc-message")})
			}
		case *http2.RSTStreamFrame:
			rc.end(f.StreamID, streamEnd{rst: f.ErrCode})
		}
	}
}

func value(f *http2.MetaHeadersFrame, name string) string {
	for _, hf := range f.Fields {
		if hf.Name == name {
			return hf.Value
		}
	}
	return ""
}

// end records the first end of a stream (trailers may be followed by a
// reset).
func (rc *rawClient) end(id uint32, e streamEnd) {
	e.at = time.Now()
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if _, done := rc.ends[id]; !done {
		rc.ends[id] = e
	}
}

// open opens n streams of ShouldRateLimit whose message never comes.
func (rc *rawClient) open(t testing.TB, n int) {
	t.Helper()
	block := callHeaders(t)
	for i := range n {
		id := uint32(2*i + 1)
		rc.mu.Lock()
		rc.sent[id] = time.Now()
		rc.mu.Unlock()
		rc.wmu.Lock()
		err := rc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block, EndHeaders: true})
		rc.wmu.Unlock()
		if err != nil {
			t.Fatalf("stream %d: %v", id, err)
		}
	}
}

// callHeaders is the HPACK block of a ShouldRateLimit call's headers.
func callHeaders(t testing.TB) []byte {
	t.Helper()
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, hf := range [][2]string{
		{":method", "POST"}, {":scheme", "http"}, {":authority", "sluice"},
		{":path", "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"},
		{"content-type", "application/grpc"}, {"te", "trailers"},
	} {
		if err := enc.WriteField(hpack.HeaderField{Name: hf[0], Value: hf[1]}); err != nil {
			t.Fatal(err)
		}
	}
	return hb.Bytes()
}

func (rc *rawClient) ended() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return len(rc.ends)
}

// total is the streams of clients that ended.
func total(clients []*rawClient) int {
	n := 0
	for _, rc := range clients {
		n += rc.ended()
	}
	return n
}

// heapAndStacks is the memory the Go runtime holds for objects and
// goroutine stacks.
func heapAndStacks() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse + m.StackInuse
}

// Issue 25, item 5: 200 connections × 200 gRPC streams that send their
// headers and never their message. On the listener's defaults a client
// address holds at most max_streams_per_ip (1024) such streams: each
// connection refuses its streams beyond max_streams_per_connection (100)
// and the address's beyond 1024 are refused as they arrive, so the
// goroutines stay within 2 × 1024 + 512 of what the connections alone
// cost (a held stream's handler, and the handler of a stream whose slot
// its cut gave back while the cut stream's handler returns),
// and the heap and stacks within 64 KiB per stream held + 64 MiB; every
// stream held is cut with DEADLINE_EXCEEDED after first_message_timeout
// (2s), not before, and within that plus twice the time the attack took
// to be read (at least 1s) plus twice the longest time this process was
// kept from running at once (a stall delays both the cut and this
// client's reading of it; on 2 CPUs loaded to a load average of 30 the
// attack took 85s to be read and the process was once kept from running
// for 13s). Before the bounds, every stream was held (40,000 goroutines,
// ~470 MB) and none was ever cut.
func TestSilentStreamsAreBoundedAndCut(t *testing.T) {
	const conns, perConn = 200, 200
	const (
		perIP   = config.DefaultRLSMaxStreamsPerIP
		timeout = config.DefaultRLSFirstMessageTimeout
	)
	s := serve(t, "", map[string]string{"flood.yaml": floodDomain})
	addr := s.g.RLSAddr().String()
	// One silent stream first, alone: its headers are read at once, so
	// its cut shows the timeout itself, which the attack's cuts, read
	// late on a busy machine, cannot (their lower bound holds whenever the
	// headers are read).
	probe := dialRaw(t, addr)
	probe.open(t, 1)
	for wait := time.Now().Add(timeout + time.Minute); probe.ended() == 0 && time.Now().Before(wait); {
		time.Sleep(5 * time.Millisecond)
	}
	probe.mu.Lock()
	e, ok := probe.ends[1]
	took := e.at.Sub(probe.sent[1])
	probe.mu.Unlock()
	probe.conn.Close()
	if !ok || e.grpc != "4" || !strings.Contains(e.message, "first_message_timeout") || took < timeout {
		t.Fatalf("a silent stream alone: ended %v (rst %v, grpc-status %q %q) %v after its headers were sent; want grpc-status 4 (first_message_timeout) after %v", ok, e.rst, e.grpc, e.message, took, timeout)
	}
	t.Logf("a silent stream alone was cut %v after its headers were sent", took.Round(time.Millisecond))
	clients := make([]*rawClient, conns)
	for i := range clients {
		clients[i] = dialRaw(t, addr)
		t.Cleanup(func() { clients[i].conn.Close() })
	}
	// Every connection is set up (the server's goroutines for it
	// started) once it answered a ping.
	for _, rc := range clients {
		rc.wmu.Lock()
		_ = rc.fr.WritePing(false, [8]byte{1})
		rc.wmu.Unlock()
	}
	runtime.GC()
	time.Sleep(100 * time.Millisecond) // let the setup settle; the bounds below do not depend on it
	baseG, baseM := runtime.NumGoroutine(), heapAndStacks()

	var peakG atomic.Int64
	var peakM atomic.Uint64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			peakG.Store(max(peakG.Load(), int64(runtime.NumGoroutine())))
			peakM.Store(max(peakM.Load(), heapAndStacks()))
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	stalls := stall.Start()
	start := time.Now()
	var wg sync.WaitGroup
	for _, rc := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rc.open(t, perConn)
		}()
	}
	wg.Wait()
	// The attack is read once every stream beyond the bounds is refused.
	refusedAll := func() bool { return total(clients) >= conns*perConn-perIP }
	deadline := time.Now().Add(time.Minute)
	for !refusedAll() && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	read := time.Since(start)
	if !refusedAll() {
		close(stop)
		<-sampled
		t.Fatalf("after %v, %d streams of %d neither refused nor ended (at most %d may be held); goroutines %d at rest, peak %d; heap and stacks %d MB at rest, peak %d MB",
			read.Round(time.Millisecond), conns*perConn-total(clients), conns*perConn, perIP, baseG, peakG.Load(), baseM>>20, peakM.Load()>>20)
	}
	deadline = time.Now().Add(timeout + max(2*read, time.Second) + 30*time.Second)
	for total(clients) < conns*perConn && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	close(stop)
	<-sampled
	// A cut is seen here when this process has run both the stream's
	// timer and the client's read of its trailers: a stall of the process
	// (a busy machine's other work) delays each by as long as it lasts.
	stalled := stalls.Stop()
	slack := max(2*read, time.Second) + 2*stalled
	t.Logf("attack read in %v; kept from running at most %v at once; goroutines %d at rest, peak %d; heap and stacks %d MB at rest, peak %d MB",
		read.Round(time.Millisecond), stalled.Round(time.Millisecond), baseG, peakG.Load(), baseM>>20, peakM.Load()>>20)

	held, refusedH2, refusedIP, other := 0, 0, 0, map[string]int{}
	var first, last time.Duration // the quickest and slowest cut, from the stream's headers sent
	for _, rc := range clients {
		rc.mu.Lock()
		for id, sent := range rc.sent {
			e, ok := rc.ends[id]
			switch {
			case !ok:
				other["never ended"]++
			case e.rst == http2.ErrCodeRefusedStream:
				refusedH2++
			case e.grpc == "8" && strings.Contains(e.message, "max_streams_per_ip"):
				refusedIP++
			case e.grpc == "4" && strings.Contains(e.message, "first_message_timeout"):
				// Ours alone: a cut cancels no context of gRPC's before
				// it registers the stream, so gRPC never ends one with its
				// own "context deadline exceeded" (the message of a cut
				// before sluice's sweeper).
				held++
				took := e.at.Sub(sent)
				if first == 0 || took < first {
					first = took
				}
				last = max(last, took)
				if took < timeout || took > timeout+slack {
					other["cut after "+took.Round(100*time.Millisecond).String()]++
				}
			default:
				other["rst "+e.rst.String()+" grpc-status "+e.grpc+" "+e.message]++
			}
		}
		rc.mu.Unlock()
	}
	t.Logf("%d streams held then cut (%v to %v after their headers were sent), %d refused by HTTP/2, %d refused per address; other: %v",
		held, first.Round(time.Millisecond), last.Round(time.Millisecond), refusedH2, refusedIP, other)
	if len(other) > 0 {
		t.Errorf("streams that were not refused nor cut after %v (+ up to %v): %v", timeout, slack, other)
	}
	if held == 0 {
		t.Errorf("no stream was held then cut: the test did not attack what it means to")
	}
	if g := peakG.Load() - int64(baseG); g > 2*perIP+512 {
		t.Errorf("goroutines rose by %d under the attack; want at most %d", g, 2*perIP+512)
	}
	if m := peakM.Load() - min(peakM.Load(), baseM); m > uint64(perIP)*64<<10+64<<20 {
		t.Errorf("heap and stacks rose by %d MB under the attack; want at most %d MB", m>>20, (uint64(perIP)*64<<10+64<<20)>>20)
	}
	if n := s.rejections(t, "first_message_timeout"); n != held+1 {
		t.Errorf("rejections first_message_timeout: %d; %d streams were cut, and the one alone", n, held)
	}
	if n := s.rejections(t, "streams_per_ip"); n != refusedIP {
		t.Errorf("rejections streams_per_ip: %d; %d streams were refused", n, refusedIP)
	}
	// Once cut, what the streams held is given back.
	settle := time.Now().Add(30 * time.Second)
	for runtime.NumGoroutine() > baseG+64 && time.Now().Before(settle) {
		time.Sleep(20 * time.Millisecond)
	}
	if g := runtime.NumGoroutine(); g > baseG+64 {
		t.Errorf("%d goroutines after every stream was cut; %d before the attack", g, baseG)
	}
}
