package envoyrls

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/config"
)

// rlsOf returns the envoy_rls section of a configuration that defines
// domains, read from a directory of t's.
func rlsOf(t testing.TB, domains ...string) *config.EnvoyRLS {
	t.Helper()
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "rl"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range domains {
		file := "domain: " + name + "\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 1000}\n"
		if err := os.WriteFile(filepath.Join(dir, "rl", name+".yaml"), []byte(file), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := config.Parse("sluice.yaml", dir, []byte("envoy_rls: {listen: 127.0.0.1:0, config_dir: rl}\n"))
	if err != nil {
		t.Fatal(err)
	}
	return &cfg.EnvoyRLS
}

// reloadable is a Source whose configuration a test swaps, as a reload
// does.
type reloadable struct {
	rls atomic.Pointer[config.EnvoyRLS]
}

func (r *reloadable) source() (*config.EnvoyRLS, Decider) { return r.rls.Load(), nil }

// slotsOf returns domainSlots of max slots a domain reading the
// configuration of r.
func slotsOf(r *reloadable, max int) *domainSlots {
	return &domainSlots{max: max, wait: time.Hour, restFactor: 4, source: r.source, n: make(map[string]*domain)}
}

// inN says whether name has an entry among the domains with calls in
// flight that the configuration lacks.
func (d *domainSlots) inN(name string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.n[name] != nil
}

// others records a call of another domain than those of the tests, so
// that their domains are not alone and are held to their slots.
func (d *domainSlots) others() {
	d.mu.Lock()
	d.seen("another domain", time.Now())
	d.mu.Unlock()
}

// take acquires a slot of name's, and fails t when the call got none or
// goes on without one.
func (d *domainSlots) take(t *testing.T, ctx context.Context, name string) *domain {
	t.Helper()
	dm, held := d.acquire(ctx, name)
	if dm == nil || !held {
		t.Fatalf("%s: no slot (entry %p)", name, dm)
	}
	return dm
}

// cancelled is a context already ended: acquire with it takes a free slot
// or returns nil at once.
func cancelled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

// A domain of the configuration keeps its entry (its slots' channel) once
// its calls end, out of the map under the lock; a domain the
// configuration lacks has its entry there while its calls are in flight,
// and none once they end.
func TestKnownDomainSlots(t *testing.T) {
	var r reloadable
	r.rls.Store(rlsOf(t, "a"))
	d := slotsOf(&r, 2)
	ctx := context.Background()
	a := d.take(t, ctx, "a")
	if d.inN("a") {
		t.Error("a, a domain of the configuration: in the map of the lock")
	}
	d.release("a", a, true)
	if again := d.take(t, ctx, "a"); again != a {
		t.Errorf("a after its calls ended: entry %p; want the same entry %p (no new channel)", again, a)
	} else {
		d.release("a", again, true)
	}
	if n := a.users.Load(); n != 0 {
		t.Errorf("a's users once its calls ended: %d; want 0", n)
	}
	z := d.take(t, ctx, "made-up")
	if !d.inN("made-up") {
		t.Error("made-up, called: no entry in the map of the lock")
	}
	d.release("made-up", z, true)
	if d.inN("made-up") {
		t.Error("made-up once its calls ended: its entry is still held")
	}
}

// A reload that drops a domain while a call holds its slot leaves the call
// its slot and the domain its bound: the next call of it waits for that
// slot. Once the call ends, nothing of the domain is left. A reload that
// adds a domain with a call in flight takes the call's entry as the
// domain's: the bound holds across it too.
func TestDomainSlotsReload(t *testing.T) {
	ab, b := rlsOf(t, "a", "b"), rlsOf(t, "b")
	var r reloadable
	r.rls.Store(ab)
	d := slotsOf(&r, 1)
	reloadHolding(t, d, &r, b, "dropped")
	if d.inN("a") {
		t.Error("a dropped, its calls ended: its entry is still held")
	}
	if k := d.known.Load(); k.m["a"] != nil || k.m["b"] == nil {
		t.Errorf("known after the reload: %v; want b alone", k.m)
	}
	held := reloadHolding(t, d, &r, ab, "added")
	if d.inN("a") {
		t.Error("a added: still in the map of the lock")
	}
	if dm := d.take(t, context.Background(), "a"); dm != held {
		t.Errorf("a added: entry %p; want the entry of its call in flight %p", dm, held)
	} else {
		d.release("a", dm, true)
	}
}

// reloadHolding takes domain a's one slot, reloads to rls (which drops
// or adds a, as what says), sees that a second call of a gets no slot,
// and ends the first call, whose entry it returns.
func reloadHolding(t *testing.T, d *domainSlots, r *reloadable, rls *config.EnvoyRLS, what string) *domain {
	t.Helper()
	held := d.take(t, context.Background(), "a")
	r.rls.Store(rls)
	d.others() // a is not alone: it is held to its slot
	if dm, _ := d.acquire(cancelled(), "a"); dm != nil {
		t.Fatalf("a %s by a reload while its one slot is held: a second call went on", what)
	}
	d.release("a", held, true)
	return held
}

// Calls of domains that reloads add and drop, all at once: no domain
// ever has more calls holding a slot than its slots, no slot or entry is
// left once they end, and nothing races (go test -race).
func TestDomainSlotsReloadsInFlight(t *testing.T) {
	configs := []*config.EnvoyRLS{rlsOf(t, "a", "b"), rlsOf(t, "b", "c"), rlsOf(t), rlsOf(t, "a", "c")}
	var r reloadable
	r.rls.Store(configs[0])
	const max = 2
	d := slotsOf(&r, max)
	names := []string{"a", "b", "c", "made-up"}
	var holding [4]atomic.Int32
	var over atomic.Int32
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			ctx := context.Background()
			for i := g; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				k := i % len(names)
				dm, held := d.acquire(ctx, names[k])
				if dm == nil {
					t.Errorf("%s: no slot", names[k])
					return
				}
				// A call that went on without a slot (its domain
				// alone, at the start) holds none.
				if held && holding[k].Add(1) > max {
					over.Add(1)
				}
				if held {
					holding[k].Add(-1)
				}
				d.release(names[k], dm, held)
			}
		})
	}
	for i := range 2000 {
		r.rls.Store(configs[i%len(configs)])
		if i%100 == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	close(stop)
	wg.Wait()
	if n := over.Load(); n > 0 {
		t.Errorf("%d times a domain had more than its %d slots held", n, max)
	}
	d.learn()
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.n) > 0 {
		t.Errorf("entries left once every call ended: %v", d.n)
	}
	for name, dm := range d.known.Load().m {
		if n, held := dm.users.Load(), len(dm.slots); n != 0 || held != 0 {
			t.Errorf("%s once every call ended: %d users, %d slots held; want none", name, n, held)
		}
	}
}
