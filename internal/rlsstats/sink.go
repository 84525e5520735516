package rlsstats

import (
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
	log     *slog.Logger
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

func (s *netSink) FlushTimer(name string, value float64) {
	if value >= 0 && value < math.MaxUint64 && math.Trunc(value) == value {
		s.add(name, uint64(value), 0, false, "|ms\n")
		return
	}
	s.add(name, 0, value, true, "|ms\n")
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

// Flush writes what the lines added since the last write hold.
func (s *netSink) Flush() {
	s.mu.Lock()
	defer s.mu.Unlock()
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

func (d *dogSink) FlushTimer(name string, value float64) {
	name, suffix := d.tagged(name, "|ms")
	d.add(name, 0, value, true, suffix)
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
