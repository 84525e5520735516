package algo

import (
	"sort"

	"github.com/sluicehq/sluice"
)

// slidingLog is the state of a key under the sliding log: the time (Unix
// µs) of every admitted unit, oldest first, for as long as the longest
// window of its rules. A request of cost c passes when, for every rule,
// the units in the window (t-W, t] plus c are within Burst; then c entries
// of t are added. It is exact, and it stores one entry per admitted unit:
// up to Burst a key, 8 bytes each here and far more in a Redis sorted set.
// Because a request is admitted by every rule or by none, one log serves
// all of a key's rules.
type slidingLog struct {
	times []int64
}

// since returns the index of the first entry after t - w: the window
// (t-w, t] is times[since:].
func (l *slidingLog) since(t, w int64) int {
	return sort.Search(len(l.times), func(j int) bool { return l.times[j] > t-w })
}

// prepare clamps now to the newest entry (a clock that is behind sees the
// log as of then) and drops the entries older than every rule's window.
func (l *slidingLog) prepare(rules []sluice.Rule, now int64) (t, wmax int64) {
	t = now
	if n := len(l.times); n > 0 && l.times[n-1] > t {
		t = l.times[n-1]
	}
	for _, r := range rules {
		wmax = max(wmax, window(r))
	}
	if cut := l.since(t, wmax); cut > 0 {
		l.times = l.times[:copy(l.times, l.times[cut:])]
	}
	return t, wmax
}

// outcomes fills out for every rule at t and returns the overall retry.
// A rule refusing cost c with used units in its window must see the k =
// used + c - Burst oldest of them leave: the k-th oldest, at time e, has
// left at e + W.
func (l *slidingLog) outcomes(rules []sluice.Rule, t, cost int64, out []outcome) (retry int64, allowed bool) {
	allowed = true
	n := len(l.times)
	for i, r := range rules {
		w := window(r)
		from := l.since(t, w)
		used := int64(n - from)
		out[i] = outcome{remaining: max(0, r.Burst-used)}
		if used > 0 {
			out[i].reset = l.times[n-1] + w - t
		}
		if k := used + cost - r.Burst; k > 0 {
			allowed = false
			out[i].retry = l.times[from+int(k)-1] + w - t
			retry = max(retry, out[i].retry)
		}
	}
	return retry, allowed
}

// idle is the time at which every entry has left every window.
func (l *slidingLog) idle(t, wmax int64) int64 {
	if n := len(l.times); n > 0 {
		return l.times[n-1] + wmax
	}
	return t
}

func (l *slidingLog) add(t, units int64) {
	for range units {
		l.times = append(l.times, t)
	}
}

// decideSlidingLog checks cost against every rule at now and, when it
// passes, logs it. It returns the Result and the time (Unix µs) after
// which the log is empty.
func decideSlidingLog(l *slidingLog, rules []sluice.Rule, now, cost int64, _ int64, _ bool) (sluice.Result, int64) {
	t, wmax := l.prepare(rules, now)
	var out [sluice.MaxRules]outcome
	retry, allowed := l.outcomes(rules, t, cost, out[:])
	if allowed {
		l.add(t, cost)
		l.outcomes(rules, t, 0, out[:]) // what is left after it
	}
	return pick(rules, out[:], allowed, retry, 0), l.idle(t, wmax)
}

// adjustSlidingLog logs delta more units at now, or takes -delta of the
// newest entries out. Allowed reports whether every window is within its
// Burst afterwards.
func adjustSlidingLog(l *slidingLog, rules []sluice.Rule, now, delta int64) (sluice.Result, int64) {
	t, wmax := l.prepare(rules, now)
	if delta > 0 {
		l.add(t, delta)
	} else {
		l.times = l.times[:max(0, int64(len(l.times))+delta)]
	}
	var out [sluice.MaxRules]outcome
	retry, allowed := l.outcomes(rules, t, 0, out[:])
	return pick(rules, out[:], allowed, retry, 0), l.idle(t, wmax)
}
