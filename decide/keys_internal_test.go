package decide

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

// A header of 1 MiB costs one bounded hash: the store key has the fixed
// length, the work does not grow with the header beyond 1 KiB, and values
// that differ within the first 1 KiB or in length are apart.
func TestKeyHugeHeader(t *testing.T) {
	store := memstore.New(memstore.Options{SweepInterval: -1})
	defer store.Close()
	c, err := New(Config{Store: store, Policies: []Policy{{Name: "t", Pattern: "/", Cost: 1, Anonymous: []sluice.Rule{{Rate: 0.001, Burst: 1}},
		Key: Key{Parts: []KeyPart{{Header: "X-Tenant"}}}}}})
	if err != nil {
		t.Fatal(err)
	}
	p := c.Lookup("t")
	key := func(v string) string {
		s := Subject{Verified: true}
		s.Values[0] = v
		var kb keyBuf
		if err := c.buildKey(&kb, p, p.RulesFor(Caller{}, false), &s); err != nil {
			t.Fatal(err)
		}
		return kb.String()
	}
	huge := strings.Repeat("a", 1<<20)
	if k := key(huge); len(k) != keyLen {
		t.Fatalf("key of a 1 MiB header: %d bytes", len(k))
	}
	if k1, k2 := key(huge), key(huge); k1 != k2 || key(huge) == key(huge+"b") || key(huge[:2000]) == key("b"+huge[:1999]) {
		t.Fatal("long values: equal values must share a key, values of other length or first KiB must not")
	}
	if key("a") == key("b") || key("ab") == key("a") {
		t.Fatal("short values share a key")
	}
	s := Subject{Verified: true}
	s.Values[0] = huge
	var kb keyBuf
	allocs := testing.AllocsPerRun(20, func() { _ = c.buildKey(&kb, p, &p.anon, &s) })
	if allocs > 0 {
		t.Errorf("keying a 1 MiB header allocates %v times; want none", allocs)
	}
	timeKeying := func(s *Subject) time.Duration {
		start := time.Now()
		for range 2000 {
			_ = c.buildKey(&kb, p, &p.anon, s)
		}
		return time.Since(start)
	}
	ks := Subject{Verified: true}
	ks.Values[0] = huge[:1024]
	small, big := timeKeying(&ks), timeKeying(&s)
	// The work is the same; allow for a busy machine, never 1000 times.
	if big > 20*small+50*time.Millisecond {
		t.Errorf("keying 1 MiB 2000 times takes %v, 1 KiB %v: the cost grows with the header", big, small)
	}
}

// TestPlanKeys: the keys differ by plan, so no store key of one plan is
// another's, nor the authenticated key of the same identity.
func TestPlanKeys(t *testing.T) {
	r := []sluice.Rule{{Rate: 1, Burst: 5}}
	p, err := compile(Policy{Name: "api", Authenticated: r, Plans: map[string][]sluice.Rule{"free": r, "pro": r}})
	if err != nil {
		t.Fatal(err)
	}
	var a, b keyBuf
	a.buildFor("api", p.plans["free"], "alice")
	b.buildFor("api", p.plans["pro"], "alice")
	if a.String() == b.String() {
		t.Fatal("free and pro share a key")
	}
	b.build("api", 'u', "alice")
	if a.String() == b.String() {
		t.Fatal("a plan shares the authenticated key")
	}
}
