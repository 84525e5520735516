// Package resilient keeps a rate limiter from taking a service down with
// its store. It wraps a sluice.Store (in practice the Redis store) and adds
// to every store call:
//
//   - A deadline. Every call to the wrapped store gets Options.Timeout
//     (50ms by default); a store that answers later is a store that failed.
//     The store must honour the context: a go-redis client needs
//     ContextTimeoutEnabled, or a ReadTimeout no longer than the deadline.
//     But a deadline that passes while the store is answering other calls
//     (it answered one within the last deadline), or that this process
//     noticed late or while its goroutines wait to run (a burst of
//     thousands of requests on a few busy cores), is load, not a failure: the call is
//     waited for a while longer, up to MaxWait. A store that gives no sign
//     of life within the deadline has failed.
//
//   - A bound on the calls in flight. At most Options.MaxInFlight calls
//     are on their way to the store at once (fewer than the Redis client's
//     connections, so no call waits for a pooled connection under its
//     deadline). Checks sent to a store that queues them (the Redis
//     stores coalescing) hold no connection while they wait, and are
//     bounded apart, by Options.MaxSent: the more of them queue while a
//     batch is on its way, the more checks the next round trip carries.
//     A check that finds them all busy waits for a slot, at most
//     QueueWait, and the deadline starts only when it has one: waiting in
//     front of the store is load, not a failure of the store. A check that
//     waited QueueWait is decided by the local bucket (as Local below) and
//     counted as busy; it never counts towards the breaker, whatever the
//     failure policy. A store error that Options.Classify calls ReasonBusy
//     (a go-redis pool timeout) is treated the same way.
//
//   - A failure policy. When the store fails (or is not called because the
//     breaker is open) the check is decided by OnError: Local (the default)
//     decides it with an in-process bucket whose rate and burst are the
//     rule's divided by Options.Instances, so that N instances on their own
//     admit about what the shared store would; every check the store
//     allows takes its tokens from the local bucket too (when it has them),
//     so the local bucket starts where this instance's traffic left it,
//     never full after a failover; Open lets it through; Closed
//     returns an error wrapping ErrUnavailable (HTTP: 503). A request's own
//     OnError (sluice.Request.OnError: a policy's on_error) overrides
//     Options.OnError for that request.
//
//   - A circuit breaker. After FailureThreshold consecutive failures (5)
//     it opens: the store is not called at all and a check costs no store
//     latency. Every ProbeInterval (1s) one check is let through as a probe;
//     if it succeeds the breaker closes, else it stays open for another
//     interval. A dead store thus costs at most one deadline per interval.
//     Consecutive failures, not a ratio, because the stores this wraps fail
//     all at once (a dead or stalled Redis), and a count needs no window.
//     Only evidence that the store fails counts: an error of a call that
//     was sent (a timeout, a broken connection, an out-of-memory or
//     read-only answer). Timeouts open it only when the store has not
//     answered anything for FailureThreshold deadlines (250ms by default):
//     a busy machine can keep a healthy Redis from running for a deadline
//     or two, and that is slowness, not an outage. Options.Scope, when set, gives every part of the
//     store (a Cluster master) a breaker of its own, so that one failing
//     master does not stop the calls to the others.
//
//   - A guard. Every check this instance admits (the store allowed it, or
//     the local bucket did) is also taken from an in-process bucket at the
//     full rule, charged only with what this instance admitted, with a deadline's refill and one token of slack
//     (its charges land later than the store's, by varying delays), and,
//     for a request that asks for a lease (sluice.Request.Lease, decided
//     by redisstore.Leased), the tokens one lease may hold ahead. One
//     instance alone never admits more than that (twice the burst for the
//     fixed window and the sliding window counter, which admit a burst on
//     each side of a window's edge), so when the guard lacks the tokens
//     the store claims, the store
//     has lost the bucket (an evicting Redis, a flush, a failover to a
//     replica that never saw it) and the check is denied: a client that
//     floods keys to get its spent bucket evicted gains nothing. N
//     instances admit at most N times the rule this way.
//
//   - A denial cache. A key that the store denied is remembered, for its
//     rule set, until its RetryAfter has passed; until then checks of at
//     least the same cost are answered here, denied with the remaining
//     RetryAfter, and a flood from one caller never reaches the store. Its
//     one approximation: tokens given back elsewhere (a refund through
//     another instance, an Adjust with a negative delta, a change made
//     directly in Redis) are seen only when the remembered retry time runs
//     out. A refund through this Store forgets the key at once. Only an
//     outright denial is remembered: a reservation (Request.MaxDelay) whose
//     wait would fit within its MaxDelay still goes to the store. When the
//     retry time runs out, one caller at a time asks the store while the
//     others are still denied, so a flood does not turn into a stampede
//     each time a token comes back. The cache answers while the breaker is
//     open too: a denial is a fact that an outage does not change.
//
// Invalid input (sluice.ErrInvalid, sluice.ErrCostExceedsBurst) is
// returned as is and never counts as a store failure.
//
// Every check reports how it was decided (a Report, through
// CheckDecision or Options.OnDecision), Prometheus metrics are registered
// on Options.Registerer, and failure-policy decisions are logged through
// log/slog at most once per LogInterval, with a count.
package resilient

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/internal/coalesce"
	"github.com/sluicehq/sluice/memstore"
)

// Errors that callers branch on.
var (
	// ErrUnavailable reports a check that the Closed failure policy
	// refused because the store could not answer. The HTTP layer answers 503.
	ErrUnavailable = errors.New("resilient: rate limit store unavailable")

	// ErrCircuitOpen is the cause reported when the store was not called
	// because the circuit breaker is open.
	ErrCircuitOpen = errors.New("resilient: circuit breaker open")

	// ErrBusy is the cause reported when a check waited Options.QueueWait
	// for a call slot and was decided by the local bucket instead: load,
	// not a failure of the store.
	ErrBusy = errors.New("resilient: rate limit store busy: every call slot stayed taken for the whole queue wait")
)

// errClosedCircuit is returned by Closed checks while the breaker is open:
// built once, so an outage costs no allocation per request.
var errClosedCircuit = fmt.Errorf("%w: %w", ErrUnavailable, ErrCircuitOpen)

// Mode is a failure policy: how a check is decided when the store fails.
// It is sluice.OnError, the module's one on_error type.
type Mode = sluice.OnError

const (
	// Local decides it with an in-process bucket at the rule's rate and
	// burst divided by Options.Instances: the default.
	Local = sluice.OnErrorLocal
	// Open lets the request through, and counts and logs it.
	Open = sluice.OnErrorOpen
	// Closed refuses it with an error wrapping ErrUnavailable.
	Closed = sluice.OnErrorClosed
)

// lastMode is the last value of Mode (sluice.OnError), which numbers its
// policies from 0: the metrics hold one counter per policy.
const lastMode = Closed

// ParseMode is sluice.ParseOnError.
func ParseMode(s string) (Mode, error) { return sluice.ParseOnError(s) }

// Source says who decided a check.
type Source uint8

const (
	// FromStore: the wrapped store answered.
	FromStore Source = iota
	// FromDenialCache: a denial remembered from the store answered.
	FromDenialCache
	// FromOpen: the store failed and the Open policy let it through.
	FromOpen
	// FromClosed: the store failed and the Closed policy refused it.
	FromClosed
	// FromLocal: the store failed, or was busy, and the in-process bucket
	// decided.
	FromLocal
)

var sourceNames = [...]string{
	FromStore: "store", FromDenialCache: "denial_cache",
	FromOpen: "open", FromClosed: "closed", FromLocal: "local",
}

// String returns a short name: store, denial_cache, open, closed, local.
func (s Source) String() string {
	if int(s) < len(sourceNames) {
		return sourceNames[s]
	}
	return fmt.Sprintf("Source(%d)", s)
}

// Report says how one check or adjustment was decided: by the store, the
// denial cache or a failure policy, and why.
type Report struct {
	Source  Source
	Key     string
	Allowed bool
	// Err is why a failure policy decided: the store's error,
	// ErrCircuitOpen, or ErrBusy. Nil when the store or the denial cache
	// answered.
	Err error
	// Reason is what Err says about the store (ReasonBusy for ErrBusy).
	Reason Reason
}

// ByFailurePolicy reports whether the store's answer did not decide: it
// failed, its breaker was open, it was busy (Reason ReasonBusy), or it had
// lost the bucket and the guard denied (ReasonForgotten).
func (d Report) ByFailurePolicy() bool { return d.Source >= FromOpen }

// Decision is the former name of Report.
//
// Deprecated: use Report; "decision" in sluice is the decision core's
// (package decide) and the gateway's decision API.
type Decision = Report

// Options configures a Store. The zero value is ready to use: decide
// locally when the store fails, 50ms deadline, 32 calls in flight with a
// queue wait of one second, breaker after 5 failures probing every second,
// a denial cache of 65,536 keys, no metrics, logs to slog.Default().
type Options struct {
	// OnError is the failure policy of a request that names none
	// (sluice.Request.OnError nil). The zero value is Local.
	OnError Mode

	// MaxInFlight bounds the calls to the wrapped store at once. Keep it
	// below the connections the store's client may open (a go-redis
	// PoolSize), so that a call never waits for a connection under its
	// deadline. Zero means 32.
	MaxInFlight int

	// MaxSent bounds, apart from MaxInFlight, the checks sent to a store
	// that queues them (coalesce.Sender: the Redis stores coalescing)
	// and not yet answered. Such a check holds no connection while it
	// waits (its batch takes one for all of its checks), and the more of
	// them wait while a batch is on its way, the more the next batch
	// carries: held to MaxInFlight, a batch carried a few checks where
	// hundreds of callers were waiting. Zero means 64 × MaxInFlight
	// (2,048 by default).
	MaxSent int

	// QueueWait bounds how long a check waits for a call slot when
	// MaxInFlight calls are in flight; then the local bucket decides it.
	// Zero means one second.
	QueueWait time.Duration

	// MaxWait bounds how long a call is waited for while the store shows
	// signs of life (see the package comment). The client's own read
	// timeout must be at least this long. Zero means 20 × Timeout.
	MaxWait time.Duration

	// Classify says what a store error means, for the breaker, the metrics
	// and the logs. Nil reads timeouts and network errors only (see
	// DefaultClassify).
	Classify func(error) Reason

	// Scope, when set, names the part of the store that holds key (say the
	// address of the Cluster master of its slot). Each part gets its own
	// breaker. The names must come from a small set: a breaker is kept per
	// name for the life of the Store. Nil: one breaker for the store.
	Scope func(key string) string

	// ScopeOf, when set, names the part of the store that a check reads,
	// in place of Scope(req.Key), for a check whose data is not under its
	// Key (a fixed window counter of sluice.Request.WindowKey, named by
	// itself); "" leaves it to Scope. The same small set of names.
	ScopeOf func(req *sluice.Request) string

	// Instances is the expected number of processes sharing the store;
	// the Local policy divides rates and bursts by it. Zero means 1.
	Instances int

	// Timeout is the deadline of every call to the wrapped store. Zero
	// means 50ms.
	Timeout time.Duration

	// FailureThreshold is the number of consecutive failures that open the
	// breaker. Zero means 5.
	FailureThreshold int

	// ProbeInterval is how long the breaker stays open before one call is
	// let through to probe the store. Zero means one second.
	ProbeInterval time.Duration

	// DenialCacheSize caps the number of denied keys remembered. Zero
	// means 65,536; negative disables the cache.
	DenialCacheSize int

	// DenialCacheBytes, when positive, caps what the remembered denials
	// cost in memory instead: each costs about 200 bytes and its key's
	// length, so the cache holds at most DenialCacheBytes / (200 + the
	// key's length) of them, however many distinct keys are denied.
	// DenialCacheSize is ignored then, unless negative (no cache).
	DenialCacheBytes int64

	// LocalMaxKeys caps the keys of the Local policy's in-process store.
	// Zero means 100,000.
	LocalMaxKeys int

	// Registerer, when set, receives the metrics:
	// sluice_store_failure_decisions_total{on_error},
	// sluice_store_busy_decisions_total,
	// sluice_store_breaker_state{state} (the worst of the breakers),
	// sluice_store_breakers_open, sluice_store_denial_cache_hits_total,
	// sluice_store_call_duration_seconds, sluice_store_queue_wait_seconds,
	// sluice_store_errors_total{reason} and
	// sluice_store_scheduling_lag_seconds.
	// A second Store on the same registry (a configuration reload) shares
	// the series of the first.
	Registerer prometheus.Registerer

	// Logger receives the rate-limited warnings; nil means slog.Default().
	Logger *slog.Logger

	// LogInterval is the least time between two log lines about failure
	// decisions; each line carries the count since the last. Zero means 10s.
	LogInterval time.Duration

	// OnDecision, when set, is called with every decision of a check
	// (not for invalid input or a caller that gave up), synchronously: it
	// must be fast and safe for concurrent use.
	OnDecision func(Report)
}

// Store is a sluice.Store that adds a deadline, a bound on the calls in
// flight, a failure policy, circuit breakers and a denial cache to another
// one. It is safe for concurrent use.
type Store struct {
	primary    sluice.Store
	sender     coalesce.Sender // primary, when it sends checks without a worker (call.go)
	mode       Mode
	instances  int64
	timeout    time.Duration
	queueWait  time.Duration
	slots      chan struct{} // one token per call in flight on a worker
	sendSlots  chan struct{} // one token per check sent to sender, unanswered
	handoff    chan *job     // to a parked worker (call.go)
	classify   func(error) Reason
	scope      func(string) string
	scopeOf    func(*sluice.Request) string
	start      time.Time // the origin of the monotonic clock
	breaker    breaker   // the one breaker, without Scope
	scoped     sync.Map  // scope name → *breaker, with Scope
	states     breakerStates
	threshold  int32
	probeEvery int64
	denials    *denialCache    // nil when disabled
	local      *memstore.Store // the local bucket, at rate and burst ÷ instances
	guard      *memstore.Store // what this instance admitted, at the full rule
	maxWait    time.Duration
	lag        *schedLag
	closeOnce  sync.Once
	closed     chan struct{} // closed by Close: ends the retirement watches
	metrics    *metrics
	log        limitedLog // failure-policy decisions
	busyLog    limitedLog // busy decisions
	guardLog   limitedLog // denials of the guard
	onDecision func(Report)
}

var _ sluice.Store = (*Store)(nil)

// errNoPrimary answers every call of a Store that New was given no store
// for: a mistake of the program, not a failure of a store, so no failure
// policy serves it (open would let everything through) and it is not
// left to a worker goroutine, where it panicked out of the caller's reach.
var errNoPrimary = fmt.Errorf("resilient: New was given a nil store to wrap: %w", sluice.ErrInvalid)

// New returns a Store in front of primary. Close it to stop the local
// store's background sweep.
func New(primary sluice.Store, opts Options) *Store {
	s := &Store{
		closed:     make(chan struct{}),
		primary:    primary,
		mode:       opts.OnError,
		instances:  int64(max(opts.Instances, 1)),
		timeout:    opts.Timeout,
		queueWait:  opts.QueueWait,
		classify:   opts.Classify,
		scope:      opts.Scope,
		scopeOf:    opts.ScopeOf,
		start:      time.Now(),
		onDecision: opts.OnDecision,
	}
	if s.timeout <= 0 {
		s.timeout = 50 * time.Millisecond
	}
	if s.queueWait <= 0 {
		s.queueWait = time.Second
	}
	s.maxWait = opts.MaxWait
	if s.maxWait < s.timeout {
		s.maxWait = 20 * s.timeout
	}
	if s.classify == nil {
		s.classify = DefaultClassify
	}
	inFlight := opts.MaxInFlight
	if inFlight <= 0 {
		inFlight = 32
	}
	s.slots = make(chan struct{}, inFlight)
	sent := opts.MaxSent
	if sent <= 0 {
		sent = 64 * inFlight
	}
	s.sendSlots = make(chan struct{}, sent)
	s.handoff = make(chan *job)
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	interval := opts.LogInterval
	if interval <= 0 {
		interval = 10 * time.Second
	}
	s.log = limitedLog{logger: logger, interval: int64(interval),
		msg: "resilient: rate limit store unavailable, the failure policy decides"}
	s.busyLog = limitedLog{logger: logger, interval: int64(interval),
		msg: "resilient: rate limit store busy: every call slot stayed taken for the queue wait, the local bucket decides"}
	s.guardLog = limitedLog{logger: logger, interval: int64(interval),
		msg: "resilient: the rate limit store allowed more than this instance alone admitted: it lost buckets (is Redis evicting keys?); the local guard denies"}
	s.metrics = newMetrics(opts.Registerer)

	threshold := opts.FailureThreshold
	if threshold <= 0 {
		threshold = 5
	}
	probe := opts.ProbeInterval
	if probe <= 0 {
		probe = time.Second
	}
	s.threshold, s.probeEvery = int32(threshold), int64(probe)
	s.breaker = s.newBreaker("")
	s.metrics.setState(StateClosed)

	switch size := opts.DenialCacheSize; {
	case size >= 0 && opts.DenialCacheBytes > 0:
		s.denials = newDenialCacheBytes(math.MaxInt32, opts.DenialCacheBytes, s.timeout)
	case size == 0:
		s.denials = newDenialCache(65536, s.timeout)
	case size > 0:
		s.denials = newDenialCache(size, s.timeout)
	}
	maxKeys := opts.LocalMaxKeys
	if maxKeys <= 0 {
		maxKeys = 100_000
	}
	s.local = memstore.New(memstore.Options{MaxKeys: maxKeys})
	s.guard = memstore.New(memstore.Options{MaxKeys: maxKeys})
	s.lag = startSchedLag(s.metrics.schedLag.Observe)
	s.sender, _ = primary.(coalesce.Sender)
	return s
}

func (s *Store) newBreaker(scope string) breaker {
	return breaker{threshold: s.threshold, interval: s.probeEvery, silence: int64(s.threshold) * int64(s.timeout),
		scope: scope, onChange: s.stateChanged}
}

// breakerOf returns the breaker of the part of the store that req reads.
// ScopeOf is given a copy: a request handed to a function value escapes,
// and the copy, made only when there is one, keeps the caller's request
// (every check's) off the heap.
func (s *Store) breakerOf(req *sluice.Request) *breaker {
	if s.scope != nil && s.scopeOf != nil {
		r := *req
		if name := s.scopeOf(&r); name != "" {
			return s.breakerNamed(name)
		}
	}
	return s.breakerFor(req.Key)
}

// breakerFor returns the breaker of the part of the store that holds key.
func (s *Store) breakerFor(key string) *breaker {
	if s.scope == nil {
		return &s.breaker
	}
	return s.breakerNamed(s.scope(key))
}

// breakerNamed returns the breaker of the part of the store named name.
func (s *Store) breakerNamed(name string) *breaker {
	if b, ok := s.scoped.Load(name); ok {
		b := b.(*breaker)
		if !b.touched.Load() {
			b.touched.Store(true)
		}
		return b
	}
	b := s.newBreaker(name)
	actual, _ := s.scoped.LoadOrStore(name, &b)
	return actual.(*breaker)
}

// Close stops the background work of the local store and of the
// scheduling-lag sampler. The Store still answers afterwards. It does not
// close the wrapped store.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.lag.close()
		close(s.closed)
	})
	_ = s.guard.Close()
	return s.local.Close()
}

// State returns the breakers' state now: the worst of them (open before
// half open before closed).
func (s *Store) State() State { return s.states.worst() }

// Check decides req: from the denial cache when it remembers a denial,
// else by the wrapped store within the deadline, else by the failure
// policy (or the local bucket when the store was busy). The error wraps
// sluice.ErrInvalid or sluice.ErrCostExceedsBurst for bad input, or
// ErrUnavailable under the Closed policy.
func (s *Store) Check(ctx context.Context, req sluice.Request) (sluice.Result, error) {
	res, _, err := s.CheckDecision(ctx, req)
	return res, err
}

// CheckDecision is Check that also says how the check was decided.
func (s *Store) CheckDecision(ctx context.Context, req sluice.Request) (sluice.Result, Report, error) {
	if err := sluice.ValidateRequest(req); err != nil {
		return sluice.Result{}, Report{Key: req.Key}, err
	}
	if s.primary == nil {
		return sluice.Result{}, Report{Key: req.Key}, errNoPrimary
	}
	now := s.clock()
	remembered := false
	if s.denials != nil {
		var res sluice.Result
		var hit bool
		if res, hit, remembered = s.denials.lookup(&req, now); hit {
			s.metrics.denialHits.Inc()
			res.DecidedBy = sluice.ByDenialCache
			return res, s.decided(Report{Source: FromDenialCache, Key: req.Key}), nil
		}
	}
	forget := func() {
		if remembered {
			s.denials.forget(req.Key, req.Rules) // the policy decides, not a lease
		}
	}
	b := s.breakerOf(&req)
	probe, ok := b.allow(now)
	if !ok {
		forget()
		return s.fallback(ctx, &req, ErrCircuitOpen, ReasonCircuitOpen)
	}
	slots := s.slots
	if s.sender != nil && s.sender.Sends(req) {
		slots = s.sendSlots
	}
	if err := s.acquire(ctx, now, slots); err != nil {
		b.abandon(probe, s.clock())
		forget()
		if err == ErrBusy {
			return s.busy(ctx, &req, err)
		}
		return sluice.Result{}, Report{Key: req.Key}, err // the caller gave up
	}
	sent := s.clock()
	res, err := s.call(ctx, b, sent, checkJob(req, slots))
	end := s.clock()
	if err != nil && !invalid(err) {
		if errors.Is(ctx.Err(), context.Canceled) {
			// The caller gave up (a client that disconnected): not the
			// store's fault, and nothing to decide. A caller's deadline
			// that passed first is a store that did not answer in time.
			b.abandon(probe, end)
			return sluice.Result{}, Report{Key: req.Key}, err
		}
		forget()
		reason := s.classify(err)
		if reason == ReasonBusy {
			b.abandon(probe, end)
			return s.busy(ctx, &req, err)
		}
		s.metrics.observeCall(end-sent, reason)
		b.failure(probe, end, reason)
		return s.fallback(ctx, &req, err, reason)
	}
	s.metrics.observeCall(end-sent, reasonNone)
	b.success(probe)
	if err != nil {
		return res, Report{Key: req.Key}, err
	}
	if res.Allowed && req.Cost > 0 {
		s.mirror(ctx, req)
		if g, ok := s.guarded(ctx, &req); !ok {
			// The store allowed what this instance alone could not have:
			// it lost the bucket (an evicting Redis, a flush, a failover
			// to a replica that never saw it). Deny, as the bucket would.
			s.metrics.guardDenials.Inc()
			s.guardLog.note(end, "local", errForgotten, ReasonForgotten)
			return g, s.decided(Report{Source: FromLocal, Key: req.Key, Err: errForgotten, Reason: ReasonForgotten}), nil
		}
	}
	if s.denials != nil {
		switch {
		case !res.Allowed:
			// From when the call was sent: the store decided after that,
			// so the real retry time is never earlier than this one.
			s.denials.remember(req, res, sent)
		case remembered:
			s.denials.allowed(req, res, end)
		}
	}
	return res, s.decided(Report{Source: FromStore, Key: req.Key, Allowed: res.Allowed}), nil
}

// acquire takes a call slot of slots (s.slots, or s.sendSlots for a check
// sent to s.sender), waiting at most the queue wait (and not past ctx's
// deadline) when every slot is taken. It returns ErrBusy when the wait
// ran out, ctx's error when the caller gave up.
func (s *Store) acquire(ctx context.Context, now int64, slots chan struct{}) error {
	select {
	case slots <- struct{}{}:
		return nil
	default:
	}
	t := getTimer(s.queueWait)
	defer putTimer(t)
	select {
	case slots <- struct{}{}:
		s.metrics.queueWait.Observe(float64(s.clock()-now) / 1e9)
		return nil
	case <-t.C:
	case <-ctx.Done():
		if errors.Is(ctx.Err(), context.Canceled) {
			return ctx.Err()
		}
	}
	s.metrics.queueWait.Observe(float64(s.clock()-now) / 1e9)
	return ErrBusy
}

// Adjust charges (delta > 0) or refunds (delta < 0) req.Key's buckets
// under req.Rules in the wrapped store, within the deadline. When the store fails: Local applies
// it to the local bucket, Open drops the adjustment and reports success,
// Closed returns an error wrapping ErrUnavailable. When the store is busy
// the local bucket takes it, whatever the policy. A refund forgets any
// remembered denial of the key for the rules. The failure policy is the
// request's OnError, else Options.OnError.
func (s *Store) Adjust(ctx context.Context, req sluice.Request, delta int64) (sluice.Result, error) {
	key, rules := req.Key, req.Rules
	if err := sluice.ValidateAdjust(key, rules); err != nil {
		return sluice.Result{}, err
	}
	if s.primary == nil {
		return sluice.Result{}, errNoPrimary
	}
	if delta < 0 && s.denials != nil {
		s.denials.forget(key, rules)
	}
	b := s.breakerFor(key)
	now := s.clock()
	probe, ok := b.allow(now)
	cause, reason := ErrCircuitOpen, ReasonCircuitOpen
	if ok {
		if err := s.acquire(ctx, now, s.slots); err != nil {
			b.abandon(probe, s.clock())
			if err != ErrBusy {
				return sluice.Result{}, err
			}
			s.metrics.busyDecisions.Inc()
			s.busyLog.note(s.clock(), "local", err, ReasonBusy)
			return s.adjustLocally(ctx, req, delta)
		}
		sent := s.clock()
		res, err := s.call(ctx, b, sent, s.adjustJob(req, delta))
		end := s.clock()
		if err == nil || invalid(err) {
			s.metrics.observeCall(end-sent, reasonNone)
			b.success(probe)
			if err == nil {
				// The local buckets take the adjustment too: a refund
				// through the store must not leave them stricter.
				var buf [sluice.MaxRules]sluice.Rule
				_, _ = s.local.Adjust(ctx, sluice.Request{Key: key, Rules: s.localRules(buf[:0], rules, 0)}, delta)
				_, _ = s.guard.Adjust(ctx, sluice.Request{Key: key, Rules: s.guardRules(buf[:0], rules, leaseAhead(&req), alignedWindows(req.Algorithm))}, delta)
			}
			return res, err
		}
		if errors.Is(ctx.Err(), context.Canceled) {
			b.abandon(probe, end)
			return sluice.Result{}, err
		}
		if reason = s.classify(err); reason == ReasonBusy {
			b.abandon(probe, end)
			s.metrics.busyDecisions.Inc()
			s.busyLog.note(end, "local", err, reason)
			return s.adjustLocally(ctx, req, delta)
		}
		s.metrics.observeCall(end-sent, reason)
		b.failure(probe, end, reason)
		cause = err
	}
	mode := s.modeFor(&req)
	s.metrics.failureDecisions[mode].Inc()
	s.log.note(s.clock(), mode.String(), cause, reason)
	switch mode {
	case Closed:
		return sluice.Result{}, unavailable(cause)
	case Local:
		return s.adjustLocally(ctx, req, delta)
	}
	return fullResult(rules, 0), nil
}

func (s *Store) adjustLocally(ctx context.Context, req sluice.Request, delta int64) (sluice.Result, error) {
	var buf [sluice.MaxRules]sluice.Rule
	res, err := s.local.Adjust(ctx, sluice.Request{Key: req.Key, Rules: s.localRules(buf[:0], req.Rules, 0)}, delta)
	res.DecidedBy = sluice.ByLocal
	return res, err
}

// fallback decides req by the failure policy after the store failed with
// cause (or was not called: ErrCircuitOpen).
func (s *Store) fallback(ctx context.Context, req *sluice.Request, cause error, reason Reason) (sluice.Result, Report, error) {
	mode := s.modeFor(req)
	s.metrics.failureDecisions[mode].Inc()
	s.log.note(s.clock(), mode.String(), cause, reason)
	switch mode {
	case Closed:
		return sluice.Result{}, s.decided(Report{Source: FromClosed, Key: req.Key, Err: cause, Reason: reason}), unavailable(cause)
	case Local:
		return s.decideLocally(ctx, req, cause, reason)
	}
	return fullResult(req.Rules, req.Cost), s.decided(Report{Source: FromOpen, Key: req.Key, Allowed: true, Err: cause, Reason: reason}), nil
}

// busy decides req by the local bucket: the store was not failing, only
// busy, so no failure policy applies and nothing is waved through.
func (s *Store) busy(ctx context.Context, req *sluice.Request, cause error) (sluice.Result, Report, error) {
	s.metrics.busyDecisions.Inc()
	s.busyLog.note(s.clock(), "local", cause, ReasonBusy)
	return s.decideLocally(ctx, req, cause, ReasonBusy)
}

// mirror takes the cost of a check the store allowed from the local
// bucket too, when it holds that many tokens, so that the local bucket,
// which decides when the store fails or is busy, starts where this
// instance's traffic left it and not full: a failover hands no caller a
// fresh bucket. It goes into debt only as far as a reservation may
// (MaxDelay), so a caller that used more than this instance's share finds
// its local bucket empty or at most MaxDelay behind, never further.
func (s *Store) mirror(ctx context.Context, req sluice.Request) {
	var buf [sluice.MaxRules]sluice.Rule
	local := sluice.Request{Key: req.Key, Cost: req.Cost, MaxDelay: req.MaxDelay, Rules: s.localRules(buf[:0], req.Rules, req.Cost)}
	_, _ = s.local.Check(ctx, local)
}

// errForgotten is the cause of a guard's denial.
var errForgotten = errors.New("resilient: the store allowed more than this instance alone admitted under the rule: it lost the bucket (eviction?)")

// guarded takes an allowed check's cost from the guard: an in-process
// bucket at the full rule (not divided by the instances), charged with
// what this instance admitted. One instance alone never admits more than
// the rule, so when the guard has not the tokens the store claims, the
// store forgot the bucket. It returns the guard's denial and false then.
func (s *Store) guarded(ctx context.Context, req *sluice.Request) (sluice.Result, bool) {
	var buf [sluice.MaxRules]sluice.Rule
	g := sluice.Request{Key: req.Key, Cost: req.Cost, MaxDelay: req.MaxDelay, Rules: s.guardRules(buf[:0], req.Rules, leaseAhead(req), alignedWindows(req.Algorithm))}
	res, err := s.guard.Check(ctx, g)
	if err != nil || res.Allowed {
		return sluice.Result{}, true
	}
	res.DecidedBy = sluice.ByLocal
	return res, false
}

// alignedWindows reports whether the guard gives alg twice the burst: the
// fixed window and the sliding window counter count in windows of
// W = B/R aligned to the epoch, at most the burst B in each, so over a
// span T at most 2B + R·T (a fixed window admits B at the end of one
// window and B again at the start of the next); at B the guard denied the
// second half of every such burst as if Redis had lost the key. The
// token and leaky buckets admit at most B + R·T, and the sliding log at
// most B in any span of W, which is within that: their guard keeps B. An
// algorithm the guard does not know gets twice the burst too.
func alignedWindows(alg string) bool {
	return !algo.Paces(alg) && alg != algo.SlidingLog
}

// leaseAhead is how many tokens of req's key a primary that leases
// (redisstore.Leased, asked by req.Lease) may admit beyond what the store
// saw: a token bucket's lease, less the check that took it. The guard
// allows for them. The token bucket is the empty algorithm or its name,
// which algo.Router sends to the same store.
func leaseAhead(req *sluice.Request) int64 {
	if req.Lease == nil || (req.Algorithm != "" && req.Algorithm != algo.TokenBucket) {
		return 0
	}
	return max(req.Lease.Tokens-1, 0)
}

// guardRules appends to buf the guard's rules: the rule with its burst
// raised by a deadline's refill and one token, and by what a leasing
// primary may hold ahead of the store. The guard charges a check
// when its answer is back, later than the store decided it, by a delay
// that differs from call to call: without the slack it would see less
// refill than the store did and deny what the store rightly allowed.
//
// windowed is a request of an algorithm that counts in aligned windows
// (alignedWindows): the guard's bucket holds twice the burst for it.
func (s *Store) guardRules(buf, rules []sluice.Rule, ahead int64, windowed bool) []sluice.Rule {
	for _, r := range rules {
		if r.Period != sluice.Rolling {
			// A calendar quota is not guarded: this clock and the store's
			// see its period begin at different instants. A bucket that
			// refills at once keeps the rules' positions.
			buf = append(buf, sluice.Rule{Rate: sluice.MaxRate, Burst: r.Burst})
			continue
		}
		slack := int64(math.Ceil(r.Rate*s.timeout.Seconds())) + 1 + min(ahead, r.Burst)
		if windowed {
			slack += r.Burst
		}
		// A burst raised by the slack may take longer than
		// sluice.MaxRefillTime to refill at the rule's rate (a rule of a
		// year's refill; twice a year's window), a rule the guard's store
		// refuses, which turned the guard off: it refills faster instead,
		// which only ever allows more.
		rate := max(r.Rate, float64(r.Burst+slack)/sluice.MaxRefillTime.Seconds())
		buf = append(buf, sluice.Rule{Rate: rate, Burst: r.Burst + slack})
	}
	return buf
}

// decideLocally decides req with the in-process bucket at the rules'
// rate and burst divided by the number of instances.
func (s *Store) decideLocally(ctx context.Context, req *sluice.Request, cause error, reason Reason) (sluice.Result, Report, error) {
	var buf [sluice.MaxRules]sluice.Rule
	local := *req
	local.Rules = s.localRules(buf[:0], req.Rules, req.Cost)
	res, err := s.local.Check(ctx, local)
	if err != nil {
		return sluice.Result{}, Report{Key: req.Key}, err
	}
	if res.Allowed && req.Cost > 0 {
		// The guard counts what this instance admits, whoever decided:
		// once the store answers again it does not hand out again what
		// the local bucket gave while it could not.
		_, _ = s.guarded(ctx, req)
	}
	res.DecidedBy = sluice.ByLocal
	return res, s.decided(Report{Source: FromLocal, Key: req.Key, Allowed: res.Allowed, Err: cause, Reason: reason}), nil
}

// errNoAnswer is the error of a call given up at its deadline.
var errNoAnswer = fmt.Errorf("resilient: the store gave no sign of life within the deadline: %w", context.DeadlineExceeded)

// answer is what a call to the wrapped store returned.
type answer struct {
	res sluice.Result
	err error
}

// modeFor returns the failure policy of req: its own OnError when it
// names a known one, else Options.OnError.
func (s *Store) modeFor(req *sluice.Request) Mode {
	if m := req.OnError; m != nil && *m <= lastMode {
		return *m
	}
	return s.mode
}

func (s *Store) decided(d Report) Report {
	if s.onDecision != nil {
		s.onDecision(d)
	}
	return d
}

// localRules appends to buf the rules of the Local policy: rate and burst
// divided by the number of instances, the burst at least 1 and at least
// cost, so that a request the global rule could pass can pass here too.
func (s *Store) localRules(buf, rules []sluice.Rule, cost int64) []sluice.Rule {
	for _, r := range rules {
		burst := max(r.Burst/s.instances, 1, cost)
		if r.Period != sluice.Rolling { // a calendar quota: its share of each period
			q, _ := sluice.NewQuota(burst, r.Period, r.Zone)
			buf = append(buf, q)
			continue
		}
		// The share refills within sluice.MaxRefillTime, as every valid
		// rule does: a rule near that bound, divided, would not.
		rate := max(r.Rate/float64(s.instances), float64(burst)/sluice.MaxRefillTime.Seconds())
		buf = append(buf, sluice.Rule{Rate: rate, Burst: burst})
	}
	return buf
}

// clock returns monotonic nanoseconds since New.
func (s *Store) clock() int64 { return int64(time.Since(s.start)) }

func (s *Store) stateChanged(b *breaker, from, to State) {
	s.metrics.setState(s.states.change(from, to))
	s.metrics.breakersOpen.Set(float64(s.states.notClosed()))
	scope := []any{}
	if b.scope != "" {
		scope = []any{"scope", b.scope}
	}
	if to == StateOpen && from == StateClosed && b.scope != "" {
		go s.retireWhenIdle(b)
	}
	switch {
	case to == StateOpen && from == StateClosed:
		s.log.logger.Warn("resilient: circuit breaker open: the rate limit store is not called until a probe succeeds",
			append(scope, "failures", b.threshold, "reason", Reason(b.reason.Load()).String(),
				"probe_interval", time.Duration(b.interval))...)
	case to == StateClosed:
		s.log.logger.Info("resilient: circuit breaker closed: the rate limit store answers again", scope...)
	}
}

// retireWhenIdle watches an open breaker of a scope (a Cluster master)
// and retires it when no check has asked for it for two probe intervals:
// after a failover no key maps to the dead master's address any more, and
// its breaker, never probed again, would report the store open for ever.
// A retired breaker is forgotten (a check that names its scope again gets
// a new, closed one) and counted as closed. The watch ends when the
// breaker closes, when it is retired, or when the Store is closed.
func (s *Store) retireWhenIdle(b *breaker) {
	tick := time.NewTicker(time.Duration(s.probeEvery))
	defer tick.Stop()
	b.touched.Store(false)
	idle := 0
	for {
		select {
		case <-s.closed:
			return
		case <-tick.C:
		}
		if b.State() == StateClosed {
			return
		}
		if b.touched.Swap(false) {
			idle = 0
			continue
		}
		if idle++; idle < 2 {
			continue
		}
		s.scoped.CompareAndDelete(b.scope, b)
		for {
			from := b.State()
			if from == StateClosed {
				return
			}
			if b.state.CompareAndSwap(int32(from), int32(StateClosed)) {
				s.metrics.setState(s.states.change(from, StateClosed))
				s.metrics.breakersOpen.Set(float64(s.states.notClosed()))
				s.log.logger.Info("resilient: circuit breaker retired: no check has asked for this part of the store for two probe intervals (a failover moved its keys)",
					"scope", b.scope)
				return
			}
		}
	}
}

// fullResult is the answer of the Open policy: allowed, as by a full bucket
// (the state of a key the store knows nothing about).
func fullResult(rules []sluice.Rule, cost int64) sluice.Result {
	best := 0
	for i, r := range rules {
		if r.Burst < rules[best].Burst {
			best = i
		}
	}
	r := rules[best]
	return sluice.Result{
		Allowed:    true,
		DecidedBy:  sluice.ByOpen,
		Rule:       best,
		Limit:      r.Burst,
		Remaining:  max(r.Burst-cost, 0),
		ResetAfter: time.Duration(float64(cost) / r.Rate * float64(time.Second)).Round(time.Microsecond),
	}
}

func invalid(err error) bool {
	return errors.Is(err, sluice.ErrInvalid) || errors.Is(err, sluice.ErrCostExceedsBurst)
}

func unavailable(cause error) error {
	if cause == ErrCircuitOpen {
		return errClosedCircuit
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, cause)
}
