// Package sluice is the core of the sluice rate limiter: the token bucket
// rule, the result of a check, the Store interface that every backend
// implements, and the bucket math that all of them share.
//
// A Rule is a token bucket of capacity Burst refilled continuously at Rate
// tokens per second. A check of cost c passes when at least c tokens are in
// the bucket and removes them; otherwise nothing is consumed and the Result
// says how long until c tokens will be there. A key that has no state is a
// full bucket, so a store may forget any bucket that is full again without
// changing a single answer.
//
// A rule may instead be a calendar quota (NewQuota): Burst tokens per
// calendar day, ISO week or month in a time zone, all of them back when the
// next period begins; a denial waits for that instant.
//
// A check may name several rules (say 20/s with burst 100, and 10000/d):
// they are decided together, all or nothing, and the Result reports the rule
// closest to running out. The math lives in Decide and AdjustBuckets, written
// once; the in-memory store (package memstore) calls it directly and the
// Redis store (package redisstore) runs a Lua script that mirrors it line by
// line, held against it by a differential test.
//
// Limiter puts golang.org/x/time/rate's Allow and Wait on any Store.
package sluice

import (
	"context"
	"errors"
	"time"
)

// Errors that callers branch on. Every error a store returns for bad input
// wraps one of them, so errors.Is works through the added detail.
var (
	// ErrInvalid reports a request or rule that can never be checked: an
	// empty key, a negative cost, no rules, a rate that is not a positive
	// finite number, a burst below 1.
	ErrInvalid = errors.New("sluice: invalid input")

	// ErrCostExceedsBurst reports a cost larger than the burst of one of the
	// rules: such a request can never pass, however long it waits.
	ErrCostExceedsBurst = errors.New("sluice: cost exceeds burst")
)

// MaxRules is the largest number of rules one check may hold.
const MaxRules = 16

// Request is one check: Cost tokens for Key against every rule in Rules.
type Request struct {
	// Key names the caller's buckets. Stores keep one bucket per rule under
	// it; a Redis store hashes keys longer than its bound.
	Key string

	// Cost is the number of tokens the request takes, ≥ 0. Zero inspects the
	// buckets without taking anything.
	Cost int64

	// Rules are decided together, all or nothing; 1 to MaxRules of them.
	// Their order matters: the state of a key is stored by rule position.
	Rules []Rule

	// MaxDelay, when positive, turns a denial into a reservation when the
	// tokens will be there within MaxDelay: the tokens are taken now (the
	// buckets go below zero) and Result.Delay says how long the caller must
	// wait before it proceeds. Requests queue in arrival order.
	MaxDelay time.Duration

	// CountDenied counts a denied request's cost too, as
	// envoyproxy/ratelimit's fixed window does (its INCRBY counts every
	// hit), in the same store call: later requests in the window see it,
	// and a cost above a rule's burst is a denial, not ErrCostExceedsBurst.
	// Only the fixed window (package algo) honours it; algo's other
	// algorithms refuse it, and the token bucket stores ignore it (such a
	// cost is then only denied).
	CountDenied bool

	// WindowKey, when set with CountDenied and one rule, asks the fixed
	// window on Redis to count as envoyproxy/ratelimit's Redis cache does,
	// so that the two can share one Redis and count together: a counter
	// per window, named WindowKey followed by the window's start in Unix
	// seconds (by the store's clock), raised by INCRBY and given an EXPIRE
	// of the window's length (plus the store's jitter) in the same round
	// trip, unless the store knows the expiry it gave to be at least 10
	// seconds away. It names the Redis key itself, outside the store's prefix. Other
	// stores, and a request of several rules, decide by Key as always;
	// the answers are the same.
	WindowKey string

	// Algorithm names the rate limiting algorithm of the request's
	// buckets (see package algo), for a store that serves several:
	// algo.Router sends the request to the store of that algorithm. Empty
	// is the token bucket. A store of one algorithm ignores it.
	Algorithm string

	// OnError, when not nil, is the request's failure policy, for a store
	// that decides itself what happens when its backend fails (package
	// resilient): a policy's own on_error. Nil leaves it to the store's
	// default. A pointer, because OnError's zero value is a policy of its
	// own (OnErrorLocal): nil is the one way to say "the store's
	// default", and no flag can be forgotten beside a value. A store reads
	// it and never writes through it.
	OnError *OnError

	// Lease, when not nil, asks a store that leases (redisstore.Leased,
	// chosen by the gateway for a policy's lease:) to decide this token
	// bucket check from a lease of the key's tokens. Other stores ignore
	// it; package resilient allows for the tokens a lease may hold ahead.
	// A store reads it and never writes through it.
	Lease *Lease
}

// Result is the outcome of a check or an adjustment.
type Result struct {
	// Allowed reports whether the request passes (possibly after Delay).
	Allowed bool

	// Rule is the index in Request.Rules of the rule this result reports:
	// when denied, the rule that makes the caller wait longest; when allowed,
	// the one with the fewest tokens left.
	Rule int

	// Limit is the burst of the reported rule.
	Limit int64

	// Remaining is the whole number of tokens left in the reported rule's
	// bucket after the check, never below zero.
	Remaining int64

	// RetryAfter is, when denied, the time until the request would pass:
	// exactly (cost - tokens) / rate for the slowest rule, rounded up to the
	// microsecond, or the time until a spent quota's period ends. Zero when
	// allowed.
	RetryAfter time.Duration

	// ResetAfter is the time until the reported rule's bucket is full again:
	// for a calendar quota that is used, the end of its period.
	ResetAfter time.Duration

	// Delay is how long the caller must wait before proceeding with a
	// reserved request (Request.MaxDelay). Zero for plain checks.
	Delay time.Duration

	// DecidedBy says what decided the result when it was not the store's
	// own bucket: a remembered denial, or a failure policy while the store
	// could not answer. The zero value, ByStore, is the store itself.
	DecidedBy DecidedBy
}

// DecidedBy names what decided a Result.
type DecidedBy uint8

const (
	// ByStore: the store's own bucket decided.
	ByStore DecidedBy = iota
	// ByDenialCache: a denial remembered from the store answered.
	ByDenialCache
	// ByLocal: the store failed and an in-process bucket decided.
	ByLocal
	// ByOpen: the store failed and the request was let through unchecked.
	ByOpen
)

var decidedByNames = [...]string{ByStore: "store", ByDenialCache: "denial_cache", ByLocal: "local", ByOpen: "open"}

// String returns store, denial_cache, local or open.
func (d DecidedBy) String() string {
	if int(d) < len(decidedByNames) {
		return decidedByNames[d]
	}
	return "unknown"
}

// Degraded reports whether the store's bucket did not take part because
// the store failed (ByLocal or ByOpen).
func (d DecidedBy) Degraded() bool { return d == ByLocal || d == ByOpen }

// Store keeps token buckets and decides checks against them. Every
// implementation is safe for concurrent use and gives the same answers for
// the same sequence of (time, request).
type Store interface {
	// Check decides req at the store's current time. A denied check consumes
	// nothing but records the refill. It returns an error wrapping
	// ErrInvalid or ErrCostExceedsBurst for bad input, and another error
	// when the store cannot answer (then the Result is meaningless).
	Check(ctx context.Context, req Request) (Result, error)

	// Adjust changes the buckets of req.Key under req.Rules after the
	// fact, for work whose cost is known only at its end: a positive delta
	// charges more (buckets may go below zero, so later requests wait), a
	// negative delta refunds (up to the burst). It reads the request's
	// Key, Rules and the store's choices (Algorithm, OnError), not its
	// Cost, MaxDelay or CountDenied. The Result reports the state
	// afterwards; Allowed tells whether every bucket is at or above zero.
	Adjust(ctx context.Context, req Request, delta int64) (Result, error)
}

// Lease is a request's opt-in to leases of its key's tokens (see
// redisstore.Lease, which adds the cap on keys an instance holds): each
// instance takes Tokens at once from the shared bucket and decides
// locally until they are spent or TTL has passed.
type Lease struct {
	Tokens int64
	TTL    time.Duration
}
