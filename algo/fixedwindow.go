package algo

import "github.com/sluicehq/sluice"

// fixedWindow is the state of one rule of the fixed window: the start of
// the window it counts (Unix µs, a multiple of W) and the units admitted
// in it. Windows are aligned to the Unix epoch, so every key's windows
// share their edges: the boundary attack (Burst just before an
// edge, Burst again just after) passes 2 × Burst within moments.
type fixedWindow struct {
	start, count int64
}

// roll moves st to the window that holds t (a clock behind the stored
// window is taken as at its start) and returns t so clamped.
func (st *fixedWindow) roll(w, now int64) int64 {
	t := max(now, st.start)
	if start := t - t%w; start != st.start {
		*st = fixedWindow{start: start}
	}
	return t
}

// outcome of one rule after a decision at t, for a request of cost.
func (st *fixedWindow) outcome(r sluice.Rule, w, t, cost int64) outcome {
	o := outcome{remaining: max(0, r.Burst-st.count)}
	if st.count > 0 {
		o.reset = st.start + w - t
	}
	if st.count+cost > r.Burst {
		o.retry = st.start + w - t // the next window starts empty
	}
	return o
}

// decideFixedWindow checks cost against every rule at now: it passes when
// each window's count plus cost stays within Burst, and then counts it in
// every window. With countDenied a denied cost is counted too (saturating,
// as a charge), as envoyproxy/ratelimit's INCRBY counts every hit; the
// report then reads the windows after it, as it does after an admission.
// It returns the Result and the time (Unix µs) after which the state is
// idle and can be dropped.
func decideFixedWindow(s *[]fixedWindow, rules []sluice.Rule, now, cost int64, _ int64, countDenied bool) (sluice.Result, int64) {
	st := resize(s, len(rules))
	var ts [sluice.MaxRules]int64
	allowed := true
	for i, r := range rules {
		ts[i] = st[i].roll(window(r), now)
		if st[i].count+cost > r.Burst {
			allowed = false
		}
	}
	if allowed || countDenied {
		for i := range rules {
			st[i].count = addCount(st[i].count, cost)
		}
	}
	return fixedWindowReport(st, rules, ts[:], allowed, cost)
}

// adjustFixedWindow charges delta more units (or refunds -delta, down to
// zero) to every current window. Allowed reports whether every count is
// within its Burst afterwards.
func adjustFixedWindow(s *[]fixedWindow, rules []sluice.Rule, now, delta int64) (sluice.Result, int64) {
	st := resize(s, len(rules))
	var ts [sluice.MaxRules]int64
	allowed := true
	for i, r := range rules {
		ts[i] = st[i].roll(window(r), now)
		st[i].count = addCount(st[i].count, delta)
		if st[i].count > r.Burst {
			allowed = false
		}
	}
	return fixedWindowReport(st, rules, ts[:], allowed, 0)
}

func fixedWindowReport(st []fixedWindow, rules []sluice.Rule, ts []int64, allowed bool, cost int64) (sluice.Result, int64) {
	var out [sluice.MaxRules]outcome
	var retry, idle int64
	for i, r := range rules {
		w := window(r)
		out[i] = st[i].outcome(r, w, ts[i], cost)
		retry = max(retry, out[i].retry)
		if st[i].count > 0 {
			idle = max(idle, st[i].start+w)
		}
	}
	return pick(rules, out[:], allowed, retry, 0), idle
}
