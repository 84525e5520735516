package redisstore

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
)

var _ sluice.Inspector = (*Store)(nil)

// inspectScript reads a key's packed buckets and the server's time in one
// atomic step, writing nothing: Inspect decodes the buckets in Go, with
// the same math as a check.
var inspectScript = redis.NewScript(`local t = redis.call('TIME')
return { t[1], t[2], redis.call('GET', KEYS[1]) or '' }`)

// Inspect reports req.Key's standing on every rule now, changing nothing (see
// sluice.Inspector): one read-only script call, at the server's time (or
// Options.Now's). A key Redis does not hold, or holds for another number
// of rules, is full buckets, as the check script would find it.
func (s *Store) Inspect(ctx context.Context, req sluice.Request) ([]sluice.Result, error) {
	key, rules := req.Key, req.Rules
	if err := sluice.ValidateAdjust(key, rules); err != nil {
		return nil, err
	}
	reply, err := inspectScript.Run(ctx, s.client, []string{s.Key(key)}).Slice()
	if err != nil {
		return nil, fmt.Errorf("redisstore: inspect: %w", err)
	}
	now, packed, err := parseInspect(reply)
	if err != nil {
		return nil, err
	}
	if s.now != nil {
		now = s.now().UnixMicro()
	}
	return sluice.InspectBuckets(unpackBuckets(packed, rules, now), rules, now), nil
}

// parseInspect reads the script's reply: seconds, microseconds, value.
func parseInspect(reply []any) (now int64, packed string, err error) {
	if len(reply) != 3 {
		return 0, "", fmt.Errorf("redisstore: inspect script returned %d values, want 3", len(reply))
	}
	var t [2]int64
	for i := range t {
		str, _ := reply[i].(string)
		if t[i], err = strconv.ParseInt(str, 10, 64); err != nil {
			return 0, "", fmt.Errorf("redisstore: inspect script returned the time %q: %w", str, err)
		}
	}
	packed, _ = reply[2].(string)
	return t[0]*1_000_000 + t[1], packed, nil
}

// unpackBuckets decodes a key's value, 16 bytes (tokens, last) a rule, as
// the scripts write it; a missing or differently sized value is a set of
// full buckets as of now, as the scripts read it.
func unpackBuckets(packed string, rules []sluice.Rule, now int64) []sluice.Bucket {
	b := make([]sluice.Bucket, len(rules))
	for i, r := range rules {
		if len(packed) != 16*len(rules) {
			b[i] = sluice.FullBucket(r, now)
			continue
		}
		b[i] = sluice.Bucket{Tokens: floatAt(packed, 16*i), Last: int64(floatAt(packed, 16*i+8))}
	}
	return b
}
