package redistest

import (
	"fmt"
	"os"
	"slices"
	"testing"
)

// StartMain starts a standalone redis-server from a TestMain, where no
// testing.TB exists yet: for Example functions, which read its address
// from a package variable that TestMain sets. Call stop after m.Run; it
// kills the server and removes its directory. The server's methods that
// would fail a test panic instead.
func StartMain(opts ...Option) (s *Server, stop func(), err error) {
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	tb := &mainTB{}
	stop = tb.cleanup
	if s, err = newServer(tb, cfg); err != nil {
		stop()
		return nil, nil, err
	}
	return s, stop, nil
}

// mainTB is the testing.TB of StartMain: what newServer and Server use of
// one (Helper, TempDir, Cleanup, the reports). The embedded nil TB stands
// for the methods it never calls.
type mainTB struct {
	testing.TB
	cleanups []func()
}

func (*mainTB) Helper() {}

func (m *mainTB) TempDir() string {
	dir, err := os.MkdirTemp("", "redistest-")
	if err != nil {
		panic(err)
	}
	m.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func (m *mainTB) Cleanup(f func()) { m.cleanups = append(m.cleanups, f) }

// cleanup runs the cleanups, the last registered first, as testing does.
func (m *mainTB) cleanup() {
	for _, f := range slices.Backward(m.cleanups) {
		f()
	}
	m.cleanups = nil
}

func (*mainTB) Fatal(args ...any) { panic("redistest: " + fmt.Sprint(args...)) }
func (*mainTB) Fatalf(format string, args ...any) {
	panic("redistest: " + fmt.Sprintf(format, args...))
}
func (*mainTB) Error(args ...any)                 { fmt.Fprintln(os.Stderr, args...) }
func (*mainTB) Errorf(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
func (*mainTB) Logf(format string, args ...any)   { fmt.Fprintf(os.Stderr, format+"\n", args...) }
