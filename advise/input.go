package advise

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// chunkSize is how much raw log one batch carries: big enough that the
// per-batch costs vanish, small enough that a few in flight cost little.
const chunkSize = 1 << 20

// maxLine is the longest line read; longer ones are malformed.
const maxLine = chunkSize

// source is one input: a file, or standard input ("-").
type source struct {
	name  string
	file  int   // index of the input among the run's names (a segment keeps its file's)
	size  int64 // bytes on disk, 0 when unknown
	first int64 // timestamp of the first parseable line, for ordering
	// start and end delimit the part read, in bytes of the decompressed
	// input; end -1 reads to the end (a segment, see reorder.go)
	start, end int64
	// parts, when set, are segments whose times overlap, read at once
	// and merged in time order (merge.go); file is the first's
	parts []source
}

// span locates bytes in a batch's arena.
type span struct{ off, n uint32 }

// rec is one parsed line.
type rec struct {
	time   int64  // Unix µs
	policy int32  // with --config: the policy's index, -1 for none
	off    uint32 // of the line in its batch's data
	pat    span   // without --config: the endpoint pattern
	key    span
	auth   bool
	status uint16 // 0 when the log has none
	// hashes of the pattern and the key, computed by the parsing
	// goroutines so that the single counting goroutine looks up integers
	patHash, keyHash uint64
}

// MalformedLine is a malformed line kept as an example: where, why, and its first 200 bytes.
type MalformedLine struct {
	File   string `json:"file"`
	Line   int64  `json:"line"`
	Reason string `json:"reason"`
	Text   string `json:"text"`
}

// batch is a chunk of raw log and what its lines parsed into.
type batch struct {
	buf       []byte // owns the memory; data is the whole lines in it
	data      []byte
	file      int
	off       int64 // of data in its input, decompressed
	long      int64 // lines dropped for being longer than a chunk
	firstLine int64 // line number of the chunk's first line in its file
	endOfFile bool  // the last batch of its file

	arena     []byte
	recs      []rec
	lines     int64
	malformed int64
	bad       []MalformedLine
	done      chan struct{}
}

func (b *batch) bytes(s span) []byte { return b.arena[s.off : s.off+s.n] }

// maxBadKept is how many malformed lines a run keeps as examples.
const maxBadKept = 5

// progress counts what the readers have done, for the progress line.
type progress struct {
	bytes atomic.Int64
	lines atomic.Int64
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	p *progress
}

func (c countingReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.p.bytes.Add(int64(n))
	return n, err
}

// expandInputs turns arguments (files, globs, "-") into sources, sorted
// by the time of their first line so that rotated logs (access.log.2.gz,
// access.log.1, access.log) are read oldest first.
func expandInputs(args []string) ([]source, error) {
	var out []source
	stdin := false
	for _, a := range args {
		if a == "-" {
			if stdin {
				return nil, errors.New(`standard input ("-") given twice`)
			}
			stdin = true
			out = append(out, source{name: "-", end: -1})
			continue
		}
		names := []string{a}
		if strings.ContainsAny(a, "*?[") {
			m, err := filepath.Glob(a)
			if err != nil {
				return nil, fmt.Errorf("glob %q: %w", a, err)
			}
			if len(m) == 0 {
				return nil, fmt.Errorf("glob %q matches no file", a)
			}
			names = m
		}
		for _, n := range names {
			st, err := os.Stat(n)
			if err != nil {
				return nil, err
			}
			if st.IsDir() {
				return nil, fmt.Errorf("%s is a directory: want log files", n)
			}
			if !st.Mode().IsRegular() {
				// A pipe (<(zcat …)) or a FIFO reads once: the passes after
				// the first found it empty and proposed "no traffic" for
				// every policy, or waited for a writer that never came.
				return nil, fmt.Errorf("%s is not a regular file (a pipe?), and the advisor reads its inputs more than once: give it as standard input (… | sluice advise -), which is spooled, or as a file", n)
			}
			out = append(out, source{name: n, size: st.Size(), end: -1})
		}
	}
	if len(out) > 1 {
		p := newParser(nil)
		for i := range out {
			if out[i].name != "-" {
				out[i].first = firstTime(out[i].name, p)
			}
		}
		slices.SortStableFunc(out, func(a, b source) int {
			switch {
			case a.first == b.first:
				return 0
			case a.first == 0:
				return 1
			case b.first == 0:
				return -1
			case a.first < b.first:
				return -1
			}
			return 1
		})
	}
	return out, nil
}

// firstTime is the timestamp of the first parseable line among the first
// lines of a file, or 0.
func firstTime(name string, p *parser) int64 {
	f, err := os.Open(name)
	if err != nil {
		return 0
	}
	defer f.Close()
	r, err := decompress(bufio.NewReaderSize(f, 64<<10))
	if err != nil {
		return 0
	}
	sc := bufio.NewScanner(io.LimitReader(r, 1<<20))
	sc.Buffer(make([]byte, 64<<10), maxLine)
	var e entry
	for n := 0; sc.Scan() && n < 1000; n++ {
		if p.parse(sc.Bytes(), &e) == nil {
			return e.time
		}
	}
	return 0
}

// isGzip reports whether f starts with the gzip magic number, and leaves
// f where it was.
func isGzip(f *os.File) bool {
	var magic [2]byte
	n, _ := f.ReadAt(magic[:], 0)
	return n == 2 && magic[0] == 0x1f && magic[1] == 0x8b
}

// decompress returns r, or a gzip reader of it when it starts with the
// gzip magic number, whatever the file is called.
func decompress(r *bufio.Reader) (io.Reader, error) {
	magic, err := r.Peek(2)
	if err == nil && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(r)
		if err != nil {
			return nil, err
		}
		return gzipCut{zr}, nil
	}
	return r, nil
}

// errGzipCut is a gzip stream that ends before its end.
var errGzipCut = errors.New("gzip stream cut short")

// gzipCut tells a gzip stream cut short from the end of the input: the
// lines before the cut are read, and the run says the input ended early.
type gzipCut struct{ r io.Reader }

func (g gzipCut) Read(b []byte) (int, error) {
	n, err := g.r.Read(b)
	if err == io.ErrUnexpectedEOF {
		err = errGzipCut
	}
	return n, err
}

// pipeline reads sources in order and parses their lines on all CPUs,
// delivering batches in input order to fn. The reader, the parsers and fn
// run concurrently; memory is bounded by the batches in flight.
type pipeline struct {
	sources []source
	stdin   io.Reader
	spool   *os.File // pass 1 copies standard input here for the replay
	newWork func() func(b *batch)
	prog    *progress
	fields  map[fieldKind][]string // the field names of the log, to read times when merging

	mu       sync.Mutex
	warnings []string // inputs that ended early, read up to the damage
}

func (pl *pipeline) run(fn func(b *batch) error) error {
	workers := max(runtime.GOMAXPROCS(0), 1)
	inFlight := 2*workers + 2
	free := make(chan *batch, inFlight)
	for range inFlight {
		free <- &batch{buf: make([]byte, 0, chunkSize), done: make(chan struct{}, 1)}
	}
	work := make(chan *batch, inFlight)
	ordered := make(chan *batch, inFlight)
	var readErr error
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range workers {
		parse := pl.newWork()
		wg.Go(func() {
			for b := range work {
				parse(b)
				b.done <- struct{}{}
			}
		})
	}
	go func() {
		defer close(ordered)
		defer close(work)
		readErr = pl.read(free, work, ordered, stop)
	}()
	var fnErr error
	for b := range ordered {
		<-b.done
		if fnErr == nil {
			fnErr = fn(b)
			if fnErr != nil {
				close(stop)
			}
		}
		free <- b
	}
	wg.Wait()
	if fnErr != nil {
		return fnErr
	}
	return readErr
}

// read cuts the sources into batches of whole lines.
func (pl *pipeline) read(free, work, ordered chan *batch, stop chan struct{}) error {
	for _, src := range pl.sources {
		if err := pl.readSource(src, free, work, ordered, stop); err != nil {
			return err
		}
	}
	return nil
}

// open returns the decompressed bytes of src from its start to its end,
// counted in the progress, and what closes it.
func (pl *pipeline) open(src source) (io.Reader, func(), error) {
	var in io.Reader
	closeFn := func() {}
	skip := src.start // bytes to decompress and drop before the segment
	if src.name == "-" {
		in = pl.stdin
		if pl.spool != nil {
			in = io.TeeReader(in, pl.spool)
		}
	} else {
		f, err := os.Open(src.name)
		if err != nil {
			return nil, nil, err
		}
		closeFn = func() { f.Close() }
		in = f
		if skip > 0 && !isGzip(f) {
			in, skip = io.NewSectionReader(f, skip, 1<<62), 0
		}
	}
	br := bufio.NewReaderSize(countingReader{in, pl.prog}, 256<<10)
	r, err := decompress(br)
	if err != nil {
		closeFn()
		return nil, nil, fmt.Errorf("%s: %w", src.name, err)
	}
	if skip > 0 {
		// a segment of a gzip input: decompress up to it
		if _, err := io.CopyN(io.Discard, r, skip); err != nil {
			closeFn()
			return nil, nil, fmt.Errorf("%s: %w", src.name, err)
		}
	}
	if src.end >= 0 {
		r = io.LimitReader(r, src.end-src.start)
	}
	return r, closeFn, nil
}

func (pl *pipeline) readSource(src source, free, work, ordered chan *batch, stop chan struct{}) error {
	var r io.Reader
	if len(src.parts) > 0 {
		// inputs whose times overlap, read at once (merge.go)
		mr, err := pl.merge(src.parts)
		if err != nil {
			return err
		}
		defer mr.close()
		r = mr
	} else {
		in, closeFn, err := pl.open(src)
		if err != nil {
			return err
		}
		defer closeFn()
		r = in
	}
	pos := src.start // of the next byte read from r
	carry := make([]byte, 0, chunkSize)
	line := int64(1)
	skipping := false // inside a line longer than a chunk
	for {
		var b *batch
		select {
		case b = <-free:
		case <-stop:
			return nil
		}
		b.buf = append(b.buf[:0], carry...)
		b.off = pos - int64(len(carry))
		n, err := io.ReadFull(r, b.buf[len(b.buf):chunkSize])
		b.buf = b.buf[:len(b.buf)+n]
		pos += int64(n)
		eof := err == io.EOF || err == io.ErrUnexpectedEOF
		if err != nil && !eof {
			// A damaged file (a gzip checksum, a read error) keeps what was
			// read before the damage; the run goes on with a warning.
			pl.mu.Lock()
			pl.warnings = append(pl.warnings, fmt.Sprintf("%s: %v after line %d: the rest of this input is skipped", src.name, err, line))
			pl.mu.Unlock()
			eof = true
		}
		b.file, b.endOfFile, b.long = src.file, eof, 0
		data := b.buf
		carry = carry[:0]
		if skipping {
			if nl := bytes.IndexByte(data, '\n'); nl >= 0 {
				data, skipping = data[nl+1:], false
				b.off += int64(nl + 1)
				line++
			} else {
				data = data[:0]
			}
		}
		b.firstLine = line
		if !eof {
			switch cut := bytes.LastIndexByte(data, '\n'); {
			case cut >= 0:
				carry = append(carry, data[cut+1:]...)
				data = data[:cut+1]
			case len(data) == len(b.buf):
				// one line fills the whole chunk: malformed, skipped to its end
				b.long, skipping = 1, true
				data = data[:0]
			default:
				carry = append(carry, data...)
				data = data[:0]
			}
		}
		b.data = data
		line += int64(bytes.Count(data, []byte{'\n'}))
		work <- b
		ordered <- b
		if eof {
			return nil
		}
	}
}
