package advise

import (
	"encoding/binary"
	"slices"
)

// What is measured, precisely. A sample is one (key, second) in which the
// key sent at least one request of its class, and its value is the number
// of those requests: seconds in which a key is silent are not samples (a
// rate limit is about what active callers do, and counting silence would
// put every percentile at zero). The same for (key, minute). Seconds and
// minutes are whole UTC seconds and minutes of the log's timestamps.
//
// Records reach the counting in time order (see reorder.go), so per key
// and class the advisor holds the count of the key's current second and
// of its current minute. When the key's next second begins, the count
// goes into the class's histogram and into the key's count of the
// minute. A key silent for a whole minute is dropped, so memory follows
// the keys active at once, not the log's size.
//
// Histograms map a count to its frequency exactly (counts are small
// integers), one per class and UTC hour, so that the window (the last
// --window of the log, rounded out to whole hours) can be cut once the end
// of the log is known; hours that can no longer be in it are dropped as the
// log advances.

// keyState is the open counts of one key in one class.
type keyState struct {
	top    int64 // second being counted
	minute int64 // minute being summed, -1 for none
	scount uint32
	mcount uint32
	class  int32
	sum    int32 // the key's summary over the window, in measurer.sums
}

// hist is an exact histogram of counts: dense for small counts, a map for
// the rare large ones.
type hist struct {
	small [32]uint64
	big   map[uint32]uint64
}

func (h *hist) add(count uint32, freq uint64) {
	if count < uint32(len(h.small)) {
		h.small[count] += freq
		return
	}
	if h.big == nil {
		h.big = make(map[uint32]uint64)
	}
	h.big[count] += freq
}

func (h *hist) merge(o *hist) {
	for c, f := range o.small {
		h.small[c] += f
	}
	for c, f := range o.big {
		h.add(c, f)
	}
}

// Bin is one count of a histogram and how many samples had it.
type Bin struct {
	Count uint32 `json:"count"`
	Freq  uint64 `json:"samples"`
}

// bins returns the histogram's non-empty bins by increasing count.
func (h *hist) bins() []Bin {
	var out []Bin
	for c, f := range h.small {
		if f > 0 {
			out = append(out, Bin{uint32(c), f})
		}
	}
	start := len(out)
	for c, f := range h.big {
		out = append(out, Bin{c, f})
	}
	slices.SortFunc(out[start:], func(a, b Bin) int { return int(a.Count) - int(b.Count) })
	return out
}

// hourHist holds one class's samples of one hour.
type hourHist struct {
	sec, min hist
}

// classAcc accumulates one class: an endpoint and a kind of caller.
type classAcc struct {
	hours    map[int64]*hourHist
	lastHour int64
	last     *hourHist
}

func (c *classAcc) hour(h int64) *hourHist {
	if c.last != nil && c.lastHour == h {
		return c.last
	}
	hh := c.hours[h]
	if hh == nil {
		hh = new(hourHist)
		c.hours[h] = hh
	}
	c.lastHour, c.last = h, hh
	return hh
}

// classes assigns class numbers: endpoint*2 + 1 for authenticated callers.
type classes struct {
	patterns  map[string]int32 // endpoint pattern → endpoint (no --config)
	endpoints []string         // endpoint patterns, or policy names
	matches   []string         // the ServeMux pattern of each endpoint
	max       int              // endpoints before folding (no --config)
	frozen    bool             // pass 2: no new endpoints
	byHash    map[uint64]int32 // pattern hash → endpoint, a cache of endpoint
}

// endpoint returns the endpoint of pattern p, registering it in pass 1;
// past max endpoints, new patterns fold into coarser prefix patterns.
func (cs *classes) endpoint(p []byte) int32 {
	if id, ok := cs.patterns[string(p)]; ok {
		return id
	}
	if !cs.frozen && len(cs.endpoints) < cs.max {
		return cs.add(string(p))
	}
	for depth := 1; depth <= 2; depth++ {
		f := foldPattern(string(p), depth)
		if id, ok := cs.patterns[f]; ok {
			return id
		}
		if !cs.frozen && (depth == 2 || len(cs.endpoints) < 2*cs.max) {
			return cs.add(f)
		}
	}
	return -1
}

func (cs *classes) add(p string) int32 {
	id := int32(len(cs.endpoints))
	cs.patterns[p] = id
	cs.endpoints = append(cs.endpoints, p)
	cs.matches = append(cs.matches, p)
	return id
}

// measurer is pass 1: it turns records into per-class histograms.
type measurer struct {
	cls       *classes
	window    int64 // seconds; 0 means the whole log
	maxSec    int64 // newest second of the log so far
	minSec    int64 // oldest second of the log so far
	clock     int64 // newest second of the current file: drives eviction
	lastSweep int64 // minute of the last sweep
	keys      map[uint64]int32
	deleted   int // since the map was last rebuilt
	states    []keyState
	free      []int32
	acc       []*classAcc
	unmatched int64
	requests  int64
	refused   int64 // requests sluice's access log says it refused
	ro        *reorder
	seg       *segmenter // nil: the inputs are not cut into segments
	perKey    bool
	overflow  int32            // the summary shared by keys past maxKeySums, -1 for none
	sumIndex  map[uint64]int32 // (class, key) → its summary in sums
	sums      []keySum
	// fixed is set when the window's start is known before the pass (an
	// earlier pass read the newest line): start is then the window's
	// first second, and nothing older is counted, so that every per-key
	// summary covers exactly the window.
	fixed bool
	start int64
}

// newMeasurer returns a measurer of the last window seconds of the log
// (0: all of it) that puts records back in time order within reorder
// seconds. perKey keeps the summary of every key (see keys.go); a pass
// that only finds the patterns does without.
func newMeasurer(cls *classes, window, reorder int64, perKey bool) *measurer {
	m := &measurer{cls: cls, window: window, keys: make(map[uint64]int32), maxSec: -1 << 62, perKey: perKey, overflow: -1}
	if perKey {
		m.sumIndex = make(map[uint64]int32)
	} else {
		m.sums = make([]keySum, 1) // every key shares one, unread
	}
	m.ro = newReorder(reorder, perKey, m.release)
	return m
}

// knownEndpoint returns the endpoint of r when it is already known: its
// policy with --config (-1: no policy matches it), or its pattern's
// endpoint once registered. Otherwise -2: the pattern is registered when
// its second is released, in time order (see reorder).
func knownEndpoint(cls *classes, r *rec) int32 {
	if cls.patterns == nil {
		return r.policy
	}
	if ep, ok := cls.byHash[r.patHash]; ok {
		return ep
	}
	return -2
}

// classOfItem returns the class of a released record, registering its
// pattern if need be, or -1 when it has none (pass 2, a new pattern
// that folds into no endpoint).
func classOfItem(cls *classes, s *slotBuf, it *item) int32 {
	ep := it.policy
	if ep < 0 {
		ep = cls.endpoint(s.bytes(it.pat))
		if cls.byHash == nil || len(cls.byHash) >= 1<<16 {
			cls.byHash = make(map[uint64]int32)
		}
		cls.byHash[it.patHash] = ep
	}
	if ep < 0 {
		return -1
	}
	if it.auth {
		return ep*2 + 1
	}
	return ep * 2
}

// stateHash is the key of a (class, caller) state: callers are told apart
// by a 64-bit hash, so two of n keys active at once share a state with
// probability about n²/2⁶⁵ (1e-8 for half a million).
func stateHash(class int32, keyHash uint64) uint64 {
	h := keyHash ^ (uint64(class)+1)*0x9e3779b97f4a7c15
	h ^= h >> 31
	h *= 0xbf58476d1ce4e5b9
	return h ^ h>>29
}

// appendStateKey appends the key of a (class, caller) state.
func appendStateKey(dst []byte, class int32, key []byte) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, uint32(class))
	return append(dst, key...)
}

func (m *measurer) batch(b *batch) {
	for i := range b.recs {
		r := &b.recs[i]
		ep := knownEndpoint(m.cls, r)
		if ep == -1 {
			m.unmatched++
			continue
		}
		m.requests++
		sec := floorSec(r.time)
		if sec > m.maxSec {
			m.maxSec = sec
		}
		if sec < m.minSec || m.minSec == 0 {
			m.minSec = sec
		}
		if m.seg != nil {
			m.seg.note(b.file, b.off+int64(r.off), sec)
		}
		m.ro.add(b, r, max(ep, -1))
	}
}

// release counts the records of one second, released in time order.
func (m *measurer) release(s *slotBuf) {
	sec := s.sec
	if m.fixed && sec < m.start {
		return
	}
	if sec > m.clock {
		m.clock = sec
		if sec/60 > m.lastSweep {
			m.lastSweep = sec / 60
			m.sweep(false)
		}
	}
	for i := range s.items {
		it := &s.items[i]
		class := classOfItem(m.cls, s, it)
		if class < 0 {
			continue
		}
		k := stateHash(class, it.keyHash)
		if it.status&statusRefused != 0 {
			// refused by sluice: only its caller's denied share counts it
			m.refused++
			if m.perKey && s.sec >= m.windowStart() {
				m.sums[m.summary(k, class, s.bytes(it.key))].add(it.status, sec)
			}
			continue
		}
		idx, ok := m.keys[k]
		if !ok {
			idx = m.newState(class, sec)
			m.keys[k] = idx
			if m.perKey {
				m.states[idx].sum = m.summary(k, class, s.bytes(it.key))
			}
		}
		st := &m.states[idx]
		m.count(st, sec)
		m.sums[st.sum].add(it.status, sec)
	}
}

func (m *measurer) newState(class int32, sec int64) int32 {
	for int(class) >= len(m.acc) {
		m.acc = append(m.acc, &classAcc{hours: make(map[int64]*hourHist)})
	}
	st := keyState{top: sec, minute: -1, class: class}
	if n := len(m.free); n > 0 {
		idx := m.free[n-1]
		m.free = m.free[:n-1]
		m.states[idx] = st
		return idx
	}
	m.states = append(m.states, st)
	return int32(len(m.states) - 1)
}

// count adds one request of second sec to st; sec is never older than
// st's current second.
func (m *measurer) count(st *keyState, sec int64) {
	if sec != st.top {
		if st.scount > 0 {
			m.closeSecond(st, st.top, st.scount)
		}
		st.top, st.scount = sec, 0
	}
	st.scount++
}

// closeSecond records the count of a finished second of st.
func (m *measurer) closeSecond(st *keyState, s int64, c uint32) {
	m.sums[st.sum].peakSec = max(m.sums[st.sum].peakSec, c)
	acc := m.acc[st.class]
	acc.hour(m.hourOf(s)).sec.add(c, 1)
	if min := s / 60; min != st.minute {
		m.closeMinute(st)
		st.minute = min
	}
	st.mcount += c
}

func (m *measurer) closeMinute(st *keyState) {
	if st.mcount > 0 {
		m.sums[st.sum].peakMin = max(m.sums[st.sum].peakMin, st.mcount)
		m.acc[st.class].hour(m.hourOf(st.minute*60)).min.add(st.mcount, 1)
	}
	st.mcount = 0
}

func (m *measurer) hourOf(s int64) int64 {
	if m.window <= 0 {
		return 0
	}
	return s / 3600
}

// close flushes every open count of st.
func (m *measurer) close(st *keyState) {
	if st.scount > 0 {
		m.closeSecond(st, st.top, st.scount)
		st.scount = 0
	}
	m.closeMinute(st)
}

// sweep drops the keys whose last minute is over (all of them when all is
// set, at the end of the log) and the hours that can no longer be in the
// window.
func (m *measurer) sweep(all bool) {
	for k, idx := range m.keys {
		st := &m.states[idx]
		if all || (st.top/60+1)*60 <= m.clock {
			m.close(st)
			delete(m.keys, k)
			m.free = append(m.free, idx)
			m.deleted++
		}
	}
	if m.deleted > 4*len(m.keys)+4096 {
		// a map that has seen many deletions probes slowly: start afresh
		fresh := make(map[uint64]int32, len(m.keys))
		for k, v := range m.keys {
			fresh[k] = v
		}
		m.keys, m.deleted = fresh, 0
	}
	if len(m.keys) == 0 {
		m.states, m.free = m.states[:0], m.free[:0]
	}
	if m.window > 0 {
		first := m.windowStart() / 3600
		for _, acc := range m.acc {
			for h := range acc.hours {
				if h < first {
					delete(acc.hours, h)
					if acc.lastHour == h {
						acc.last = nil
					}
				}
			}
		}
	}
}

// windowStart is the first second of the window: the end of the log less
// the window, rounded down to a whole hour (0 for the whole log).
func (m *measurer) windowStart() int64 {
	if m.fixed {
		return m.start
	}
	if m.window <= 0 || m.maxSec < 0 {
		return 0
	}
	s := m.maxSec - m.window
	return s - ((s%3600)+3600)%3600
}

// result merges the hours of the window into one histogram per class.
func (m *measurer) result() (sec, min []hist) {
	m.ro.flush()
	m.sweep(true)
	first := m.windowStart() / 3600
	sec, min = make([]hist, len(m.acc)), make([]hist, len(m.acc))
	for c, acc := range m.acc {
		for h, hh := range acc.hours {
			if m.window <= 0 || h >= first {
				sec[c].merge(&hh.sec)
				min[c].merge(&hh.min)
			}
		}
	}
	return sec, min
}
