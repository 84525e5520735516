package envoyrls

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/internal/connlimit"
)

// The listener's bounds on streams, in the order a stream meets them:
//
//   - gRPC's transport refuses a stream beyond MaxStreamsPerConnection
//     (HTTP/2 REFUSED_STREAM; Envoy, told the number in SETTINGS, opens
//     another connection instead);
//   - tap, run by the transport as it reads the stream's headers and
//     before gRPC spends a goroutine on it, refuses a stream beyond
//     MaxStreamsPerIP (RESOURCE_EXHAUSTED) or MaxInFlight (UNAVAILABLE),
//     counting a stream from its headers, so that streams that never send
//     their message count too, and starts the FirstMessageTimeout;
//   - a stream whose message has not arrived by then is cut
//     (DEADLINE_EXCEEDED), by the server's sweeper (sweeper), up to one
//     sweep interval (sweepEvery: FirstMessageTimeout/8, at most 25ms)
//     late;
//   - bound, once the message is read, refuses a call beyond
//     MaxDescriptors or MaxEntries (INVALID_ARGUMENT), and lets it wait
//     up to DomainWait for one of its domain's MaxInFlightPerDomain
//     slots (RESOURCE_EXHAUSTED after), before it reaches the store.
//
// A stream's counts are given back once, by the first of: its handler's
// return (ended), its cut, and, for a stream whose transport ends first
// (the client reset it, or the connection closed), the next sweep, or at
// once (a context.AfterFunc) where no handler of ours may run to give
// them back (slowPath). A stream costs one allocation (the stream; three
// more where its address holds nothing else, for its count) and no timer
// of its own: Envoy opens one per call.

// stream is what the guard keeps of one open stream. It is also the
// stream's context: gRPC's, whose end is the stream's end, with the
// stream as its streamKey value, which spares a context.WithValue a
// stream. It derives no cancellable context of its own: a cut ends the
// stream through gRPC (writeCut), which cancels gRPC's context.
type stream struct {
	context.Context
	s        *Server
	ip       connlimit.Held // counted in perIP, when it holds a count
	inFlight bool           // counted in inFlight (health checks are not)
	state    atomic.Int32   // waiting, arrived, cut or gone
	released atomic.Bool
	// deadline is when the stream is cut if its message has not arrived:
	// nanoseconds since epoch (monotonic).
	deadline int64
	// next links the stream in the sweeper's lists: set before the stream
	// is pushed, then by the sweeper alone.
	next *stream
	// stop stops the release at the transport's end, on the slow path
	// alone; set before the stream is pushed.
	stop func() bool
	// writer writes the stream's status, once a goroutine reads the
	// stream (gRPC's transport stream; see reading).
	writer atomic.Value // statusWriter
	// storeTime is the time the call's decisions waited on the store
	// (decide.StoreTimeKey), which bound does not count as its own.
	storeTime decide.StoreTime
}

// statusWriter is what gRPC's transport stream offers to end a stream
// with a status. A read that fails writes its own status (context
// canceled) before the handler can say why, so a cut stream is ended
// with its status first; gRPC cancels its context as it writes it.
type statusWriter interface {
	WriteStatus(*status.Status) error
}

const (
	waiting int32 = iota
	arrived       // the message was read
	cut           // no message within FirstMessageTimeout
	gone          // given back before its message was read
)

type streamKey struct{}

// slowPathWithin is how close a stream's own deadline (grpc-timeout) may
// be for it to take the slow path: gRPC ends, without running a handler,
// a stream whose deadline passed by the time tap returns.
const slowPathWithin = 10 * time.Millisecond

// tap admits a new stream, or refuses it before gRPC starts a goroutine
// for it. It runs on the connection's reader with the transport's lock
// held: nothing in it blocks.
func (s *Server) tap(ctx context.Context, info *tap.Info) (context.Context, error) {
	st := &stream{Context: ctx, s: s}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		held, _, ok := s.perIP.Hold(p.Addr)
		if !ok {
			s.opts.Rejected("streams_per_ip")
			return nil, status.Errorf(codes.ResourceExhausted, "sluice: this client address holds %d streams open, the most envoy_rls.max_streams_per_ip allows; retry when some end", s.opts.MaxStreamsPerIP)
		}
		st.ip = held
	}
	if !strings.HasPrefix(info.FullMethodName, "/grpc.health.v1.Health/") { // health checks always pass
		if s.inFlight.Add(1) > int64(s.opts.MaxInFlight) {
			s.inFlight.Add(-1)
			st.ip.Release()
			s.opts.Rejected("in_flight")
			return nil, errInFlight
		}
		st.inFlight = true
	}
	now := time.Now()
	st.deadline = int64(now.Sub(epoch) + s.opts.FirstMessageTimeout)
	if s.slowPath(ctx, info, now) {
		st.stop = context.AfterFunc(ctx, st.release)
	}
	s.sweeper.push(st)
	return st, nil
}

// slowPath says whether a stream may end with no handler of ours to give
// back its counts: a method we do not serve (gRPC answers UNIMPLEMENTED),
// or a deadline so close that gRPC may end the stream before it runs a
// handler. Such a stream is released at its transport's end, at once,
// through a context.AfterFunc (four allocations), rather than at the next
// sweep, so that a client calling them in turn is not refused for what
// it no longer holds. Any other stream has a handler, which releases it
// when it returns.
func (s *Server) slowPath(ctx context.Context, info *tap.Info, now time.Time) bool {
	if !s.served[info.FullMethodName] {
		return true
	}
	d, ok := ctx.Deadline()
	return ok && d.Sub(now) < slowPathWithin
}

// Value returns the stream for streamKey, and the values of the context
// it derives from otherwise.
func (st *stream) Value(key any) any {
	switch key {
	case streamKey{}:
		return st
	case decide.StoreTimeKey{}:
		return &st.storeTime
	}
	return st.Context.Value(key)
}

var errInFlight = status.Error(codes.Unavailable, "sluice is serving as many calls as it may at once; retry shortly")

// expire cuts the stream if its message has not arrived.
func (st *stream) expire() {
	if st.state.CompareAndSwap(waiting, cut) {
		st.s.opts.Rejected("first_message_timeout")
		if w, ok := st.writer.Load().(statusWriter); ok {
			st.writeCut(w)
		}
		st.ended()
	}
}

// writeCut ends the stream with the cut's status; gRPC cancels the
// stream's context as it does, which ends a read that waits.
func (st *stream) writeCut(w statusWriter) {
	_ = w.WriteStatus(status.Newf(codes.DeadlineExceeded, "sluice: no request message within %v of the call's headers (envoy_rls.first_message_timeout); the stream is closed", st.s.opts.FirstMessageTimeout))
}

// ended releases the stream once its handler returned or it was cut.
func (st *stream) ended() {
	if st.stop != nil {
		st.stop()
	}
	st.release()
}

// release gives back what the stream held, once.
func (st *stream) release() {
	if !st.released.CompareAndSwap(false, true) {
		return
	}
	st.state.CompareAndSwap(waiting, gone)
	if st.inFlight {
		st.s.inFlight.Add(-1)
	}
	st.ip.Release()
}

// transportEnded says whether gRPC ended the stream.
func (st *stream) transportEnded() bool {
	select {
	case <-st.Done():
		return true
	default:
		return false
	}
}

// reading is called before a handler reads the stream's message: the
// stream can now be ended with a status of sluice's.
func reading(ctx context.Context) {
	st, _ := ctx.Value(streamKey{}).(*stream)
	if st == nil || st.state.Load() == arrived {
		return
	}
	if w, ok := grpc.ServerTransportStreamFromContext(ctx).(statusWriter); ok {
		st.writer.Store(w)
		if st.state.Load() == cut { // before this handler ran; the second write of a status is a no-op
			st.writeCut(w)
		}
	}
}

// received records that the stream's message was read, when err is nil;
// a message read once the stream was cut is not served.
func received(ctx context.Context, err error) error {
	st, _ := ctx.Value(streamKey{}).(*stream)
	if st == nil || err != nil || st.state.CompareAndSwap(waiting, arrived) {
		return err
	}
	if st.state.Load() == cut {
		return errCut
	}
	return nil
}

var errCut = status.Error(codes.DeadlineExceeded, "sluice: the request message came after envoy_rls.first_message_timeout; the stream was closed")

// sweeper cuts the streams whose message has not arrived within
// FirstMessageTimeout, and releases those whose transport ended (see
// stream), with one timer for all streams where each had its own: a
// stream costs tap an atomic push, and no timer to set and stop. The
// timer runs while streams are open, every sweepEvery, so that a cut is
// at most that late.
//
// Streams are pushed onto a lock-free list (head); each sweep takes that
// list and walks it with the streams it kept, keeping those still open.
// A stream that has been released is dropped at the next sweep: the
// streams kept are those open and those released within one interval.
type sweeper struct {
	head  atomic.Pointer[stream] // pushed since the last sweep, newest first
	armed atomic.Bool            // the timer is set, or a sweep runs
	timer *time.Timer
	every func() time.Duration

	mu   sync.Mutex // one sweep at a time
	kept *stream    // open at the last sweep, under mu

	// stopping, when set (by a test), runs as a sweep that found no
	// stream open is about to stop the timer.
	stopping atomic.Pointer[func()]
}

// sweepEvery is the interval of the server's sweeps: FirstMessageTimeout/8,
// between 1ms and 25ms. A stream is kept up to one interval after its end
// (and what it holds of gRPC's stream with it: about 3 MB of heap at 20,000
// calls a second, at 100ms), and each sweep walks the streams open: 40 a
// second cost nothing next to the calls.
func (s *Server) sweepEvery() time.Duration {
	return min(max(s.opts.FirstMessageTimeout/8, time.Millisecond), 25*time.Millisecond)
}

func (w *sweeper) init(every func() time.Duration) {
	w.every = every
	w.timer = time.AfterFunc(time.Hour, w.sweep)
	w.timer.Stop()
}

// push adds st to the streams swept, and sets the timer unless it is.
func (w *sweeper) push(st *stream) {
	for {
		old := w.head.Load()
		st.next = old
		if w.head.CompareAndSwap(old, st) {
			break
		}
	}
	if !w.armed.Load() && w.armed.CompareAndSwap(false, true) {
		w.timer.Reset(w.every())
	}
}

// sweep cuts the streams past their deadline, releases those whose
// transport ended, and keeps the others; it sets the timer again while
// any is kept or pushed.
func (w *sweeper) sweep() {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := int64(time.Since(epoch))
	var keep *stream
	for _, list := range [2]*stream{w.head.Swap(nil), w.kept} {
		for st := list; st != nil; {
			next := st.next
			st.next = nil
			switch {
			case st.released.Load():
			case st.state.Load() == waiting && now >= st.deadline:
				st.expire()
			case st.transportEnded():
				st.release()
			default:
				st.next = keep
				keep = st
			}
			st = next
		}
	}
	w.kept = keep
	if keep != nil {
		w.timer.Reset(w.every())
		return
	}
	if f := w.stopping.Load(); f != nil {
		(*f)()
	}
	w.armed.Store(false)
	// A push after the Swap above saw armed set, and left the timer.
	if w.head.Load() != nil && w.armed.CompareAndSwap(false, true) {
		w.timer.Reset(w.every())
	}
}

// guarded returns sd with every method's first message read through
// reading and received, and notes its methods as served.
func (s *Server) guarded(sd *grpc.ServiceDesc) *grpc.ServiceDesc {
	out := *sd
	out.Methods = make([]grpc.MethodDesc, len(sd.Methods))
	for i, m := range sd.Methods {
		s.served["/"+sd.ServiceName+"/"+m.MethodName] = true
		h := m.Handler
		m.Handler = func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
			if st, _ := ctx.Value(streamKey{}).(*stream); st != nil {
				defer st.ended()
			}
			return h(srv, ctx, func(v any) error {
				reading(ctx)
				return received(ctx, dec(v))
			}, ic)
		}
		out.Methods[i] = m
	}
	out.Streams = make([]grpc.StreamDesc, len(sd.Streams))
	for i, d := range sd.Streams {
		s.served["/"+sd.ServiceName+"/"+d.StreamName] = true
		h := d.Handler
		d.Handler = func(srv any, ss grpc.ServerStream) error {
			if st, _ := ss.Context().Value(streamKey{}).(*stream); st != nil {
				defer st.ended()
			}
			return h(srv, &guardedStream{ServerStream: ss})
		}
		out.Streams[i] = d
	}
	return &out
}

// guardedStream reads a streaming call's messages through received.
type guardedStream struct {
	grpc.ServerStream
}

func (g *guardedStream) RecvMsg(m any) error {
	reading(g.Context())
	return received(g.Context(), g.ServerStream.RecvMsg(m))
}

// bound refuses a call, once its message is read, beyond the bounds of a
// call and of its domain; health checks always pass.
func (s *Server) bound(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	r, ok := req.(*rlsv3.RateLimitRequest)
	if !ok {
		return handler(ctx, req)
	}
	if reason, err := overCaps(r, s.opts.MaxDescriptors, s.opts.MaxEntries); err != nil {
		s.opts.Rejected(reason)
		return nil, err
	}
	name := r.GetDomain()
	dm, held := s.domains.acquire(ctx, name)
	if dm == nil {
		s.opts.Rejected("in_flight_per_domain")
		return nil, status.Errorf(codes.ResourceExhausted, "sluice is deciding as many calls of domain %q as it may at once (envoy_rls.max_in_flight_per_domain %d) and none ended within %v; retry shortly", name, s.opts.MaxInFlightPerDomain, s.opts.DomainWait)
	}
	defer s.domains.release(name, dm, held)
	if s.domains.restFactor <= 0 {
		return handler(ctx, req) // no pacing: no clock read
	}
	// The call's own time is its time less what its decisions waited on
	// the store (decide.StoreTime, which tap's stream carries): a call
	// that waits on Redis keeps no CPU busy, and is not paced for it.
	stored, _ := ctx.Value(decide.StoreTimeKey{}).(*decide.StoreTime)
	if stored == nil {
		stored = new(decide.StoreTime)
		ctx = decide.WithStoreTime(ctx, stored)
	}
	before := stored.Total()
	start := time.Now()
	resp, err := handler(ctx, req)
	own := time.Since(start) - (stored.Total() - before)
	if rest := s.domains.rest(name, dm, own); rest > 0 {
		t := time.NewTimer(rest)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
	}
	return resp, err
}

// domainSlots lets MaxInFlightPerDomain calls of each domain be decided
// at once; a call beyond waits for a slot, in order, for up to
// DomainWait. A flood of one domain thus holds its own slots and waits
// parked, taking neither the CPU nor the store from the other domains,
// and is refused when the wait would be longer than Envoy waits for an
// answer.
//
// The domains of the running configuration keep their entries for as
// long as it defines them, found without a lock (known, read again when
// source returns another configuration): a call of one takes no lock
// that calls of other domains take. Any other domain's entry is held,
// under mu, only while it has calls in flight, so that domains a client
// makes up cost nothing once their calls end.
//
// A domain alone (no other domain called within the last second) is not
// held to its slots: there is no other domain's call to keep from
// waiting behind it, and holding it to them only made its calls wait
// and be refused while the process and the store had room (their
// batches, which carry the checks in flight, stayed small). A call of
// it beyond its slots goes on without one; once another domain is
// called, its next calls take slots again, and those beyond wait.
//
// A domain beyond its share (calls of it waiting for a slot) while
// another domain was called within the last second is paced: each of its
// calls, once decided, holds its slot resting, parked, for restFactor
// times its own time (what it took less what it waited on the store), at
// most wait, before it is answered. Its slots then spend at most
// 1/(restFactor+1) of the time on the call's own work, so that a flood of
// calls that cost CPU to decide (the memory store) cannot keep
// every CPU of the process busy: a process that is always runnable waits
// its turn at the operating system's scheduler on a loaded machine, and
// the other domains' calls with it (docs/envoy.md, "A domain's flood").
type domainSlots struct {
	max        int
	wait       time.Duration
	restFactor int // 0: no pacing
	// source returns the running configuration, whose domains are
	// known; nil: none is.
	source Source
	known  atomic.Pointer[knownDomains]
	mu     sync.Mutex
	// n holds the entries of the domains that known lacks while they
	// have calls in flight, under mu.
	n map[string]*domain
	// recent holds the last two domains called, each with its last call,
	// most recent first, so that rest knows whether another domain than
	// the one paced is being called without a map of every domain; under
	// mu. A known domain's calls are recorded at most once every
	// seenEvery.
	recent [2]called
}

// knownDomains are the entries of the domains of one configuration,
// never changed once stored in domainSlots.known: a reload stores others.
type knownDomains struct {
	rls *config.EnvoyRLS // the configuration they were read from
	m   map[string]*domain
}

// called is a domain and when it was last called.
type called struct {
	name string
	at   time.Time
}

// otherDomainWithin is how recently another domain must have been called
// for a domain beyond its share to be paced: alone, a domain keeps the
// whole process.
const otherDomainWithin = time.Second

// seenEvery is how often at most the calls of a known domain are recorded
// in domainSlots.recent, under its lock: its record there is at most this
// much older than its last call.
const seenEvery = otherDomainWithin / 64

// epoch is what a domain's seenAt counts from (monotonic).
var epoch = time.Now()

type domain struct {
	slots chan struct{}
	// users counts the calls holding or waiting for a slot; rest reads it.
	users atomic.Int32
	// known: the entry is in domainSlots.known, and stays at no users;
	// changed under domainSlots.mu.
	known atomic.Bool
	// seenAt is when a call of a known domain was last recorded in
	// domainSlots.recent: nanoseconds since epoch, plus one; 0: never.
	seenAt atomic.Int64
	// The entries of the domains called at once do not share a cache
	// line (a domain's object takes 64 bytes, aligned).
	_ [40]byte
}

// acquire returns the domain's entry to release, and whether the call
// holds one of its slots (held false: the domain is alone, and the call
// goes on without one); nil when no slot came within the wait or before
// ctx ended.
func (d *domainSlots) acquire(ctx context.Context, name string) (dm *domain, held bool) {
	dm = d.enterKnown(name)
	if dm == nil {
		dm = d.enter(name)
	}
	select {
	case dm.slots <- struct{}{}:
		return dm, true
	default:
	}
	if !d.othersCalled(name) {
		return dm, false
	}
	t := time.NewTimer(d.wait)
	defer t.Stop()
	select {
	case dm.slots <- struct{}{}:
		return dm, true
	case <-t.C:
	case <-ctx.Done():
	}
	d.leave(name, dm)
	return nil, false
}

// enterKnown counts a call of name in its entry and returns it when the
// running configuration defines name; else nil. It takes no lock, but
// when the configuration changed (to learn its domains) and, once every
// seenEvery, to record the domain as called.
func (d *domainSlots) enterKnown(name string) *domain {
	if d.source == nil {
		return nil
	}
	k := d.known.Load()
	if rls, _ := d.source(); k == nil || k.rls != rls {
		k = d.learn()
	}
	dm := k.m[name]
	if dm == nil {
		return nil
	}
	dm.users.Add(1)
	if !dm.known.Load() {
		// A reload dropped name since k was read: the call is counted
		// where enter finds name now.
		d.leave(name, dm)
		return nil
	}
	now := time.Now()
	at := int64(now.Sub(epoch)) + 1
	if last := dm.seenAt.Load(); (last == 0 || at-last >= int64(seenEvery)) && dm.seenAt.CompareAndSwap(last, at) {
		d.mu.Lock()
		d.seen(name, now)
		d.mu.Unlock()
	}
	return dm
}

// enter counts a call of name, which the configuration did not define
// when enterKnown looked, in its entry, under mu.
func (d *domainSlots) enter(name string) *domain {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.seen(name, time.Now())
	dm := d.n[name]
	if dm == nil {
		if k := d.known.Load(); k != nil {
			dm = k.m[name] // a reload defined name since
		}
	}
	if dm == nil {
		dm = &domain{slots: make(chan struct{}, d.max)}
		d.n[name] = dm
	}
	dm.users.Add(1)
	return dm
}

// learn stores the entries of the domains of the configuration source
// returns, under mu, and returns them. A domain it defines keeps its
// entry (the previous configuration's, or its entry in n, where it had
// calls in flight), so that its calls in flight still hold its slots; a
// domain it no longer defines moves to n while its calls are in flight,
// there for its next calls, and leaves n with the last of them.
func (d *domainSlots) learn() *knownDomains {
	d.mu.Lock()
	defer d.mu.Unlock()
	rls, _ := d.source()
	old := d.known.Load()
	if old != nil && old.rls == rls {
		return old // learnt by another call
	}
	next := &knownDomains{rls: rls, m: make(map[string]*domain)}
	if rls != nil {
		for name := range rls.Domains() {
			var dm *domain
			if old != nil {
				dm = old.m[name]
			}
			if dm == nil {
				if dm = d.n[name]; dm != nil {
					delete(d.n, name)
				}
			}
			if dm == nil {
				dm = &domain{slots: make(chan struct{}, d.max)}
			}
			dm.known.Store(true)
			next.m[name] = dm
		}
	}
	d.known.Store(next)
	if old != nil {
		for name, dm := range old.m {
			if next.m[name] != nil {
				continue
			}
			// A call that counted itself in dm before this sees known
			// true and is counted in users here; one after sees known
			// false and goes to n (enterKnown).
			dm.known.Store(false)
			if dm.users.Load() > 0 {
				d.n[name] = dm
			}
		}
	}
	return next
}

// seen records a call of name at now, under mu.
func (d *domainSlots) seen(name string, now time.Time) {
	if d.recent[0].name != name {
		d.recent[1] = d.recent[0]
	}
	d.recent[0] = called{name, now}
}

// rest returns how long a call of name whose own time was took should
// hold its slot before it is answered: restFactor times took, at most
// wait, while
// calls of name wait for a slot and another domain was called lately;
// else 0.
func (d *domainSlots) rest(name string, dm *domain, took time.Duration) time.Duration {
	if d.restFactor <= 0 {
		return 0
	}
	if int(dm.users.Load()) <= d.max {
		return 0 // within its share: the usual case, and no lock
	}
	if !d.othersCalled(name) {
		return 0
	}
	return min(time.Duration(d.restFactor)*took, d.wait)
}

// othersCalled says whether a domain other than name was called within
// otherDomainWithin.
func (d *domainSlots) othersCalled(name string) bool {
	d.mu.Lock()
	other := d.recent[0]
	if other.name == name {
		other = d.recent[1]
	}
	d.mu.Unlock()
	return !other.at.IsZero() && time.Since(other.at) <= otherDomainWithin
}

// release gives back a call's slot (held) and uncounts it.
func (d *domainSlots) release(name string, dm *domain, held bool) {
	if held {
		<-dm.slots
	}
	d.leave(name, dm)
}

// leave uncounts a call of name from its entry dm, without a lock for a
// domain the configuration defines; the last call of a domain that known
// lacks takes its entry out of n, under mu.
func (d *domainSlots) leave(name string, dm *domain) {
	if dm.known.Load() {
		if dm.users.Add(-1) > 0 || dm.known.Load() {
			return
		}
		// Dropped by a reload since: learn moved dm to n, or will find
		// no users.
		d.mu.Lock()
		if dm.users.Load() == 0 && !dm.known.Load() && d.n[name] == dm {
			delete(d.n, name)
		}
		d.mu.Unlock()
		return
	}
	d.mu.Lock()
	if dm.users.Add(-1) == 0 && !dm.known.Load() && d.n[name] == dm {
		delete(d.n, name)
	}
	d.mu.Unlock()
}

// overCaps says whether r has more than maxDescriptors descriptors or a
// descriptor of more than maxEntries entries: the rejection's reason and
// an INVALID_ARGUMENT naming the option, or nil.
func overCaps(r *rlsv3.RateLimitRequest, maxDescriptors, maxEntries int) (reason string, err error) {
	descs := r.GetDescriptors()
	if len(descs) > maxDescriptors {
		return "descriptors", status.Errorf(codes.InvalidArgument, "%d descriptors; want at most %d (envoy_rls.max_descriptors)", len(descs), maxDescriptors)
	}
	for _, d := range descs {
		if n := len(d.GetEntries()); n > maxEntries {
			return "entries", status.Errorf(codes.InvalidArgument, "a descriptor of %d entries; want at most %d (envoy_rls.max_entries)", n, maxEntries)
		}
	}
	return "", nil
}
