package envoyrls

import (
	"context"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
)

// The stream guard's own tests, without gRPC: tap, reading, received and
// ended are called as gRPC's transport and our handlers call them, on a
// fake transport stream (fakeTransport) whose status write cancels the
// stream's context, as gRPC's does. The listener's own tests
// (slowstream_test.go, release_test.go) hold the same guarantees
// through real gRPC.

const (
	served   = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
	unserved = "/envoy.service.ratelimit.v3.RateLimitService/NoSuchMethod"
)

var guardPeer = &net.TCPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 5}

// guardServer is a Server for the guard alone, counting its rejections.
type guardServer struct {
	*Server
	mu       sync.Mutex
	rejected map[string]int
}

func newGuardServer(t testing.TB, timeout time.Duration, perIP, inFlight int) *guardServer {
	t.Helper()
	g := &guardServer{rejected: map[string]int{}}
	g.Server = New(nil, Options{FirstMessageTimeout: timeout, MaxStreamsPerIP: perIP, MaxInFlight: inFlight, Rejected: func(reason string) {
		g.mu.Lock()
		g.rejected[reason]++
		g.mu.Unlock()
	}})
	return g
}

func (g *guardServer) rejections(reason string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.rejected[reason]
}

// held is what the guard counts: streams in flight, and of guardPeer.
func (g *guardServer) held() (inFlight int64, perIP int) {
	return g.inFlight.Load(), g.perIP.Open(netip.MustParseAddr("10.0.0.1"))
}

// fakeTransport is gRPC's transport stream as the guard sees it: its
// WriteStatus records the status and cancels the stream's context.
type fakeTransport struct {
	grpc.ServerTransportStream
	cancel context.CancelFunc
	mu     sync.Mutex
	writes []*status.Status
}

func (f *fakeTransport) WriteStatus(st *status.Status) error {
	f.mu.Lock()
	f.writes = append(f.writes, st)
	f.mu.Unlock()
	f.cancel()
	return nil
}

func (f *fakeTransport) written() []*status.Status {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*status.Status(nil), f.writes...)
}

// open taps a stream of method as gRPC's transport does, under a context
// of its own (with deadline, when not zero): the stream's context, the
// transport stream, and the transport's end of the stream.
func (g *guardServer) open(t testing.TB, method string, deadline time.Time) (context.Context, *fakeTransport, context.CancelFunc) {
	t.Helper()
	parent, cancel := context.WithCancel(peer.NewContext(metadata.NewIncomingContext(context.Background(), nil), &peer.Peer{Addr: guardPeer}))
	if !deadline.IsZero() {
		var c2 context.CancelFunc
		parent, c2 = context.WithDeadline(parent, deadline)
		c1 := cancel
		cancel = func() { c2(); c1() }
	}
	ctx, err := g.tap(parent, &tap.Info{FullMethodName: method})
	if err != nil {
		cancel()
		t.Fatalf("tap: %v", err)
	}
	ft := &fakeTransport{cancel: cancel}
	return grpc.NewContextWithServerTransportStream(ctx, ft), ft, cancel
}

// handle is our handler's part in a stream, as guarded wraps it: the
// message read (msg nil: the read fails, as when the stream's context
// ends first), then the handler's end. It returns what received returned.
func handle(ctx context.Context, msg error) error {
	st := ctx.Value(streamKey{}).(*stream)
	defer st.ended()
	reading(ctx)
	return received(ctx, msg)
}

// waitFor waits up to a minute for cond; false if it never held.
func waitFor(cond func() bool) bool {
	for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			return false
		}
	}
	return true
}

// A stream whose message does not come is cut by the sweeper: not
// before FirstMessageTimeout, with DEADLINE_EXCEEDED written to its
// transport (whose context then ends), its counts given back and the cut
// counted once; a stream whose message came is never cut. The handler
// that reads the cut stream late gets an error, and writes the cut
// again where none was written (a no-op in gRPC).
func TestSweeperCutsSilentStream(t *testing.T) {
	const timeout = 50 * time.Millisecond
	g := newGuardServer(t, timeout, 16, 16)

	// One whose handler waits in its read (a writer is known), one whose
	// handler has not run yet, one whose message came.
	start := time.Now()
	reader, readerT, cancel1 := g.open(t, served, time.Time{})
	defer cancel1()
	reading(reader)
	late, lateT, cancel2 := g.open(t, served, time.Time{})
	defer cancel2()
	answered, answeredT, cancel3 := g.open(t, served, time.Time{})
	defer cancel3()
	if err := handle(answered, nil); err != nil {
		t.Fatalf("a stream whose message came: %v", err)
	}
	if !waitFor(func() bool { return g.rejections("first_message_timeout") >= 2 }) {
		t.Fatalf("%d streams cut after a minute; want 2 (first_message_timeout %v)", g.rejections("first_message_timeout"), timeout)
	}
	took := time.Since(start)
	if took < timeout {
		t.Errorf("cut %v after the headers; want not before first_message_timeout %v", took, timeout)
	}
	if w := readerT.written(); len(w) != 1 || w[0].Code() != codes.DeadlineExceeded {
		t.Errorf("the reading stream's transport got %v; want one DEADLINE_EXCEEDED", w)
	}
	if reader.Err() == nil {
		t.Error("the reading stream's context is not done after its cut: its read would wait on")
	}
	if err := handle(late, nil); status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("a message read after the cut: %v; want DEADLINE_EXCEEDED, not served", err)
	}
	if w := lateT.written(); len(w) != 1 || w[0].Code() != codes.DeadlineExceeded {
		t.Errorf("the late handler's transport got %v; want the cut, DEADLINE_EXCEEDED", w)
	}
	_ = handle(reader, context.Canceled) // its read ends as the context did
	if w := answeredT.written(); len(w) != 0 {
		t.Errorf("the answered stream's transport got %v from the guard; want nothing", w)
	}
	time.Sleep(4 * g.sweepEvery()) // more sweeps cut nothing more
	if n := g.rejections("first_message_timeout"); n != 2 {
		t.Errorf("first_message_timeout counted %d times; want 2", n)
	}
	if f, ip := g.held(); f != 0 || ip != 0 {
		t.Errorf("after every stream ended: %d in flight, %d held by the address; want 0, 0", f, ip)
	}
}

// A stream whose transport ends before any handler reads it (the client
// reset it; gRPC ended it, past its deadline) is given back by the next
// sweeps, long before its first message timeout would cut it, and is not
// counted as a cut.
func TestSweeperReleasesStreamsTheTransportEnded(t *testing.T) {
	g := newGuardServer(t, 10*time.Minute, 16, 16)
	_, _, cancel := g.open(t, served, time.Time{})
	if f, ip := g.held(); f != 1 || ip != 1 {
		t.Fatalf("one stream open: %d in flight, %d held by the address; want 1, 1", f, ip)
	}
	cancel()
	if !waitFor(func() bool { f, ip := g.held(); return f == 0 && ip == 0 }) {
		f, ip := g.held()
		t.Fatalf("a minute after its transport ended: %d in flight, %d held by the address; want 0, 0", f, ip)
	}
	if n := g.rejections("first_message_timeout"); n != 0 {
		t.Errorf("first_message_timeout counted %d times; want 0", n)
	}
}

// A stream that no handler of ours may read (a method we do not serve, a
// deadline too close for gRPC to run a handler) is given back at its
// transport's end, before any sweep: the sweeper's timer is stopped
// here, so only the slow path can give it back. A served stream with
// time to run takes the fast path (no AfterFunc, held until a sweep).
func TestSlowPathReleasesAtTransportEnd(t *testing.T) {
	for _, c := range []struct {
		name     string
		method   string
		deadline time.Duration
		slow     bool
	}{
		{"unserved", unserved, 0, true},
		{"close deadline", served, slowPathWithin / 2, true},
		{"served", served, 0, false},
		{"far deadline", served, time.Hour, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := newGuardServer(t, 10*time.Minute, 16, 16)
			var deadline time.Time
			if c.deadline > 0 {
				deadline = time.Now().Add(c.deadline)
			}
			ctx, _, cancel := g.open(t, c.method, deadline)
			g.sweeper.timer.Stop() // no sweep from here
			if slow := ctx.Value(streamKey{}).(*stream).stop != nil; slow != c.slow {
				t.Fatalf("slow path %v; want %v", slow, c.slow)
			}
			cancel()
			if !c.slow {
				return
			}
			if !waitFor(func() bool { f, ip := g.held(); return f == 0 && ip == 0 }) {
				t.Fatal("not given back a minute after its transport ended")
			}
		})
	}
}

// Many streams at once, each ending in one of the ways a stream ends,
// in any order with the sweeps: answered, the handler's read failing, the
// transport ending before or after a handler, an unserved method, silent
// until cut while its handler waits in its read, its message arriving
// about when the cut is due. Every count is given back exactly once (a
// count given back twice leaves the totals below zero; one never given
// back, above), and every cut is counted once and answered
// DEADLINE_EXCEEDED. Run it with -race.
func TestStreamCountsGivenBackOnce(t *testing.T) {
	const timeout = 20 * time.Millisecond
	const streams, workers = 4000, 8
	g := newGuardServer(t, timeout, streams, streams)
	type opened struct {
		st     *stream
		ft     *fakeTransport
		cancel context.CancelFunc
		read   bool // a handler read it, or waits in its read
	}
	all := make([][]opened, workers)
	var handlers sync.WaitGroup
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 1))
			for range streams / workers {
				method := served
				kind := r.IntN(7)
				if kind == 4 {
					method = unserved
				}
				ctx, ft, cancel := g.open(t, method, time.Time{})
				o := opened{st: ctx.Value(streamKey{}).(*stream), ft: ft, cancel: cancel, read: kind != 3 && kind != 4}
				all[w] = append(all[w], o)
				switch kind {
				case 0: // answered
					_ = handle(ctx, nil)
				case 1: // the read fails
					_ = handle(ctx, context.Canceled)
				case 2: // the transport ends, then the handler runs
					cancel()
					_ = handle(ctx, context.Canceled)
				case 3: // the transport ends; no handler ever runs
					cancel()
				case 4: // a method we do not serve: gRPC ends it
					cancel()
				case 5: // silent while its handler waits in its read: cut
					handlers.Add(1)
					go func() {
						defer handlers.Done()
						defer o.st.ended()
						reading(ctx)
						select {
						case <-ctx.Done():
						case <-time.After(time.Minute):
							t.Error("a silent stream's read went on a minute: no cut ended it")
						}
						_ = received(ctx, ctx.Err())
					}()
				case 6: // the message comes about when the cut is due
					after := timeout + time.Duration(r.IntN(int(2*g.sweepEvery())))
					handlers.Add(1)
					go func() {
						defer handlers.Done()
						time.Sleep(after)
						_ = handle(ctx, nil)
					}()
				}
			}
		}()
	}
	wg.Wait()
	handlers.Wait()
	if !waitFor(func() bool { f, ip := g.held(); return f <= 0 && ip <= 0 }) {
		f, ip := g.held()
		t.Fatalf("a minute after every stream ended: %d in flight, %d held by the address; want 0, 0", f, ip)
	}
	time.Sleep(4 * g.sweepEvery())
	if f, ip := g.held(); f != 0 || ip != 0 {
		t.Errorf("after every stream ended: %d in flight, %d held by the address; want 0, 0 (below: given back twice)", f, ip)
	}
	cuts, answered := 0, 0
	for _, os := range all {
		for _, o := range os {
			o.cancel()
			if !o.st.released.Load() {
				t.Errorf("a stream (state %d) was never given back", o.st.state.Load())
			}
			w := o.ft.written()
			for _, st := range w {
				if st.Code() != codes.DeadlineExceeded {
					t.Errorf("the guard wrote %v; want DEADLINE_EXCEEDED alone", st)
				}
			}
			switch o.st.state.Load() {
			case cut:
				cuts++
				if o.read && len(w) == 0 {
					t.Error("a cut stream that a handler read was not answered DEADLINE_EXCEEDED")
				}
			case arrived:
				answered++
				if len(w) > 0 {
					t.Errorf("a stream whose message came was answered %v by the guard", w)
				}
			}
		}
	}
	if n := g.rejections("first_message_timeout"); n != cuts || n == 0 {
		t.Errorf("first_message_timeout counted %d times; %d streams were cut (want as many, and some)", n, cuts)
	}
	if !waitFor(func() bool {
		g.sweeper.mu.Lock()
		defer g.sweeper.mu.Unlock()
		return g.sweeper.kept == nil && g.sweeper.head.Load() == nil && !g.sweeper.armed.Load()
	}) {
		t.Error("the sweeper still holds streams, or its timer, a minute after every stream was given back")
	}
	t.Logf("%d streams: %d answered, %d cut", streams, answered, cuts)
}

// The sweeper's timer runs only while it has streams: it stops when a
// sweep finds none open, and the next push sets it again. A stream pushed
// as a sweep stops the timer (after it took the streams pushed, before it
// says the timer is stopped: the push sees it set, and leaves it) is
// still cut.
func TestSweeperStopsAndRestarts(t *testing.T) {
	const timeout = 20 * time.Millisecond
	g := newGuardServer(t, timeout, 16, 16)
	pushed := make(chan *stream, 1)
	stopping := func() {
		ctx, err := g.tap(peer.NewContext(context.Background(), &peer.Peer{Addr: guardPeer}), &tap.Info{FullMethodName: served})
		if err != nil {
			t.Error(err)
			return
		}
		pushed <- ctx.Value(streamKey{}).(*stream)
	}
	g.sweeper.stopping.Store(&stopping)
	answered, _, cancel := g.open(t, served, time.Time{})
	defer cancel()
	_ = handle(answered, nil) // the next sweep finds no stream open
	var st *stream
	select {
	case st = <-pushed:
	case <-time.After(time.Minute):
		t.Fatal("no sweep stopped the timer within a minute")
	}
	g.sweeper.stopping.Store(nil)
	if !waitFor(func() bool { return st.state.Load() == cut }) {
		t.Fatal("a silent stream pushed as a sweep stopped the timer was not cut within a minute")
	}
}

// Health checks are never counted in flight: at max_in_flight a health
// check is still admitted, counted for its address alone, and given back
// at its end like any stream; a call beyond the bound is refused.
func TestHealthChecksNotCountedInFlight(t *testing.T) {
	g := newGuardServer(t, time.Minute, 16, 1)
	call, _, cancel1 := g.open(t, served, time.Time{})
	defer cancel1()
	health, _, cancel2 := g.open(t, "/grpc.health.v1.Health/Check", time.Time{})
	defer cancel2()
	if f, ip := g.held(); f != 1 || ip != 2 {
		t.Fatalf("a call and a health check open: %d in flight, %d held by the address; want 1, 2", f, ip)
	}
	if _, err := g.tap(peer.NewContext(context.Background(), &peer.Peer{Addr: guardPeer}), &tap.Info{FullMethodName: served}); status.Code(err) != codes.Unavailable {
		t.Errorf("a call beyond max_in_flight: %v; want UNAVAILABLE", err)
	}
	_ = handle(health, nil)
	_ = handle(call, nil)
	if f, ip := g.held(); f != 0 || ip != 0 {
		t.Errorf("after both ended: %d in flight, %d held by the address; want 0, 0", f, ip)
	}
}
