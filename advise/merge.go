package advise

import (
	"bufio"
	"bytes"
	"errors"
	"io"
)

// Files whose times overlap (two servers' logs of the same days, a
// rotation that overlaps the next file) cannot be read one after the
// other within any reorder window: the second file starts hours behind
// the end of the first. When the first reading found such segments
// (segmenter.plan), the passes after it read them at once and merge their
// lines by time: a k-way merge that always takes the line of the earliest
// time among the segments' next lines. A segment is out of order by at
// most its own lag (its lines come at most that far behind the newest
// before them), so the merged lines are too, and the reorder window
// absorbs them: no line is late. A line without a time (malformed) goes
// with the line before it in its segment.

// mergeStream is one segment being merged: its next line and that line's
// time.
type mergeStream struct {
	r     *bufio.Reader
	close func()
	line  []byte // the next line, with its newline; nil at the end
	time  int64  // its time, µs: its own, or that of the line before it
}

// mergeReader yields the lines of several segments in time order.
type mergeReader struct {
	streams []*mergeStream
	p       *parser
	e       entry
	buf     []byte // the line being read out
	out     []byte // what is left of it
}

// merge opens parts and returns their lines merged by time.
func (pl *pipeline) merge(parts []source) (*mergeReader, error) {
	mr := &mergeReader{p: newParser(pl.fields)}
	for _, src := range parts {
		r, closeFn, err := pl.open(src)
		if err != nil {
			mr.close()
			return nil, err
		}
		st := &mergeStream{r: bufio.NewReaderSize(r, 64<<10), close: closeFn, time: -1 << 62}
		mr.streams = append(mr.streams, st)
		mr.next(st)
	}
	return mr, nil
}

func (mr *mergeReader) close() {
	for _, st := range mr.streams {
		st.close()
	}
}

// next reads the next line of st and its time. A line longer than
// maxLine is passed on cut to maxLine+1 bytes (the reader counts it as
// one malformed line) and the rest of it dropped; a read error ends the
// segment, as the first reading reported.
func (mr *mergeReader) next(st *mergeStream) {
	st.line = st.line[:0]
	for {
		frag, err := st.r.ReadSlice('\n')
		if len(st.line) <= maxLine {
			st.line = append(st.line, frag[:min(len(frag), maxLine+1-len(st.line))]...)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil && len(st.line) == 0 {
			st.line = nil
			return
		}
		break
	}
	if st.line[len(st.line)-1] != '\n' {
		st.line = append(st.line, '\n') // the last line, or a cut one
	}
	if mr.p.parse(bytes.TrimRight(st.line, "\r\n"), &mr.e) == nil {
		st.time = mr.e.time
	}
}

// Read fills b with whole lines, earliest first.
func (mr *mergeReader) Read(b []byte) (int, error) {
	n := 0
	for n < len(b) {
		if len(mr.out) == 0 {
			var first *mergeStream
			for _, st := range mr.streams {
				if st.line != nil && (first == nil || st.time < first.time) {
					first = st
				}
			}
			if first == nil {
				break
			}
			mr.buf = append(mr.buf[:0], first.line...)
			mr.out = mr.buf
			mr.next(first)
		}
		c := copy(b[n:], mr.out)
		n += c
		mr.out = mr.out[c:]
	}
	if n == 0 {
		return 0, io.EOF
	}
	return n, nil
}
