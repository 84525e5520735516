package memstore

import (
	"context"
	"hash/maphash"

	"github.com/sluicehq/sluice"
)

var _ sluice.Inspector = (*Store)(nil)

// Inspect reports req.Key's standing on every rule now, changing nothing (see
// sluice.Inspector).
func (s *Store) Inspect(_ context.Context, req sluice.Request) ([]sluice.Result, error) {
	if err := sluice.ValidateAdjust(req.Key, req.Rules); err != nil {
		return nil, err
	}
	return s.InspectAt(req.Key, req.Rules, s.now()), nil
}

// InspectAt is Inspect at now, in Unix microseconds, for valid input. It
// reads the key's buckets under the shard's mutex and the slot's lock, as
// a check would, and writes nothing: a key the store does not hold is
// reported as the check that brought it back would find it (full, or what
// it still owed when it was evicted), and is not created.
func (s *Store) InspectAt(key string, rules []sluice.Rule, now int64) []sluice.Result {
	h := maphash.String(s.seed, key)
	sh := &s.shards[h>>56&s.mask]
	id := makeID(h, len(rules))
	var state [sluice.MaxRules]sluice.Bucket
	b := state[:len(rules)]
	sh.mu.Lock()
	if sl := sh.t.find(id); sl != nil {
		sl.lock()
		copy(b, sh.t.buckets(sl))
		sl.unlock()
	} else {
		own, merged := sh.owed.peek(id, now)
		for i, r := range rules {
			b[i] = sluice.FullBucket(r, now)
			if own > now || merged > now {
				b[i] = owedBucket(r, now, own, merged)
			}
		}
	}
	sh.mu.Unlock()
	return sluice.InspectBuckets(b, rules, now)
}

// peek is recall without freeing the key's cell: what a key of id coming
// back at now would start from.
func (o *owed) peek(id uint64, now int64) (own, merged int64) {
	_, own, merged = o.t.Peek(id, now)
	return own, merged
}
