package envoyrls

import (
	"context"
	"testing"
	"time"
)

// A domain's calls rest in their slot (domainSlots.rest) only while the
// domain is beyond its share and another domain was called within
// otherDomainWithin: restFactor times the call's time, at most the wait;
// never without a factor. TestDomainFlood (internal/e2e) shows what it is
// for: it fails with envoy_rls.busy_domain_rest: 0 (the default).
func TestBusyDomainRest(t *testing.T) {
	d := &domainSlots{max: 1, wait: time.Second, restFactor: 4, n: make(map[string]*domain)}
	ctx := context.Background()
	a := d.acquire(ctx, "a")
	if a == nil {
		t.Fatal("domain a: no slot")
	}
	if got := d.rest("a", a, 10*time.Millisecond); got != 0 {
		t.Errorf("a within its share, alone: rest %v; want 0", got)
	}
	// A second call of a waits for a's slot: a is beyond its share.
	waiting := make(chan *domain)
	go func() { waiting <- d.acquire(ctx, "a") }()
	for {
		d.mu.Lock()
		users := a.users
		d.mu.Unlock()
		if users == 2 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if got := d.rest("a", a, 10*time.Millisecond); got != 0 {
		t.Errorf("a beyond its share, no other domain called: rest %v; want 0", got)
	}
	b := d.acquire(ctx, "b")
	d.release("b", b)
	if got := d.rest("a", a, 10*time.Millisecond); got != 40*time.Millisecond {
		t.Errorf("a beyond its share, b just called: rest %v; want 4 × 10ms", got)
	}
	if got := d.rest("a", a, 400*time.Millisecond); got != time.Second {
		t.Errorf("a call of 400ms: rest %v; want the wait, 1s", got)
	}
	d.mu.Lock()
	d.seen("a", time.Now()) // a called again: b is now second in recent
	d.mu.Unlock()
	if got := d.rest("a", a, 10*time.Millisecond); got != 40*time.Millisecond {
		t.Errorf("a called after b: rest %v; want 40ms", got)
	}
	d.mu.Lock()
	d.recent[1].at = time.Now().Add(-2 * otherDomainWithin)
	d.mu.Unlock()
	if got := d.rest("a", a, 10*time.Millisecond); got != 0 {
		t.Errorf("b last called %v ago: rest %v; want 0", 2*otherDomainWithin, got)
	}
	off := &domainSlots{max: 1, wait: time.Second, n: make(map[string]*domain)}
	x := off.acquire(ctx, "x")
	x.users++ // as if a second call of x waited
	y := off.acquire(ctx, "y")
	off.release("y", y)
	if got := off.rest("x", x, 10*time.Millisecond); got != 0 {
		t.Errorf("no rest factor: rest %v; want 0", got)
	}
	d.release("a", a)
	if w := <-waiting; w != a {
		t.Errorf("the waiting call of a got %p; want a's slots %p", w, a)
	}
}
