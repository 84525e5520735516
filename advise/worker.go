package advise

import (
	"bytes"
	"hash/maphash"
)

// maxKeyLen bounds a caller key; longer user fields are cut.
const maxKeyLen = 200

// lineWorker parses the lines of batches; one per parsing goroutine.
type lineWorker struct {
	p     *parser
	m     *policyMatcher // nil: classes from the paths
	names []string       // source names, for malformed-line examples
	seed  maphash.Seed
	e     entry
}

func (w *lineWorker) do(b *batch) {
	b.arena, b.recs, b.bad = b.arena[:0], b.recs[:0], b.bad[:0]
	b.lines, b.malformed = b.long, b.long
	if b.long > 0 {
		b.bad = append(b.bad, MalformedLine{File: w.names[b.file], Line: b.firstLine - 1, Reason: "line longer than 1 MiB"})
	}
	data, ln := b.data, b.firstLine
	for len(data) > 0 {
		var line []byte
		if nl := bytes.IndexByte(data, '\n'); nl >= 0 {
			line, data = data[:nl], data[nl+1:]
		} else {
			line, data = data, nil
		}
		ln++
		err := w.p.parse(line, &w.e)
		if err == errEmpty {
			continue
		}
		b.lines++
		if err != nil {
			b.malformed++
			if len(b.bad) < maxBadKept {
				text := line
				if len(text) > 200 {
					text = text[:200]
				}
				b.bad = append(b.bad, MalformedLine{File: w.names[b.file], Line: ln - 1, Reason: err.Error(), Text: string(text)})
			}
			continue
		}
		e := &w.e
		r := rec{time: e.time, policy: -1}
		if w.m != nil {
			r.policy = w.m.match(e.method, e.path)
		} else {
			off := len(b.arena)
			b.arena = appendPattern(b.arena, e.method, e.path)
			r.pat = span{uint32(off), uint32(len(b.arena) - off)}
			r.patHash = maphash.Bytes(w.seed, b.arena[off:])
		}
		off := len(b.arena)
		b.arena, r.auth = appendKey(b.arena, e)
		if len(b.arena)-off > maxKeyLen {
			b.arena = b.arena[:off+maxKeyLen]
		}
		r.key = span{uint32(off), uint32(len(b.arena) - off)}
		r.keyHash = maphash.Bytes(w.seed, b.arena[off:])
		b.recs = append(b.recs, r)
	}
}
