package envoyrls_test

import (
	"encoding/binary"
	"net"
	"strconv"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/internal/envoyrls"
)

// TestFixedWindowsNoBandwidthPings holds the listener's flow control
// (docs/envoy.md, "Bounds of the listener"): fixed windows, a stream's
// 64 KiB and the connection's 1 MiB, and no PING frames of gRPC's
// bandwidth estimator. gRPC's default answers the first DATA frame of a
// connection with no ping outstanding with a window update and a PING,
// which the client acknowledges: on a connection whose calls come one
// at a time, as Envoy's sidecars send them, that was a write and a read
// more for every call (BENCHMARKS.md, "6 December 2026 (fourth session)").
//
// The client here is HTTP/2 frames on a socket, so that every frame the
// server sends is seen; it acknowledges every PING, as Envoy does, so
// that an estimator would ping again on the next call.
func TestFixedWindowsNoBandwidthPings(t *testing.T) {
	s := serve(t, "", map[string]string{"bench.yaml": benchDomain})
	c, err := net.Dial("tcp", s.g.RLSAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(30 * time.Second)); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if _, err := c.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	block := callHeaders(t)
	var (
		pings       int
		streamWin   = uint32(65535) // RFC 9113's initial window until SETTINGS says otherwise
		connWinSent uint32          // WINDOW_UPDATE increments of the connection
	)
	const calls = 10
	for i := range calls {
		id := uint32(2*i + 1)
		msg, err := proto.Marshal(&rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("user", "u"+strconv.Itoa(i))}})
		if err != nil {
			t.Fatal(err)
		}
		body := make([]byte, 5+len(msg)) // gRPC's frame: uncompressed, then the length
		binary.BigEndian.PutUint32(body[1:], uint32(len(msg)))
		copy(body[5:], msg)
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block, EndHeaders: true}); err != nil {
			t.Fatal(err)
		}
		if err := fr.WriteData(id, true, body); err != nil {
			t.Fatal(err)
		}
		grpcStatus := ""
		for grpcStatus == "" {
			f, err := fr.ReadFrame()
			if err != nil {
				t.Fatalf("call %d: %v", i, err)
			}
			switch f := f.(type) {
			case *http2.SettingsFrame:
				if f.IsAck() {
					continue
				}
				if v, ok := f.Value(http2.SettingInitialWindowSize); ok {
					streamWin = v
				}
				if err := fr.WriteSettingsAck(); err != nil {
					t.Fatal(err)
				}
			case *http2.PingFrame:
				if f.IsAck() {
					continue
				}
				pings++
				if err := fr.WritePing(true, f.Data); err != nil {
					t.Fatal(err)
				}
			case *http2.WindowUpdateFrame:
				if f.StreamID == 0 {
					connWinSent += f.Increment
				}
			case *http2.RSTStreamFrame:
				t.Fatalf("call %d: reset %v", i, f.ErrCode)
			case *http2.MetaHeadersFrame:
				if f.StreamEnded() {
					grpcStatus = value(f, "grpc-status")
					if grpcStatus != "0" {
						t.Fatalf("call %d: grpc-status %q %q", i, grpcStatus, value(f, "grpc-message"))
					}
				}
			}
		}
	}
	if pings != 0 {
		t.Errorf("the server sent %d PING frames over %d calls, want none (a bandwidth estimator's)", pings, calls)
	}
	if streamWin != envoyrls.StreamWindow {
		t.Errorf("SETTINGS_INITIAL_WINDOW_SIZE %d, want %d", streamWin, envoyrls.StreamWindow)
	}
	if got := 65535 + connWinSent; got < envoyrls.ConnWindow {
		t.Errorf("the connection's window reached %d bytes, want at least %d", got, envoyrls.ConnWindow)
	}
}
