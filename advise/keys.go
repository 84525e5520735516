package advise

import (
	"cmp"
	"math"
	"slices"
)

// Per key, the advisor keeps a summary of its traffic in each class over
// the window: its requests, how many were errors or already denied, its
// busiest second and its busiest minute. The proposal is read from these
// (see proposeByKeys), so that each caller counts once, whatever its
// volume, and abusive callers can be set apart instead of sizing the limit.
// Memory follows the distinct (class, key) pairs of the window: about 100
// bytes and the key each.

// keySum is one key's traffic in one class.
type keySum struct {
	key      string
	class    int32
	requests uint32
	errors   uint32 // answered 4xx or 5xx, 429 included
	denied   uint32 // answered 429: already limited
	peakSec  uint32 // its busiest whole second
	peakMin  uint32 // its busiest whole minute
	first    int64  // second of its first request counted
	// need is the smallest bucket that passes all its requests at the
	// class's proposed rate (burst.go), 0 until the burst pass; fill and
	// last are that pass's leaky bucket.
	need uint32
	// excused are, of the errors, the 404s and 410s the errors rule does
	// not count (statusExcused); here, it fills need's padding
	excused uint32
	fill    float64
	last    int64
}

func (k *keySum) add(status uint16, sec int64) {
	k.requests++
	if status&statusRefused != 0 {
		k.denied++
		k.errors++
		return
	}
	if status&statusExcused != 0 {
		k.excused++
		status &^= statusExcused
	}
	if status >= 400 && status < 600 {
		k.errors++
	}
	if status == 429 {
		k.denied++
	}
}

// summary returns the index of the summary of (class, key) of hash h,
// new or started afresh when all it held is before the window.
func (m *measurer) summary(h uint64, class int32, key []byte) int32 {
	if i, ok := m.sumIndex[h]; ok {
		if m.sums[i].inWindow(m) {
			return i
		}
		m.sums[i] = keySum{key: m.sums[i].key, class: class, first: m.clock}
		return i
	}
	if len(m.sums) >= maxKeySums {
		// Past the bound, new keys share one summary that sizes nothing:
		// a flood of forged addresses does not exhaust memory.
		if m.overflow < 0 {
			m.overflow = int32(len(m.sums))
			m.sums = append(m.sums, keySum{class: -1})
		}
		return m.overflow
	}
	i := int32(len(m.sums))
	m.sums = append(m.sums, keySum{key: string(key), class: class, first: m.clock})
	m.sumIndex[h] = i
	return i
}

// maxKeySums bounds the (class, key) summaries of a run, about 100 bytes
// each: 2 million is some 200 MB. A variable, for the test.
var maxKeySums = 2_000_000

// unsummarized is the number of requests of keys past maxKeySums.
func (m *measurer) unsummarized() int64 {
	if m.overflow < 0 {
		return 0
	}
	return int64(m.sums[m.overflow].requests)
}

// inWindow reports whether k started inside the window as it stands.
func (k *keySum) inWindow(m *measurer) bool {
	return m.window <= 0 || k.first >= m.windowStart() || k.requests == 0
}

// Reasons a key is set apart as one the proposal would limit.
const (
	reasonErrors  = "errors"  // most of its requests were answered 4xx or 5xx
	reasonDenied  = "denied"  // a good share were answered 429 already
	reasonOutlier = "outlier" // its busiest minute is far above the other keys'
)

// Thresholds of the abuse rules (docs/advise.md, "Callers set apart").
const (
	abuseMinRequests = 20  // fewer requests are never set apart: too little to judge
	errorShare       = 0.5 // errors/requests at or above this
	deniedShare      = 0.1 // 429s/requests at or above this
	outlierFactor    = 10  // busiest minute above this many times the p90 of the others'
	outlierMinMinute = 60  // and at least this many requests in it (1/s sustained)
)

// LimitedKey is a caller the proposal would limit, set apart from those
// that size it.
type LimitedKey struct {
	Key        string `json:"key"`
	Reason     string `json:"reason"` // errors, denied or outlier
	Requests   uint32 `json:"requests"`
	Errors     uint32 `json:"errors"`
	Denied     uint32 `json:"denied"`
	PeakMinute uint32 `json:"peak_minute"`
	PeakSecond uint32 `json:"peak_second"`
}

// KeyStats is the per-key view of a class.
type KeyStats struct {
	Keys   int `json:"keys"`   // distinct callers in the window
	Normal int `json:"normal"` // those that size the proposal
	// PeakMinuteP99 is the p99 across normal keys of each key's busiest
	// minute (of rank callerRank: never one of the busiest three); the
	// sustained rate is it / 60 per second.
	PeakMinuteP99 uint32 `json:"peak_minute_p99"`
	// PeakSecondP99 is the p99 of the busiest second of the normal keys
	// whose sustained rate is within the proposed rate.
	PeakSecondP99 uint32 `json:"peak_second_p99"`
	// NeedP99 is the p99 of the same keys' need: the smallest bucket
	// that passes all of a key's requests at the proposed rate
	// (burst.go); the burst is read from it.
	NeedP99 uint32 `json:"need_p99"`
	// WouldLimit are the keys set apart, most requests first (at most
	// --top; SetApart counts them all).
	WouldLimit []LimitedKey `json:"would_limit,omitempty"`
	SetApart   int          `json:"set_apart"`
	// AboveRate is how many of the normal keys had a busiest minute
	// above the proposed rate (more than the rate × 60 requests): those
	// the chart draws right of the proposal's line.
	AboveRate int `json:"above_rate"`
	// FewCallers is set when fewer than fewCallers normal keys size the
	// proposal: its busiest callers may still set it.
	FewCallers bool `json:"few_callers,omitempty"`
}

// classKeys returns the summaries of the keys of each class in the window.
func (m *measurer) classKeys(classes int) [][]*keySum {
	out := make([][]*keySum, classes)
	if !m.perKey {
		return out
	}
	for i := range m.sums {
		k := &m.sums[i]
		if k.requests > 0 && k.inWindow(m) && k.class >= 0 && int(k.class) < classes {
			out[k.class] = append(out[k.class], k)
		}
	}
	for _, ks := range out {
		slices.SortFunc(ks, func(a, b *keySum) int { return cmp.Compare(a.key, b.key) })
	}
	return out
}

// setApart splits the keys of a class into those that size the proposal
// and those it would limit. A key with at least abuseMinRequests requests
// is set apart when half of them or more were errors, the excused ones
// aside (404s on static assets and of known crawlers, see excuse; a
// scanner, a
// credential stuffer, a broken client: its demand is not for the
// service), when a tenth or more were already denied with 429, or when
// its busiest minute is more than outlierFactor times the p90 of the
// other keys' busiest minutes and at least outlierMinMinute (a flood).
func setApart(keys []*keySum) (normal []*keySum, limited []LimitedKey) {
	var rest []*keySum
	for _, k := range keys {
		reason := ""
		switch {
		case k.requests < abuseMinRequests:
		case float64(k.errors-k.excused) >= errorShare*float64(k.requests):
			reason = reasonErrors
		case float64(k.denied) >= deniedShare*float64(k.requests):
			reason = reasonDenied
		}
		if reason != "" {
			limited = append(limited, limitedKey(k, reason))
			continue
		}
		if k.peakMin == 0 {
			continue // every request refused by sluice: no traffic to size on
		}
		rest = append(rest, k)
	}
	peaks := make([]uint32, len(rest))
	for i, k := range rest {
		peaks[i] = k.peakMin
	}
	slices.Sort(peaks)
	p90 := nearestRank(peaks, 90)
	for _, k := range rest {
		if k.requests >= abuseMinRequests && k.peakMin >= outlierMinMinute && k.peakMin > outlierFactor*p90 {
			limited = append(limited, limitedKey(k, reasonOutlier))
			continue
		}
		normal = append(normal, k)
	}
	slices.SortStableFunc(limited, func(a, b LimitedKey) int {
		if c := cmp.Compare(b.Requests, a.Requests); c != 0 {
			return c
		}
		return cmp.Compare(a.Key, b.Key)
	})
	return normal, limited
}

func limitedKey(k *keySum, reason string) LimitedKey {
	return LimitedKey{Key: k.key, Reason: reason, Requests: k.requests, Errors: k.errors, Denied: k.denied, PeakMinute: k.peakMin, PeakSecond: k.peakSec}
}

// nearestRank is the pct-th percentile of sorted values: the value of
// rank ⌈pct/100 · n⌉; 0 when there are none.
func nearestRank(sorted []uint32, pct int) uint32 {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[max(0, (pct*len(sorted)+99)/100-1)]
}

// trimTop is how many of a class's busiest callers never size its
// proposal, whatever the class's size.
const trimTop = 3

// fewCallers: a class sized on fewer normal callers than this is flagged
// (KeyStats.FewCallers): below it, fewer than trimTop are left out.
const fewCallers = 4 * trimTop

// callerRank is the rank (from 1, by increasing value) of the value the
// proposal reads across n callers: the p99's nearest rank, ⌈0.99·n⌉, but
// never one of the busiest trimTop callers, and in a class of fewer than
// fewCallers never one of its busiest quarter. With 300 callers or more
// it is the p99; with 100 callers the p99 would be the busiest caller
// alone, so that three callers at five times everyone's peak, or two
// brute-forcers on a login, would set the limit.
func callerRank(n int) int {
	return max(1, min((99*n+99)/100, n-min(trimTop, n/4)))
}

// byCallerRank is the value of rank callerRank(len(sorted)); 0 for none.
func byCallerRank(sorted []uint32) uint32 {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[callerRank(len(sorted))-1]
}

// proposeByKeys is the proposal read across keys:
//
//	sustained rate of a key = its busiest minute / 60               (requests per second)
//	rate R = 2 × the sustained rate of rank callerRank across normal keys (the p99, a whole number per minute)
//	need of a key = the smallest bucket that passes all its requests at R   (burst.go)
//	peak   = the need of rank callerRank among the normal keys whose busiest minute is within R
//	range  = [⌈5·R⌉, ⌊10·R⌋] when peak is within it, else [⌈5·R⌉, ⌊60·R⌋]
//	burst  = peak clamped to range, at least minBurst
//
// A minute is the window of the sustained rate because it is long enough
// that a burst spreads out in it (a caller that sends 30 requests in one
// second and then nothing has a sustained rate of 0.5/s, not 30/s) and
// short enough that a busy stretch is not averaged away; the burst is the
// bucket that absorbs the short peaks. So a burst is counted once, in the
// burst, and the rate says what a caller keeps up. The rule's 5–10 × rate
// holds 5 to 10 seconds of the rate; when the keys' needs are more (a
// page that loads five images at once, at a rate of a few a minute), the
// bucket may hold up to a minute of it instead, the window the rate was
// measured over; and never less than minBurst, so that a caller can
// always send a request again at once. Before the burst pass has measured
// the needs, a key's need is taken to be its busiest second.
func proposeByKeys(normal []*keySum, minBurst int64) (Proposal, KeyStats) {
	ks := KeyStats{Normal: len(normal)}
	if len(normal) == 0 {
		return Proposal{}, ks
	}
	mins := make([]uint32, len(normal))
	for i, k := range normal {
		mins[i] = k.peakMin
	}
	slices.Sort(mins)
	ks.PeakMinuteP99 = byCallerRank(mins)
	ks.FewCallers = len(normal) < fewCallers
	perMinute := 2 * float64(ks.PeakMinuteP99)
	rate := perMinute / 60
	var secs, needs []uint32
	for _, k := range normal {
		if float64(k.peakMin) <= perMinute {
			secs = append(secs, k.peakSec)
			needs = append(needs, cmp.Or(k.need, k.peakSec))
		}
	}
	slices.Sort(secs)
	slices.Sort(needs)
	ks.PeakSecondP99 = byCallerRank(secs)
	ks.NeedP99 = byCallerRank(needs)
	window := "10s"
	lo := max(1, int64(math.Ceil(5*rate-1e-9)))
	hi := int64(math.Floor(10*rate + 1e-9))
	if int64(ks.NeedP99) > hi {
		window = "1m"
		hi = int64(math.Floor(60*rate + 1e-9))
	}
	hi = max(lo, hi)
	burst := max(minBurst, min(max(int64(ks.NeedP99), lo), hi), 1)
	p := Proposal{Rate: rate, Burst: burst, Basis: "keys", BurstWindow: window}
	if rate > 0 {
		p.Multiplier = int64(math.Round(float64(burst) / rate))
		p.Burstiness = float64(ks.NeedP99) / rate
	}
	return p, ks
}

// reburst reads the bursts of rep's classes again once the burst pass
// has measured the keys' needs; the rates do not change.
func reburst(rep *Report, m *measurer, o Options) {
	keysOf := m.classKeys(2 * len(m.cls.endpoints))
	for i := range rep.Classes {
		c := &rep.Classes[i]
		if c.Proposal.Basis != "keys" || c.Proposal.Rate == 0 || int(c.class) >= len(keysOf) {
			continue
		}
		normal := keysOf[c.class]
		if !o.KeepAbusers {
			normal, _ = setApart(normal)
		}
		p, ks := proposeByKeys(normal, int64(o.MinBurst))
		staticFloor(&p, c.Match)
		c.Proposal, c.Keys.PeakSecondP99, c.Keys.NeedP99 = p, ks.PeakSecondP99, ks.NeedP99
	}
}

// peakMinutes is the histogram of the busiest minutes of keys, and how
// many of them are above rate (per second): more than rate × 60 requests
// in their busiest minute.
func peakMinutes(keys []*keySum, rate float64) (bins []Bin, above int) {
	var h hist
	perMinute := perMinuteOf(rate)
	for _, k := range keys {
		h.add(k.peakMin, 1)
		if float64(k.peakMin) > perMinute {
			above++
		}
	}
	return h.bins(), above
}

// perMinuteOf is a rate per second per minute, rounded to a millionth so
// that a whole number per minute stays whole.
func perMinuteOf(rate float64) float64 { return math.Round(rate*60*1e6) / 1e6 }
