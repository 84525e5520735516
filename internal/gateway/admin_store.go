package gateway

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
)

// Where runtime overrides live: a backend keeps the whole table of
// identities' overrides; the gateway holds the last table it read and
// hands it to the limiter (httplimit.Overrides) as rules.
//
// With the Redis store every gateway of a deployment shares them: one
// hash (identity → its overrides as JSON) and a version counter, both
// under one hash tag so that a Cluster keeps them in one slot and a change
// is one MULTI. Each gateway polls the version every overridePoll and
// reads the hash when it moved, so a change reaches every gateway within
// about that long; while Redis fails, the last table read stays in force
// and the poll keeps trying. With the memory store the table is the
// gateway's own, written to admin.overrides_file on every change.

// overridePoll is how often a gateway on Redis looks for a change.
const overridePoll = 250 * time.Millisecond

// Redis keys of the overrides: one hash tag, one slot.
const (
	overridesHashKey    = "sluice:{sluice-admin}:overrides"
	overridesVersionKey = "sluice:{sluice-admin}:version"
)

// overrideRule is a rule as the admin API and the stores write it.
type overrideRule struct {
	Rate  string `json:"rate,omitempty"`
	Burst int64  `json:"burst,omitempty"`
	// Quota, such as "100000/month", is a calendar quota in place of a
	// rate and a burst.
	Quota string `json:"quota,omitempty"`
}

// policyOverrides is one identity's runtime rules: policy name → rules.
type policyOverrides map[string][]overrideRule

// overrideTable is every identity's runtime rules: identity → policies.
type overrideTable map[string]policyOverrides

// parseRules turns written rules into sluice rules, each valid; zone is
// where calendar quotas' periods begin (quota_time_zone).
func parseRules(in []overrideRule, zone *time.Location) ([]sluice.Rule, error) {
	out := make([]sluice.Rule, len(in))
	for i, r := range in {
		var err error
		if r.Quota != "" {
			var n int64
			var period sluice.Period
			if n, period, err = sluice.ParseQuota(r.Quota); err == nil {
				out[i], err = sluice.NewQuota(n, period, zone)
			}
		} else {
			var rate float64
			if rate, err = sluice.ParseRate(r.Rate); err == nil {
				out[i] = sluice.Rule{Rate: rate, Burst: r.Burst}
				err = out[i].Validate()
			}
		}
		if err != nil {
			return nil, fmt.Errorf("rule %d: %w", i, err)
		}
	}
	return out, nil
}

// overrideBackend keeps the table.
type overrideBackend interface {
	// load reads the whole table and its version.
	load(ctx context.Context) (overrideTable, string, error)
	// put sets identity's overrides (nil: deletes them), given the table
	// as it was.
	put(ctx context.Context, table overrideTable, identity string, o policyOverrides) error
	// version reads the version alone, cheaply: a value that changes with
	// every change. shared reports whether another gateway may change it
	// (only then is it polled).
	version(ctx context.Context) (string, error)
	shared() bool
	describe() string
}

// memoryOverrides keeps the table in the process, and in a file when one
// is named.
type memoryOverrides struct {
	path string // "": none
}

// overridesFile is the form of admin.overrides_file.
type overridesFile struct {
	Version   int           `json:"version"` // of the format: 1
	Overrides overrideTable `json:"overrides"`
}

func (m *memoryOverrides) load(context.Context) (overrideTable, string, error) {
	if m.path == "" {
		return overrideTable{}, "", nil
	}
	data, err := os.ReadFile(m.path)
	if errors.Is(err, os.ErrNotExist) {
		return overrideTable{}, "", nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("admin.overrides_file: %w", err)
	}
	var f overridesFile
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, "", fmt.Errorf("admin.overrides_file %s is not a valid overrides file (%v); restore it from a backup, or move it away to start without runtime overrides", m.path, err)
	}
	if f.Version != 1 {
		return nil, "", fmt.Errorf("admin.overrides_file %s: format version %d; want 1", m.path, f.Version)
	}
	if f.Overrides == nil {
		f.Overrides = overrideTable{}
	}
	for id, o := range f.Overrides {
		for policy, rules := range o {
			if _, err := parseRules(rules, time.UTC); err != nil {
				return nil, "", fmt.Errorf("admin.overrides_file %s: identity %q, policy %q: %w", m.path, id, policy, err)
			}
		}
	}
	return f.Overrides, "", nil
}

func (m *memoryOverrides) put(_ context.Context, table overrideTable, identity string, o policyOverrides) error {
	if m.path == "" {
		return nil
	}
	data, err := json.MarshalIndent(overridesFile{Version: 1, Overrides: withIdentity(table, identity, o)}, "", "  ")
	if err != nil {
		return err
	}
	if err := writeAtomically(m.path, append(data, '\n')); err != nil {
		return fmt.Errorf("admin.overrides_file: %w", err)
	}
	return nil
}

func (m *memoryOverrides) version(context.Context) (string, error) { return "", nil }

func (m *memoryOverrides) shared() bool { return false }

func (m *memoryOverrides) describe() string {
	if m.path == "" {
		return "memory (lost at exit: set admin.overrides_file to keep them)"
	}
	return "file " + m.path
}

// withIdentity returns a copy of table with identity's overrides set to o
// (deleted when o is nil).
func withIdentity(table overrideTable, identity string, o policyOverrides) overrideTable {
	next := maps.Clone(table)
	if next == nil {
		next = overrideTable{}
	}
	if o == nil {
		delete(next, identity)
	} else {
		next[identity] = o
	}
	return next
}

// writeAtomically replaces path by data: a temporary file in the same
// directory, synced, then renamed over path, so that a crash leaves the
// old file or the new one, never a part.
func writeAtomically(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
	}
	return err
}

// redisOverrides keeps the table in Redis, shared by every gateway.
type redisOverrides struct {
	client redis.UniversalClient
}

func (r *redisOverrides) load(ctx context.Context) (overrideTable, string, error) {
	var ver *redis.StringCmd
	var all *redis.MapStringStringCmd
	_, err := r.client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		ver = p.Get(ctx, overridesVersionKey)
		all = p.HGetAll(ctx, overridesHashKey)
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, "", fmt.Errorf("reading the overrides from Redis: %w", err)
	}
	v, err := versionOf(ver)
	if err != nil {
		return nil, "", err
	}
	table := make(overrideTable, len(all.Val()))
	for id, raw := range all.Val() {
		var o policyOverrides
		if err := json.Unmarshal([]byte(raw), &o); err != nil {
			return nil, "", fmt.Errorf("the overrides of %q in Redis (%s) are not valid JSON: %w", id, overridesHashKey, err)
		}
		table[id] = o
	}
	return table, v, nil
}

// versionOf reads the version key: missing is "" (no change was ever
// made, or Redis lost its data: either way, a value unlike any written).
func versionOf(cmd *redis.StringCmd) (string, error) {
	s, err := cmd.Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("reading the overrides' version from Redis: %w", err)
	}
	return s, nil
}

// put writes identity's overrides and a new version: random, not a
// counter, so that a Redis that lost its data and counts again from the
// start can never repeat the version a gateway last read.
func (r *redisOverrides) put(ctx context.Context, _ overrideTable, identity string, o policyOverrides) error {
	var raw []byte
	if o != nil {
		var err error
		if raw, err = json.Marshal(o); err != nil {
			return err
		}
	}
	_, err := r.client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		if o == nil {
			p.HDel(ctx, overridesHashKey, identity)
		} else {
			p.HSet(ctx, overridesHashKey, identity, raw)
		}
		p.Set(ctx, overridesVersionKey, rand.Text(), 0)
		return nil
	})
	if err != nil {
		return fmt.Errorf("writing the overrides to Redis: %w", err)
	}
	return nil
}

func (r *redisOverrides) version(ctx context.Context) (string, error) {
	return versionOf(r.client.Get(ctx, overridesVersionKey))
}

func (r *redisOverrides) shared() bool { return true }

func (r *redisOverrides) describe() string { return "redis " + overridesHashKey }

// overrideSync holds the gateway's view of the table and keeps it current.
type overrideSync struct {
	backend overrideBackend
	live    *httplimit.Overrides
	log     *slog.Logger
	errors  func()                // counts a failed read of a shared backend
	zone    func() *time.Location // quota_time_zone of the running configuration

	mu      sync.Mutex // serialises changes and reloads of the table
	table   overrideTable
	ver     string
	loaded  bool // a shared backend was read at least once
	failing bool // the last poll failed (logged once until it recovers)

	stop chan struct{}
	done sync.WaitGroup
}

// start reads the table. A file that cannot be read is an error; a Redis
// that does not answer is logged and read again by the poll, which runs
// while the backend is shared.
func (s *overrideSync) start() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	table, ver, err := s.backend.load(ctx)
	if err != nil && !s.backend.shared() {
		return err
	}
	if err != nil {
		s.log.Warn("sluice: could not read the runtime overrides at start; retrying in the background, static limits apply meanwhile", "store", s.backend.describe(), "err", err)
		s.failing = true
		s.apply(overrideTable{}, "")
	} else {
		s.loaded = true
		s.apply(table, ver)
		s.log.Info("sluice: runtime overrides loaded", "store", s.backend.describe(), "identities", len(table))
	}
	s.stop = make(chan struct{})
	if s.backend.shared() {
		s.done.Add(1)
		go s.poll()
	}
	return nil
}

func (s *overrideSync) close() {
	if s.stop != nil {
		close(s.stop)
		s.done.Wait()
		s.stop = nil
	}
}

func (s *overrideSync) poll() {
	defer s.done.Done()
	t := time.NewTicker(overridePoll)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.refresh()
		}
	}
}

// refresh reads the table again when its version moved (or was never
// read). It holds s.mu throughout, so that a change made here meanwhile
// is never overwritten by an older read. A failure keeps the table in
// force, and is logged once until a read succeeds again.
func (s *overrideSync) refresh() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s.mu.Lock()
	defer s.mu.Unlock()
	ver, err := s.backend.version(ctx)
	if err == nil && (!s.loaded || ver != s.ver) {
		var table overrideTable
		if table, ver, err = s.backend.load(ctx); err == nil {
			s.loaded = true
			s.apply(table, ver)
		}
	}
	switch {
	case err != nil && !s.failing:
		s.errors()
		s.failing = true
		s.log.Warn("sluice: cannot read the runtime overrides; keeping the last ones read, retrying", "store", s.backend.describe(), "err", err)
	case err != nil:
		s.errors()
	case s.failing:
		s.failing = false
		s.log.Info("sluice: runtime overrides readable again", "store", s.backend.describe())
	}
}

// apply makes table the one in force; s.mu is held (or s not started).
func (s *overrideSync) apply(table overrideTable, ver string) {
	s.table, s.ver = table, ver
	rules := make(map[string]map[string][]sluice.Rule)
	for _, id := range slices.Sorted(maps.Keys(table)) {
		for policy, written := range table[id] {
			rs, err := parseRules(written, s.zone())
			if err != nil {
				s.log.Warn("sluice: runtime override ignored", "identity", id, "policy", policy, "err", err)
				continue
			}
			if rules[policy] == nil {
				rules[policy] = make(map[string][]sluice.Rule)
			}
			rules[policy][id] = rs
		}
	}
	s.live.Replace(rules)
}

// get returns identity's overrides, or nil.
func (s *overrideSync) get(identity string) policyOverrides {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.table[identity]
}

// all returns the table in force.
func (s *overrideSync) all() overrideTable {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.table
}

// set changes identity's overrides (nil deletes them) in the backend and,
// when that worked, here at once. It returns what they were before.
func (s *overrideSync) set(ctx context.Context, identity string, o policyOverrides) (before policyOverrides, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	before = s.table[identity]
	if err := s.backend.put(ctx, s.table, identity, o); err != nil {
		return before, err
	}
	if s.backend.shared() {
		// Read it all back: another gateway may have changed something
		// since the last poll. Should that fail, the change applies here
		// now and the poll reads the rest.
		if t, v, err := s.backend.load(ctx); err == nil {
			s.loaded = true
			s.apply(t, v)
			return before, nil
		}
		s.loaded = false
	}
	s.apply(withIdentity(s.table, identity, o), s.ver)
	return before, nil
}
