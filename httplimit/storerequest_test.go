package httplimit

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

// requestLog is a store that notes what every call's request says of the
// store's choices (algorithm, failure policy) before a memstore answers.
type requestLog struct {
	*memstore.Store
	mu    sync.Mutex
	calls []string
}

func (s *requestLog) note(op string, req sluice.Request) {
	onError := "store's default"
	if req.OnError != nil {
		onError = req.OnError.String()
	}
	s.mu.Lock()
	s.calls = append(s.calls, fmt.Sprintf("%s algorithm=%q on_error=%s", op, req.Algorithm, onError))
	s.mu.Unlock()
}

func (s *requestLog) Check(ctx context.Context, req sluice.Request) (sluice.Result, error) {
	s.note("check", req)
	return s.Store.Check(ctx, req)
}

func (s *requestLog) Adjust(ctx context.Context, req sluice.Request, delta int64) (sluice.Result, error) {
	s.note("adjust", req)
	return s.Store.Adjust(ctx, req, delta)
}

func (s *requestLog) Inspect(ctx context.Context, req sluice.Request) ([]sluice.Result, error) {
	s.note("inspect", req)
	return s.Store.Inspect(ctx, req)
}

func (s *requestLog) take() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	calls := s.calls
	s.calls = nil
	return calls
}

// A policy's algorithm and failure policy reach the store in every
// request of every kind of call (check, adjust, inspect), and no context
// carries them: the store here reads none. Without Options.StoreOnError
// the requests name no failure policy, so the store keeps its own.
func TestStoreChoicesTravelInTheRequest(t *testing.T) {
	ctx := context.Background()
	policies := []Policy{
		{Name: "window", Algorithm: "fixed_window", OnError: FailClosed, Anonymous: rule(1, 5)},
		{Name: "open", OnError: FailOpen, Anonymous: rule(1, 5)},
		{Name: "local", Algorithm: "sliding_window", OnError: FailClosed, Local: true, Anonymous: rule(1, 5)},
		{Name: "zero", Anonymous: rule(1, 5)},
	}
	for _, storeOnError := range []bool{true, false} {
		t.Run(fmt.Sprintf("StoreOnError=%v", storeOnError), func(t *testing.T) {
			ms := memstore.New(memstore.Options{})
			t.Cleanup(func() { ms.Close() })
			store := &requestLog{Store: ms}
			l, err := New(Options{Store: store, Policies: policies, StoreOnError: storeOnError})
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range policies {
				onError := map[string]string{"window": "closed", "open": "open", "local": "local", "zero": "local"}[p.Name]
				if !storeOnError {
					onError = "store's default"
				}
				if _, err := l.Check(ctx, p.Name, "u", 1); err != nil {
					t.Fatal(err)
				}
				if _, err := l.Usage(ctx, p.Name, Caller{ID: "u"}); err != nil {
					t.Fatal(err)
				}
				if err := l.Reset(ctx, p.Name, "u"); err != nil {
					t.Fatal(err)
				}
				want := []string{}
				for _, op := range []string{"check", "inspect", "adjust"} {
					want = append(want, fmt.Sprintf("%s algorithm=%q on_error=%s", op, p.Algorithm, onError))
				}
				if calls := store.take(); !slices.Equal(calls, want) {
					t.Errorf("%s: the store saw\n\t%q\nwant\n\t%q", p.Name, calls, want)
				}
			}
		})
	}
}

type policyKey struct{}

// contextLog is a store that notes the policy name a context carries.
type contextLog struct {
	requestLog
	seen []any
}

func (s *contextLog) Check(ctx context.Context, req sluice.Request) (sluice.Result, error) {
	s.seen = append(s.seen, ctx.Value(policyKey{}))
	return s.Store.Check(ctx, req)
}

func (s *contextLog) Adjust(ctx context.Context, req sluice.Request, delta int64) (sluice.Result, error) {
	s.seen = append(s.seen, ctx.Value(policyKey{}))
	return s.Store.Adjust(ctx, req, delta)
}

func (s *contextLog) Inspect(ctx context.Context, req sluice.Request) ([]sluice.Result, error) {
	s.seen = append(s.seen, ctx.Value(policyKey{}))
	return s.Store.Inspect(ctx, req)
}

// The deprecated Options.StoreContext still derives the context of every
// store call.
func TestStoreContextStillDerivesTheContexts(t *testing.T) {
	ctx := context.Background()
	ms := memstore.New(memstore.Options{})
	t.Cleanup(func() { ms.Close() })
	store := &contextLog{requestLog: requestLog{Store: ms}}
	l, err := New(Options{Store: store, Policies: []Policy{{Name: "api", Anonymous: rule(1, 5)}},
		StoreContext: func(ctx context.Context, p *Policy) context.Context {
			return context.WithValue(ctx, policyKey{}, p.Name)
		}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Check(ctx, "api", "u", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Usage(ctx, "api", Caller{ID: "u"}); err != nil {
		t.Fatal(err)
	}
	if err := l.Reset(ctx, "api", "u"); err != nil {
		t.Fatal(err)
	}
	if want := []any{"api", "api", "api"}; !slices.Equal(store.seen, want) {
		t.Errorf("the store's contexts carried %v, want %v", store.seen, want)
	}
}
