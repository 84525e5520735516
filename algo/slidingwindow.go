package algo

import "github.com/sluicehq/sluice"

// slidingWindow is the state of one rule of the sliding window counter:
// the start of the current fixed window (Unix µs, a multiple of W), the
// units admitted in it (cur) and in the window before (prev).
//
// At time t, a fraction f = (t - start)/W into the current window, the
// sliding window (t-W, t] overlaps the previous fixed window by 1-f, and
// the count in it is estimated as prev × (1-f) + cur, as if the previous
// window's units had been spread evenly. A request passes when the
// estimate plus its cost is within Burst. Two numbers a rule, whatever the
// traffic; the price is that the estimate is off by however unevenly the
// previous window's units were spread (see docs/algorithms.md for the
// bound).
type slidingWindow struct {
	start, prev, cur int64
}

// roll moves st to the window that holds t (clamped as for fixedWindow):
// the current count becomes the previous one when the windows are
// neighbours, and is forgotten when they are not.
func (st *slidingWindow) roll(w, now int64) int64 {
	t := max(now, st.start)
	if start := t - t%w; start != st.start {
		prev := int64(0)
		if start-w == st.start {
			prev = st.cur
		}
		*st = slidingWindow{start: start, prev: prev}
	}
	return t
}

// estimate is prev × (1-f) + cur at t. The explicit conversions keep the
// compiler from fusing multiply and add, which would break bit-for-bit
// agreement with the Lua script.
func (st *slidingWindow) estimate(w, t int64) float64 {
	return float64(float64(st.prev)*float64(w-(t-st.start)))/float64(w) + float64(st.cur)
}

// wait is the time from t until a request of cost passes the rule,
// cost ≤ Burst and the estimate being too high now. If the current count
// leaves room for it, the previous window's weight only has to fade far
// enough: prev × (W - el')/W ≤ Burst - cur - cost. Otherwise it must wait
// for the next window, where this window's count becomes the faded one:
// cur × (W - el')/W ≤ Burst - cost.
func (st *slidingWindow) wait(r sluice.Rule, w, t, cost int64) float64 {
	el := t - st.start
	if st.cur+cost <= r.Burst { // prev > 0 here, or the estimate would pass
		return float64(w-el) - float64(float64(r.Burst-st.cur-cost)*float64(w))/float64(st.prev)
	}
	wait := float64(w - el)
	if extra := float64(w) - float64(float64(r.Burst-cost)*float64(w))/float64(st.cur); extra > 0 {
		wait += extra
	}
	return wait
}

// outcome of one rule at t after the decision; est is the estimate
// afterwards, over says whether a request of cost is refused.
func (st *slidingWindow) outcome(r sluice.Rule, w, t, cost int64, est float64, over bool) outcome {
	o := outcome{remaining: remaining(float64(r.Burst) - est)}
	el := t - st.start
	switch {
	case st.cur > 0:
		o.reset = 2*w - el // until the current window has faded too
	case st.prev > 0:
		o.reset = w - el
	}
	if over {
		o.retry = ceilMicros(st.wait(r, w, t, cost))
	}
	return o
}

// decideSlidingWindow checks cost against every rule at now: it passes
// when every estimate plus cost is within Burst, and then counts it in
// every current window. It returns the Result and the time (Unix µs)
// after which the state is idle.
func decideSlidingWindow(s *[]slidingWindow, rules []sluice.Rule, now, cost int64, _ int64, _ bool) (sluice.Result, int64) {
	st := resize(s, len(rules))
	var ts [sluice.MaxRules]int64
	var est [sluice.MaxRules]float64
	var over [sluice.MaxRules]bool
	c := float64(cost)
	allowed := true
	for i, r := range rules {
		w := window(r)
		ts[i] = st[i].roll(w, now)
		est[i] = st[i].estimate(w, ts[i])
		if est[i]+c > float64(r.Burst)+tolerance {
			over[i], allowed = true, false
		}
	}
	if allowed {
		for i := range rules {
			st[i].cur += cost
			est[i] += c
		}
	}
	return slidingWindowReport(st, rules, ts[:], est[:], over[:], allowed, cost)
}

// adjustSlidingWindow charges delta more units to every current window (or
// refunds -delta, down to zero). Allowed reports whether every estimate
// is within its Burst afterwards.
func adjustSlidingWindow(s *[]slidingWindow, rules []sluice.Rule, now, delta int64) (sluice.Result, int64) {
	st := resize(s, len(rules))
	var ts [sluice.MaxRules]int64
	var est [sluice.MaxRules]float64
	var over [sluice.MaxRules]bool
	allowed := true
	for i, r := range rules {
		w := window(r)
		ts[i] = st[i].roll(w, now)
		st[i].cur = addCount(st[i].cur, delta)
		est[i] = st[i].estimate(w, ts[i])
		if est[i] > float64(r.Burst)+tolerance {
			over[i], allowed = true, false
		}
	}
	return slidingWindowReport(st, rules, ts[:], est[:], over[:], allowed, 0)
}

func slidingWindowReport(st []slidingWindow, rules []sluice.Rule, ts []int64, est []float64, over []bool, allowed bool, cost int64) (sluice.Result, int64) {
	var out [sluice.MaxRules]outcome
	var retry, idle int64
	for i, r := range rules {
		w := window(r)
		out[i] = st[i].outcome(r, w, ts[i], cost, est[i], over[i])
		retry = max(retry, out[i].retry)
		idle = max(idle, ts[i]+out[i].reset)
	}
	return pick(rules, out[:], allowed, retry, 0), idle
}
