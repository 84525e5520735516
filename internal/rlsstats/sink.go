package rlsstats

import (
	"bytes"
	"log/slog"
	"math"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/config"
)

// netSink writes the statsd lines of a flush to the statsd in the goroutine
// that flushes (Stats's flusher, Flush, Close), as gostats's statsd
// client writes them (NAME:VALUE|c, |g, |ms, one a line) but without a
// goroutine of its own: Close leaves nothing running, and when it
// returns its last flush is written, or failed within ioTimeout. A write
// that fails drops what it held (logged at debug level, as a statsd that
// is not there is no error of the service) and closes the connection;
// the next flush dials again.
type netSink struct {
	mu      sync.Mutex
	network string
	addr    string
	packet  int // the most one write holds
	buf     []byte
	conn    net.Conn
	closed  bool
	dropped uint64
	// timers are the timer lines kept for the next flush (FlushTimer).
	timers        []byte
	timersDropped int
	log           *slog.Logger
}

const (
	// udpPacket keeps a datagram within a 1500-byte MTU, as gostats does.
	udpPacket = 1432
	// tcpChunk is the most one TCP write holds.
	tcpChunk = 64 << 10
	// ioTimeout bounds a dial and a write, so that a statsd that does not
	// answer holds neither a flush nor the process's stop for long.
	ioTimeout = time.Second
)

func newSink(network, addr string, log *slog.Logger) *netSink {
	s := &netSink{network: network, addr: addr, packet: tcpChunk, log: log}
	if network == "udp" || network == "udp4" || network == "udp6" {
		s.packet = udpPacket
	}
	s.buf = make([]byte, 0, s.packet)
	return s
}

func (s *netSink) FlushCounter(name string, value uint64) { s.add(name, value, 0, false, "|c\n") }
func (s *netSink) FlushGauge(name string, value uint64)   { s.add(name, value, 0, false, "|g\n") }

// FlushTimer keeps a timer's line for the next flush: gostats calls it
// as each call ends, and a call must never wait for the statsd (a dial or
// a write). Past maxTimerBytes kept, a line is dropped.
func (s *netSink) FlushTimer(name string, value float64) { s.addTimer(name, value, "|ms\n") }

// addTimer keeps a timer's line, name:value then suffix, for the next
// flush (FlushTimer).
func (s *netSink) addTimer(name string, value float64, suffix string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	if len(s.timers)+len(name)+32+len(suffix) > maxTimerBytes {
		s.timersDropped++
		return
	}
	s.timers = append(append(s.timers, name...), ':')
	if value >= 0 && value < math.MaxUint64 && math.Trunc(value) == value {
		s.timers = strconv.AppendUint(s.timers, uint64(value), 10)
	} else {
		s.timers = strconv.AppendFloat(s.timers, value, 'f', -1, 64)
	}
	s.timers = append(s.timers, suffix...)
}

// maxTimerBytes bounds the timer lines kept between two flushes: some
// 80,000 calls' at upstream's names.
const maxTimerBytes = 4 << 20

// moveTimers adds the timer lines kept to the lines to send, a packet
// at a time. s.mu is held.
func (s *netSink) moveTimers() {
	rest := s.timers
	for len(rest) > 0 {
		i := bytes.IndexByte(rest, '\n') + 1
		if len(s.buf) > 0 && len(s.buf)+i > s.packet {
			s.send()
		}
		s.buf = append(s.buf, rest[:i]...)
		rest = rest[i:]
	}
	s.timers = s.timers[:0]
	if s.timersDropped > 0 {
		s.log.Debug("statsd: dropped timer lines past the bound between flushes", "lines", s.timersDropped)
		s.timersDropped = 0
	}
}

// add appends one line, NAME:VALUE SUFFIX, the value u, or f when isFloat
// (a timer that is no whole number).
func (s *netSink) add(name string, u uint64, f float64, isFloat bool, suffix string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	if n := len(name) + 1 + 24 + len(suffix); len(s.buf) > 0 && len(s.buf)+n > s.packet {
		s.send()
	}
	s.buf = append(append(s.buf, name...), ':')
	if isFloat {
		s.buf = strconv.AppendFloat(s.buf, f, 'f', -1, 64)
	} else {
		s.buf = strconv.AppendUint(s.buf, u, 10)
	}
	s.buf = append(s.buf, suffix...)
}

// Flush writes what the lines added since the last write hold, the
// timers' too.
func (s *netSink) Flush() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.moveTimers()
	s.send()
}

// Close writes what is left and closes the connection; later lines are
// dropped.
func (s *netSink) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.moveTimers()
	s.send()
	s.closed = true
	if s.conn != nil {
		_ = s.conn.Close()
		s.conn = nil
	}
}

// send writes buf, dialling first when there is no connection. s.mu is
// held.
func (s *netSink) send() {
	if len(s.buf) == 0 {
		return
	}
	defer func() { s.buf = s.buf[:0] }()
	if s.conn == nil {
		c, err := net.DialTimeout(s.network, s.addr, ioTimeout)
		if err != nil {
			s.drop(err)
			return
		}
		s.conn = c
	}
	_ = s.conn.SetWriteDeadline(time.Now().Add(ioTimeout))
	if _, err := s.conn.Write(s.buf); err != nil {
		_ = s.conn.Close()
		s.conn = nil
		s.drop(err)
	}
}

func (s *netSink) drop(err error) {
	s.dropped += uint64(len(s.buf))
	s.log.Debug("statsd: dropped stats", "bytes", len(s.buf), "dropped_total", s.dropped, "addr", s.addr, "err", err)
}

// dogSink writes the lines as DogStatsD (USE_DOG_STATSD), as
// envoyproxy/ratelimit's DogStatsD sink does: the tags that gostats puts
// in a name (NAME.__KEY=VALUE…, EXTRA_TAGS) go as tags, then the first
// mogrifier whose pattern matches the name renames it and adds its tags:
// NAME:VALUE|c|#KEY:VALUE,….
type dogSink struct {
	*netSink
	mogrifiers []config.Mogrifier
}

func (d *dogSink) FlushCounter(name string, value uint64) {
	name, suffix := d.tagged(name, "|c")
	d.add(name, value, 0, false, suffix)
}

func (d *dogSink) FlushGauge(name string, value uint64) {
	name, suffix := d.tagged(name, "|g")
	d.add(name, value, 0, false, suffix)
}

// FlushTimer keeps the line for the next flush, as netSink's: a call
// never waits for the statsd.
func (d *dogSink) FlushTimer(name string, value float64) {
	name, suffix := d.tagged(name, "|ms")
	d.addTimer(name, value, suffix)
}

// tagged returns the name to send and the line's end: kind, then the tags.
func (d *dogSink) tagged(name, kind string) (string, string) {
	var tags []string
	if short, rest, ok := strings.Cut(name, ".__"); ok {
		name = short
		for _, pair := range strings.Split(rest, ".__") {
			if k, v, ok := strings.Cut(pair, "="); ok {
				tags = append(tags, k+":"+v)
			}
		}
	}
	name, more := config.Mogrify(d.mogrifiers, name)
	tags = append(tags, more...)
	if len(tags) == 0 {
		return name, kind + "\n"
	}
	return name, kind + "|#" + strings.Join(tags, ",") + "\n"
}
