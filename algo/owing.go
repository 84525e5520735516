package algo

import (
	"math"
	"sort"

	"github.com/sluicehq/sluice"
)

// owedState is what one rule of a key evicted at the cap still owed, as
// its algorithm packs it (the sliding log packs the key's whole log into
// one); the zero value owes nothing.
type owedState = [3]int64

// recalled is what a key coming back finds of one of its records: its own
// (exact, or for the sliding log conservative), and the until of a merged
// record that holds it (≤ now when none does).
type recalled struct {
	v      owedState
	own    bool
	merged int64
}

// owing packs an algorithm's state for the remembrance of evicted keys
// and unpacks it when the key comes back. load must leave a state that
// admits nothing the evicted one would not have: from a merged record it
// assumes the most any key due by that time could owe.
type owing[S any] struct {
	perKey bool // one record a key whatever its rules (the sliding log), not one a rule
	save   func(st *S, now int64, out []owedState) int
	load   func(st *S, rules []sluice.Rule, now int64, recs []recalled)
}

var (
	fixedWindowOwing   = owing[[]fixedWindow]{save: saveFixedWindow, load: loadFixedWindow}
	slidingWindowOwing = owing[[]slidingWindow]{save: saveSlidingWindow, load: loadSlidingWindow}
	leakyBucketOwing   = owing[[]leakyBucket]{save: saveLeakyBucket, load: loadLeakyBucket}
	slidingLogOwing    = owing[slidingLog]{perKey: true, save: saveSlidingLog, load: loadSlidingLog}
)

// owedID is the remembrance's id of record i of a key of hash h with n
// records: another id for another number of rules, as the state itself is
// reset when the number changes.
func owedID(h uint64, n, i int) uint64 {
	id := h ^ uint64(n<<8|i+1)*0xbf58476d1ce4e5b9
	if id == 0 {
		id = 1
	}
	return id
}

func saveFixedWindow(s *[]fixedWindow, _ int64, out []owedState) int {
	for i, st := range *s {
		out[i] = owedState{}
		if st.count != 0 {
			out[i] = owedState{st.start, st.count}
		}
	}
	return len(*s)
}

// loadFixedWindow: its own record is the window exactly; a merged record
// due at u fills the current window when it ends by u (a key that counted
// anything in it is due no earlier than its end).
func loadFixedWindow(s *[]fixedWindow, rules []sluice.Rule, now int64, recs []recalled) {
	st := resize(s, len(rules))
	for i, r := range rules {
		if recs[i].own {
			st[i] = fixedWindow{start: recs[i].v[0], count: recs[i].v[1]}
		}
		if u := recs[i].merged; u > now {
			w := window(r)
			st[i].roll(w, now)
			if st[i].start+w <= u {
				st[i].count = max(st[i].count, r.Burst)
			}
		}
	}
}

func saveSlidingWindow(s *[]slidingWindow, _ int64, out []owedState) int {
	for i, st := range *s {
		out[i] = owedState{}
		if st.prev != 0 || st.cur != 0 {
			out[i] = owedState{st.start, st.prev, st.cur}
		}
	}
	return len(*s)
}

// loadSlidingWindow: its own record is the state exactly; a merged record
// due at u fills the current window when a count in it would be due by u
// (two windows from its start), else the previous one when that would be.
func loadSlidingWindow(s *[]slidingWindow, rules []sluice.Rule, now int64, recs []recalled) {
	st := resize(s, len(rules))
	for i, r := range rules {
		if recs[i].own {
			st[i] = slidingWindow{start: recs[i].v[0], prev: recs[i].v[1], cur: recs[i].v[2]}
		}
		if u := recs[i].merged; u > now {
			w := window(r)
			st[i].roll(w, now)
			switch {
			case st[i].start+2*w <= u:
				st[i].cur = max(st[i].cur, r.Burst)
			case st[i].start+w <= u:
				st[i].prev = max(st[i].prev, r.Burst)
			}
		}
	}
}

func saveLeakyBucket(s *[]leakyBucket, now int64, out []owedState) int {
	for i, st := range *s {
		out[i] = owedState{}
		if st.next > float64(now) {
			out[i] = owedState{int64(math.Float64bits(st.next))}
		}
	}
	return len(*s)
}

// loadLeakyBucket: its own record is the queue exactly; a merged record due
// at u holds a queue that empties at u, at most a full one.
func loadLeakyBucket(s *[]leakyBucket, rules []sluice.Rule, now int64, recs []recalled) {
	st := resize(s, len(rules))
	t := float64(now)
	for i, r := range rules {
		if recs[i].own {
			st[i].next = math.Float64frombits(uint64(recs[i].v[0]))
		}
		if u := recs[i].merged; u > now {
			st[i].next = max(st[i].next, min(float64(u), t+float64(float64(r.Burst)*1e6)/r.Rate))
		}
	}
}

// saveSlidingLog packs the log as its oldest entry, its newest and how
// many it holds.
func saveSlidingLog(l *slidingLog, _ int64, out []owedState) int {
	out[0] = owedState{}
	if n := len(l.times); n > 0 {
		out[0] = owedState{l.times[0], l.times[n-1], int64(n)}
	}
	return 1
}

// loadSlidingLog: its own record gives back the oldest entry where it was
// and all the others at the newest's time, so each leaves a window no
// earlier than it would have; a merged record due at u adds the largest
// burst at the latest time entries due by u can have.
func loadSlidingLog(l *slidingLog, rules []sluice.Rule, now int64, recs []recalled) {
	var times []int64
	if r := recs[0]; r.own {
		times = append(times, r.v[0])
		for range r.v[2] - 1 {
			times = append(times, r.v[1])
		}
	}
	if u := recs[0].merged; u > now {
		var wmax, burst int64
		for _, r := range rules {
			wmax, burst = max(wmax, window(r)), max(burst, r.Burst)
		}
		for range burst {
			times = append(times, min(now, u-wmax))
		}
		sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
	}
	l.times = times
}
