package advise

import (
	"bytes"
	"encoding/binary"
	"math/bits"
)

// maxKeyLen bounds a caller key; longer user fields are cut.
const maxKeyLen = 200

// lineWorker parses the lines of batches; one per parsing goroutine.
type lineWorker struct {
	p     *parser
	m     *policyMatcher // nil: classes from the paths
	group bool           // static assets get group patterns (group.go)
	names []string       // source names, for malformed-line examples
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
		lineOff := uint32(len(b.data) - len(data))
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
		r := rec{time: e.time, policy: -1, off: lineOff, status: uint16(e.status)}
		if e.refused {
			r.status |= statusRefused
		} else if excuse(e.status, e.path, line) {
			r.status |= statusExcused
		}
		if w.m != nil {
			r.policy = w.m.match(e.method, e.path)
		} else {
			off := len(b.arena)
			static := false
			if w.group {
				b.arena, static = appendStaticPattern(b.arena, e.method, e.path)
			}
			if !static {
				b.arena = appendPattern(b.arena, e.method, e.path)
			}
			r.pat = span{uint32(off), uint32(len(b.arena) - off)}
			r.patHash = hashBytes(b.arena[off:])
		}
		off := len(b.arena)
		b.arena, r.auth = appendKey(b.arena, e)
		if len(b.arena)-off > maxKeyLen {
			b.arena = b.arena[:off+maxKeyLen]
		}
		r.key = span{uint32(off), uint32(len(b.arena) - off)}
		r.keyHash = hashBytes(b.arena[off:])
		b.recs = append(b.recs, r)
	}
}

// hashBytes is a 64-bit hash of p, the same in every run, so that the
// distinct-key estimates and the order of records within a second (see
// reorder) do not change from run to run. Eight bytes at a time, each
// folded in by a 128-bit multiply, and a final mix so that every bit of
// the input reaches the top bits the HyperLogLog reads.
func hashBytes(p []byte) uint64 {
	const k0, k1 = 0xa0761d6478bd642f, 0xe7037ed1a0b428db
	h := uint64(len(p)) ^ k0
	for len(p) >= 8 {
		hi, lo := bits.Mul64(binary.LittleEndian.Uint64(p)^k1, h^k0)
		h = hi ^ lo
		p = p[8:]
	}
	if len(p) > 0 {
		var t uint64
		for i, c := range p {
			t |= uint64(c) << (8 * i)
		}
		hi, lo := bits.Mul64(t^k1, h^k0)
		h = hi ^ lo
	}
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	return h ^ h>>33
}
