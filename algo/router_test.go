package algo

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

// seen is a store of one algorithm that notes each call it answers.
type seen struct {
	sluice.Store
	name   string
	calls  *[]string
	closed bool
}

func (s *seen) Algorithm() string { return s.name }
func (s *seen) Close() error      { s.closed = true; return nil }

func (s *seen) Check(ctx context.Context, req sluice.Request) (sluice.Result, error) {
	*s.calls = append(*s.calls, s.name+" check")
	return s.Store.Check(ctx, req)
}

func (s *seen) Adjust(ctx context.Context, req sluice.Request, delta int64) (sluice.Result, error) {
	*s.calls = append(*s.calls, s.name+" adjust")
	return s.Store.Adjust(ctx, req, delta)
}

// seenInspector is seen that can inspect, as the token bucket's stores do.
type seenInspector struct{ *seen }

func (s seenInspector) Inspect(ctx context.Context, req sluice.Request) ([]sluice.Result, error) {
	*s.calls = append(*s.calls, s.name+" inspect")
	return s.Store.(sluice.Inspector).Inspect(ctx, req)
}

// The router sends every call to the store of the request's algorithm
// (the token bucket's when it names none), refuses an algorithm it has no
// store of without calling any, and closes the stores of the others only.
func TestRouterSendsEachRequestToItsAlgorithm(t *testing.T) {
	var calls []string
	ms := memstore.New(memstore.Options{})
	t.Cleanup(func() { ms.Close() })
	bucket := &seen{Store: ms, name: TokenBucket, calls: &calls}
	var others []Store
	for _, name := range Names()[1:] {
		st, err := Memory(name, MemoryOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		others = append(others, &seen{Store: st, name: name, calls: &calls})
	}
	r, err := NewRouter(seenInspector{bucket}, others...)
	if err != nil {
		t.Fatal(err)
	}
	rules := []sluice.Rule{{Rate: 1, Burst: 5}}
	for _, name := range append([]string{""}, Names()...) {
		req := sluice.Request{Key: "k", Cost: 1, Rules: rules, Algorithm: name}
		want := []string{}
		calledName := name
		if name == "" {
			calledName = TokenBucket
		}
		calls = nil
		if res, err := r.Check(ctx, req); err != nil || !res.Allowed {
			t.Fatalf("%q: check %+v %v", name, res, err)
		}
		if _, err := r.Adjust(ctx, req, -1); err != nil {
			t.Fatalf("%q: adjust %v", name, err)
		}
		want = append(want, calledName+" check", calledName+" adjust")
		_, err := r.Inspect(ctx, req)
		if calledName == TokenBucket {
			if err != nil {
				t.Fatalf("%q: inspect %v", name, err)
			}
			want = append(want, calledName+" inspect")
		} else if !errors.Is(err, sluice.ErrNotInspectable) {
			t.Fatalf("%q: inspect of a store that cannot: %v, want ErrNotInspectable", name, err)
		}
		if !slices.Equal(calls, want) {
			t.Errorf("algorithm %q: the stores saw %q, want %q", name, calls, want)
		}
	}

	calls = nil
	req := sluice.Request{Key: "k", Cost: 1, Rules: rules, Algorithm: "gcra"}
	if _, err := r.Check(ctx, req); !errors.Is(err, sluice.ErrInvalid) {
		t.Errorf("unknown algorithm: check %v, want ErrInvalid", err)
	}
	if _, err := r.Adjust(ctx, req, 1); !errors.Is(err, sluice.ErrInvalid) {
		t.Errorf("unknown algorithm: adjust %v, want ErrInvalid", err)
	}
	if _, err := r.Inspect(ctx, req); !errors.Is(err, sluice.ErrInvalid) {
		t.Errorf("unknown algorithm: inspect %v, want ErrInvalid", err)
	}
	if len(calls) != 0 {
		t.Errorf("unknown algorithm: the stores saw %q, want nothing", calls)
	}

	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	for _, st := range others {
		if !st.(*seen).closed {
			t.Errorf("%s: not closed", st.Algorithm())
		}
	}
	if bucket.closed {
		t.Error("the token bucket store was closed: its caller owns it")
	}
}

// NewRouter refuses what could not route: no token bucket store, a nil
// store, two stores of one algorithm.
func TestNewRouterRefusesAmbiguity(t *testing.T) {
	ms := memstore.New(memstore.Options{})
	t.Cleanup(func() { ms.Close() })
	var calls []string
	fw := &seen{Store: ms, name: FixedWindow, calls: &calls}
	for name, build := range map[string]func() (*Router, error){
		"no token bucket":    func() (*Router, error) { return NewRouter(nil) },
		"a nil store":        func() (*Router, error) { return NewRouter(ms, nil) },
		"two fixed windows":  func() (*Router, error) { return NewRouter(ms, fw, fw) },
		"a second token one": func() (*Router, error) { return NewRouter(ms, &seen{Store: ms, name: TokenBucket, calls: &calls}) },
		"a store of no name": func() (*Router, error) { return NewRouter(ms, &seen{Store: ms, calls: &calls}) },
	} {
		if r, err := build(); err == nil || r != nil {
			t.Errorf("%s: %v %v, want an error", name, r, err)
		}
	}
	if _, err := NewRouter(ms, fw); err != nil {
		t.Errorf("one fixed window: %v", err)
	}
}
