package advise

import (
	"bytes"
	"cmp"
	"slices"
)

// Order does not matter. Servers log a request when it ends, log files
// are shuffled within a minute, and `zcat access.log*` pipes the newest
// rotated file first; yet the same lines in any order must give the same
// report. Two mechanisms see to it.
//
// A reorder window: the counting sees records in time order, because
// every record waits in a buffer of the last W seconds (W being the
// reorder window) and is released once the newest second seen is more
// than W seconds past it. A line at most W seconds older than the newest
// line seen so far is counted in its own second; an older one is late: it
// is counted in the oldest second still open, and the report says how
// many there were. Within a second, records are released in the order of
// (time, pattern hash, key hash), so that even the order in which new
// endpoints are registered does not depend on the input's order.
//
// A second look: while measuring, the advisor cuts each input into
// segments, a new one wherever a line is more than maxReorder older than
// the newest line of the segment so far (where one rotated file ends and
// an older one begins), and notes each segment's time span and its own
// disorder. When lines were late it measures again (standard input from
// its spool), reading the segments oldest first with a window wide enough
// for every line of them (up to maxReorder); segments whose times overlap
// (two servers' logs) are read at once, their lines merged by time
// (merge.go).

// defaultReorder is the stated reorder window, in seconds: a log
// shuffled within each minute is up to 59 s out of order.
const defaultReorder = 60

// maxReorder is the widest reorder window the advisor opens for files,
// in seconds: the buffer holds this much traffic at most.
const maxReorder = 15 * 60

// maxSegments bounds the segments noted per run; a log cut into more
// pieces than this is not re-read (its late lines are reported).
const maxSegments = 4096

// item is a record waiting in the reorder buffer. Its bytes (the pattern,
// when its endpoint is not yet known, and the key, for the replay) live
// in the arena of its slot.
type item struct {
	time             int64
	patHash, keyHash uint64
	policy           int32 // endpoint, or -1 when pat must be registered
	auth             bool
	status           uint16
	pat, key         span
}

// slotBuf holds the records of one second.
type slotBuf struct {
	sec   int64
	items []item
	arena []byte
}

func (s *slotBuf) bytes(sp span) []byte { return s.arena[sp.off : sp.off+sp.n] }

// reorder releases records in time order, holding the last window seconds.
type reorder struct {
	window  int64
	ring    []slotBuf // a power of two longer than window
	lo      int64     // the oldest second not yet released
	hi      int64     // the newest second seen
	started bool
	late    int64
	lateBy  []int64 // late, by input file
	keepKey bool    // copy keys (the replay needs them)
	release func(s *slotBuf)
}

func newReorder(window int64, keepKey bool, release func(*slotBuf)) *reorder {
	n := int64(1)
	for n <= window {
		n *= 2
	}
	return &reorder{window: window, ring: make([]slotBuf, n), keepKey: keepKey, release: release}
}

// add buffers r of b, whose endpoint is ep (-1 when not yet registered),
// and releases the seconds the window has passed.
func (ro *reorder) add(b *batch, r *rec, ep int32) {
	sec := floorSec(r.time)
	t := r.time
	if !ro.started {
		ro.lo, ro.hi, ro.started = sec-ro.window, sec, true
	}
	if sec > ro.hi {
		ro.hi = sec
		ro.releaseBefore(sec - ro.window)
	}
	if sec < ro.lo {
		ro.late++
		if b.file >= len(ro.lateBy) {
			ro.lateBy = append(ro.lateBy, make([]int64, b.file+1-len(ro.lateBy))...)
		}
		ro.lateBy[b.file]++
		sec, t = ro.lo, ro.lo*1e6
	}
	s := &ro.ring[sec&int64(len(ro.ring)-1)]
	if len(s.items) == 0 {
		s.sec, s.arena = sec, s.arena[:0]
	}
	it := item{time: t, patHash: r.patHash, keyHash: r.keyHash, policy: ep, auth: r.auth, status: r.status}
	if ep < 0 && r.policy < 0 {
		off := len(s.arena)
		s.arena = append(s.arena, b.bytes(r.pat)...)
		it.pat = span{uint32(off), r.pat.n}
	}
	if ro.keepKey {
		off := len(s.arena)
		s.arena = append(s.arena, b.bytes(r.key)...)
		it.key = span{uint32(off), r.key.n}
	}
	s.items = append(s.items, it)
}

// releaseBefore releases every second before end, oldest first.
func (ro *reorder) releaseBefore(end int64) {
	if end <= ro.lo {
		return
	}
	last := min(end, ro.lo+int64(len(ro.ring)))
	for sec := ro.lo; sec < last; sec++ {
		s := &ro.ring[sec&int64(len(ro.ring)-1)]
		if len(s.items) > 0 && s.sec == sec {
			ro.emit(s)
		}
	}
	ro.lo = end
}

func (ro *reorder) emit(s *slotBuf) {
	slices.SortFunc(s.items, func(a, b item) int {
		if c := cmp.Compare(a.time, b.time); c != 0 {
			return c
		}
		if c := cmp.Compare(a.patHash, b.patHash); c != 0 {
			return c
		}
		if c := cmp.Compare(a.keyHash, b.keyHash); c != 0 {
			return c
		}
		return bytes.Compare(s.bytes(a.key), s.bytes(b.key))
	})
	ro.release(s)
	s.items = s.items[:0]
	s.arena = s.arena[:0]
	if cap(s.items) > 1<<16 {
		// a flood's second keeps no memory once it is gone
		s.items, s.arena = nil, nil
	}
}

// flush releases everything still buffered.
func (ro *reorder) flush() {
	if ro.started {
		ro.releaseBefore(ro.hi + 1)
	}
}

// floorSec is the whole second of a time in µs, rounding down.
func floorSec(us int64) int64 {
	s := us / 1e6
	if us < 0 && s*1e6 != us {
		s--
	}
	return s
}

// segment is a stretch of one input whose lines are within maxReorder of
// the newest line before them in the stretch.
type segment struct {
	file       int
	start, end int64 // byte offsets of the decompressed input; end -1: to its end
	min, max   int64 // seconds
	lag        int64 // how far behind the stretch's newest line a line came, at most
}

// segmenter notes the segments of the inputs as they are read.
type segmenter struct {
	segs     []segment
	overflow bool
	maxLag   int64 // the most a line was behind the newest line before it, over all inputs
	newest   int64
	any      bool
}

func (sg *segmenter) note(file int, off int64, sec int64) {
	if !sg.any || sec > sg.newest {
		sg.newest, sg.any = sec, true
	}
	sg.maxLag = max(sg.maxLag, sg.newest-sec)
	if sg.overflow {
		return
	}
	n := len(sg.segs)
	if n > 0 {
		cur := &sg.segs[n-1]
		if cur.file == file && sec >= cur.max-maxReorder {
			cur.min = min(cur.min, sec)
			if sec > cur.max {
				cur.max = sec
			}
			cur.lag = max(cur.lag, cur.max-sec)
			return
		}
		if cur.file == file {
			cur.end = off
		}
	}
	if n == maxSegments {
		sg.overflow = true
		return
	}
	if n == 0 || sg.segs[n-1].file != file {
		off = 0 // a new input: from its first byte
	}
	sg.segs = append(sg.segs, segment{file: file, start: off, end: -1, min: sec, max: sec})
}

// plan orders the segments oldest first, in groups read one after the
// other, and returns them with the reorder window that absorbs every line
// read so; ok is false when no window up to maxReorder does. Segments
// whose times overlap by more than defaultReorder (files of two servers,
// or rotated files that overlap) are one group, read at once and merged
// by time (merge.go): merged, they are out of order by no more than the
// most out of order of them.
func (sg *segmenter) plan() (groups [][]segment, window int64, ok bool) {
	if sg.overflow || len(sg.segs) == 0 {
		return nil, 0, false
	}
	segs := slices.Clone(sg.segs)
	slices.SortStableFunc(segs, func(a, b segment) int { return cmp.Compare(a.min, b.min) })
	newest := segs[0].min
	for i, s := range segs {
		window = max(window, s.lag)
		if i > 0 && s.min < newest-defaultReorder {
			groups[len(groups)-1] = append(groups[len(groups)-1], s)
		} else {
			window = max(window, newest-s.min)
			groups = append(groups, []segment{s})
		}
		newest = max(newest, s.max)
	}
	window = max(window, defaultReorder)
	return groups, window, window <= maxReorder
}
