package resilient

import (
	"context"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/coalesce"
)

// A store call runs on a worker: a goroutine that outlives the call and
// waits for the next one, so that a call costs no goroutine start and no
// stack growth (a call into go-redis runs deep), and its caller waits with
// a timer from a pool. The caller must be free to leave at the deadline
// while the call goes on (a read from a stalled Redis cannot be cut short
// before MaxWait, and the deadline is extended while the store shows signs
// of life): that is why the call is not made on the caller's goroutine.
//
// A store that can send a check without its caller's goroutine waiting in
// it (coalesce.Sender: the fixed window's coalescing queues) needs no
// worker: the caller queues the check and waits for its answer as it
// would for the worker's, and the store's own flusher answers it
// (job.Answer). A caller that leaves withdraws a check still queued, so
// that its call slot is given back at once, as a worker's is when the
// store returns. Such checks hold slots of their own (Options.MaxSent),
// not the workers': what bounds the workers is the store client's
// connections, which a queued check does not hold.

// job is one call to the wrapped store. Its callCtx is the context the
// store sees. A job whose caller left before the answer (gave up, or its
// context ended) is canceled and left to the worker and the garbage
// collector; the caller puts a job back in the pool only after reading its
// answer.
type job struct {
	callCtx
	s      *Store
	b      *breaker
	sent   coalesce.Withdrawer // a check sent to s.sender, until answered
	slots  chan struct{}       // where its call slot is given back
	adjust bool
	req    sluice.Request // a Check, or an Adjust by delta
	delta  int64
	done   chan answer // buffered: the worker never waits for the caller
}

var jobs = sync.Pool{New: func() any {
	return &job{done: make(chan answer, 1), callCtx: callCtx{cancel: make(chan struct{})}}
}}

// callCtx is the context of a call: its caller's values and deadline,
// MaxWait after it was sent at the latest, and canceled when its caller
// leaves without the answer (so that a client that retries or dials stops
// then). It is part of its job, so that a call allocates no context: a
// store must not keep a context after the call returns (go-redis does
// not).
type callCtx struct {
	parent   context.Context
	deadline time.Time
	cancel   chan struct{} // closed when the caller leaves without the answer
}

func (c *callCtx) Deadline() (time.Time, bool) { return c.deadline, true }
func (c *callCtx) Done() <-chan struct{}       { return c.cancel }
func (c *callCtx) Value(key any) any           { return c.parent.Value(key) }

func (c *callCtx) Err() error {
	select {
	case <-c.cancel:
		if err := c.parent.Err(); err != nil {
			return err
		}
		if time.Now().After(c.deadline) {
			return context.DeadlineExceeded
		}
		return context.Canceled
	default:
		return nil
	}
}

// run makes j's call on the worker's goroutine, and answers.
func (s *Store) run(j *job) {
	if j.adjust {
		j.Answer(s.primary.Adjust(&j.callCtx, j.req, j.delta))
	} else {
		j.Answer(s.primary.Check(&j.callCtx, j.req))
	}
}

// Answer gives j's call slot back and hands its caller the answer: from
// run, or from the store's flusher for a check sent to s.sender.
func (j *job) Answer(res sluice.Result, err error) {
	s := j.s
	<-j.slots
	if err == nil || invalid(err) {
		j.b.answered(s.clock())
	}
	j.done <- answer{res, err} // j is its caller's from here on
}

// send sends j's check to s.sender, when it holds a slot of s.sendSlots
// (the sender said it Sends the check); false when the job is for a
// worker. A sender that breaks its word (Sends, then SendCheck false) has
// its check run on a worker all the same, counted in s.sendSlots.
func (s *Store) send(j *job) bool {
	if j.slots != s.sendSlots {
		return false
	}
	w, ok := s.sender.SendCheck(&j.callCtx, j.req, j)
	j.sent = w
	return ok
}

// leave is what a caller that leaves without j's answer does: it cancels
// the call, and withdraws a check still queued in s.sender.
func (j *job) leave() {
	close(j.cancel)
	if j.sent != nil {
		j.sent.Withdraw(j, context.Canceled)
	}
}

// work runs j, then the jobs handed to it, until the Store is closed.
// A worker that finds none waiting parks on s.handoff; at most about
// MaxInFlight of them exist, since a job is only handed out with a call
// slot held.
func (s *Store) work(j *job) {
	for {
		s.run(j)
		select {
		case j = <-s.handoff:
		case <-s.closed:
			return
		}
	}
}

// dispatch hands j to a parked worker, or starts one when none is parked.
func (s *Store) dispatch(j *job) {
	select {
	case s.handoff <- j:
	default:
		go s.work(j)
	}
}

var timers sync.Pool // of *time.Timer, stopped

// getTimer returns a timer that fires after d.
func getTimer(d time.Duration) *time.Timer {
	if t, ok := timers.Get().(*time.Timer); ok {
		t.Reset(d)
		return t
	}
	return time.NewTimer(d)
}

// putTimer stops t and keeps it for reuse: since Go 1.23 a stopped timer's
// channel holds no stale tick.
func putTimer(t *time.Timer) {
	t.Stop()
	timers.Put(t)
}

// call hands j, a call to the wrapped store that holds a call slot, to a
// worker and waits for it: until the deadline, or while the store shows
// signs of life up to MaxWait. Each time the deadline passes it looks
// again: when the store has answered a call in the last deadline's time
// (and since this one was sent), it is answering and this call's answer is
// on its way; when the timer itself fired late, or this process's
// goroutines now wait to run for half a deadline or more (schedLag), this
// process was too busy to tell. Otherwise the store has failed. The call
// goes on in its worker until it returns (MaxWait at most) and gives its
// slot back then, so a call given up still counts against the bound.
func (s *Store) call(ctx context.Context, b *breaker, sent int64, j *job) (sluice.Result, error) {
	j.parent, j.b, j.s = ctx, b, s
	j.deadline = s.start.Add(time.Duration(sent) + s.maxWait)
	if d, ok := ctx.Deadline(); ok && d.Before(j.deadline) {
		j.deadline = d
	}
	if !s.send(j) {
		s.dispatch(j)
	}
	timer := getTimer(s.timeout)
	defer putTimer(timer)
	due := sent + int64(s.timeout)
	for {
		select {
		case a := <-j.done:
			putJob(j)
			return a.res, a.err
		case <-ctx.Done():
			j.leave()
			return sluice.Result{}, ctx.Err()
		case <-timer.C:
		}
		now := s.clock()
		late := now-due > int64(s.timeout)/2 || s.lag.get() > s.timeout/2
		alive := b.answeredSince(max(sent, now-int64(s.timeout)))
		if (late || alive) && now-sent < int64(s.maxWait) {
			due = now + int64(s.timeout)
			timer.Reset(s.timeout)
			continue
		}
		select {
		case a := <-j.done: // it came while we looked
			putJob(j)
			return a.res, a.err
		default:
		}
		j.leave()
		return sluice.Result{}, errNoAnswer
	}
}

// checkJob returns a job that checks req, holding a call slot of slots.
func checkJob(req sluice.Request, slots chan struct{}) *job {
	j := jobs.Get().(*job)
	j.adjust, j.req, j.slots = false, req, slots
	return j
}

// adjustJob returns a job that adjusts req's buckets by delta, holding a
// call slot of s.slots.
func (s *Store) adjustJob(req sluice.Request, delta int64) *job {
	j := jobs.Get().(*job)
	j.adjust, j.req, j.delta, j.slots = true, req, delta, s.slots
	return j
}

// putJob keeps j, answered, for reuse, holding on to nothing of its call.
func putJob(j *job) {
	j.parent, j.b, j.s, j.sent, j.req, j.slots = nil, nil, nil, nil, sluice.Request{}, nil
	jobs.Put(j)
}
