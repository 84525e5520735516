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
	"strings"
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
	// as it was, as the change named op (unique), and returns what they
	// were before. An error that wraps errOutcomeUnknown means the backend
	// could not learn whether the change happened: resolve then tells.
	// Any other error means it did not happen, and never will.
	put(ctx context.Context, table overrideTable, identity string, o policyOverrides, op string) (before policyOverrides, err error)
	// resolve tells whether the change op happened (and what it replaced)
	// and makes sure that, if it has not, it never will. Its error means
	// the backend did not answer: still unknown.
	resolve(ctx context.Context, op string) (applied bool, before policyOverrides, err error)
	// version reads the version alone, cheaply: a value that changes with
	// every change. shared reports whether another gateway may change it
	// (only then is it polled).
	version(ctx context.Context) (string, error)
	shared() bool
	describe() string
	close() error
}

// errOutcomeUnknown: a change was sent, and no answer came back to say
// whether it happened.
var errOutcomeUnknown = errors.New("no answer came back to say whether the change happened")

// memoryOverrides keeps the table in the process, and in a file when one
// is named: an append-only log. Its first line is the table as it was
// when the log was last compacted ({"version":2,"overrides":{…}}); each
// change appends one line ({"identity":…,"policies":{…}}, null for a
// delete) and syncs it, so a change costs the same at 10 identities and
// at 10,000. Now and then (when the changes appended outnumber the
// identities and compactEvery) the log is compacted: the table written to
// a temporary file, synced, and renamed over the log. A crash while a line
// is appended leaves a torn last line, which the next start ignores with
// a warning (the change it held was never answered as made) and compacts
// away; every line before it holds.
type memoryOverrides struct {
	path string // "": none
	log  *slog.Logger

	every int   // compact after this many changes at least; 0: compactEvery
	lines int   // changes appended since the last compaction
	size  int64 // of the log, as far as it was written and synced
	stale bool  // the log must be compacted before anything is appended
}

// compactEvery is the fewest changes appended before a compaction: a
// small table is not rewritten at every other change.
const compactEvery = 1000

// overridesFile is the first line of admin.overrides_file.
type overridesFile struct {
	Version   int           `json:"version"` // of the format: 2 (1: the table alone, before the log)
	Overrides overrideTable `json:"overrides"`
}

// overridesEntry is one change appended to admin.overrides_file.
type overridesEntry struct {
	Identity string          `json:"identity"`
	Policies policyOverrides `json:"policies"`
}

func (m *memoryOverrides) load(context.Context) (overrideTable, string, error) {
	if m.path == "" {
		return overrideTable{}, "", nil
	}
	data, err := os.ReadFile(m.path)
	if errors.Is(err, os.ErrNotExist) {
		m.stale = true // the first change writes the file, table first
		return overrideTable{}, "", nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("admin.overrides_file: %w", err)
	}
	table, torn, err := m.parse(data)
	if err != nil {
		return nil, "", err
	}
	if torn >= 0 {
		m.log.Warn("sluice: admin.overrides_file ends in a torn line (a crash while a change was written; that change was never answered as made): ignored, and the file compacted",
			"file", m.path, "line", bytes.Count(data[:torn], []byte("\n"))+1, "bytes", len(data)-torn)
		if err := m.compact(table); err != nil {
			return nil, "", fmt.Errorf("admin.overrides_file %s: compacting away a torn last line: %w", m.path, err)
		}
		return table, "", nil
	}
	m.size = int64(len(data))
	return table, "", nil
}

// parse reads the log: the table of its first line with every complete
// line after it applied. torn is the offset of an unterminated last line
// (-1: none). A line that is complete but not valid is an error naming
// the file and the line.
func (m *memoryOverrides) parse(data []byte) (table overrideTable, torn int, err error) {
	bad := func(line int, err error) error {
		return fmt.Errorf("admin.overrides_file %s line %d is not valid (%v); restore the file from a backup, or move it away to start without runtime overrides", m.path, line, err)
	}
	var f overridesFile
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, -1, fmt.Errorf("admin.overrides_file %s is not a valid overrides file (%v); restore it from a backup, or move it away to start without runtime overrides", m.path, err)
	}
	if f.Version != 1 && f.Version != 2 {
		return nil, -1, fmt.Errorf("admin.overrides_file %s: format version %d; want 2 (or 1)", m.path, f.Version)
	}
	m.stale = f.Version == 1 // an older sluice would read the table and miss the lines
	table = f.Overrides
	if table == nil {
		table = overrideTable{}
	}
	for _, id := range slices.Sorted(maps.Keys(table)) {
		if err := checkOverrides(table[id]); err != nil {
			return nil, -1, fmt.Errorf("admin.overrides_file %s: identity %q: %w", m.path, id, err)
		}
	}
	off := int(dec.InputOffset())
	line := bytes.Count(data[:off], []byte("\n")) + 1
	rest := data[off:]
	if i := bytes.IndexByte(rest, '\n'); i >= 0 && len(bytes.TrimSpace(rest[:i])) == 0 {
		off, rest = off+i+1, rest[i+1:]
		line++
	} else if len(bytes.TrimSpace(rest)) != 0 {
		return nil, -1, bad(line, errors.New("text after the table on its line"))
	}
	m.lines = 0
	for len(rest) > 0 {
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			return table, off, nil
		}
		var e overridesEntry
		dec := json.NewDecoder(bytes.NewReader(rest[:i]))
		dec.DisallowUnknownFields()
		err := dec.Decode(&e)
		if err == nil && dec.More() {
			err = errors.New("more than one change on the line")
		}
		if err == nil && e.Identity == "" {
			err = errors.New("no identity")
		}
		if err == nil {
			err = checkOverrides(e.Policies)
		}
		if err != nil {
			return nil, -1, bad(line, err)
		}
		if e.Policies == nil {
			delete(table, e.Identity)
		} else {
			table[e.Identity] = e.Policies
		}
		m.lines++
		off, rest, line = off+i+1, rest[i+1:], line+1
	}
	return table, -1, nil
}

// checkOverrides checks written overrides' rules.
func checkOverrides(o policyOverrides) error {
	for _, policy := range slices.Sorted(maps.Keys(o)) {
		if _, err := parseRules(o[policy], time.UTC); err != nil {
			return fmt.Errorf("policy %q: %w", policy, err)
		}
	}
	return nil
}

// put appends the change to the log and syncs it, or compacts the log
// with the change in it when that is due. A failure leaves the file as it
// was (a part appended is cut off again), so the change did not happen.
func (m *memoryOverrides) put(_ context.Context, table overrideTable, identity string, o policyOverrides, _ string) (policyOverrides, error) {
	before := table[identity]
	if m.path == "" {
		return before, nil
	}
	every := m.every
	if every <= 0 {
		every = compactEvery
	}
	if m.stale || m.lines >= max(every, len(table)) {
		if err := m.compact(withIdentity(table, identity, o)); err != nil {
			return nil, fmt.Errorf("admin.overrides_file: %w", err)
		}
		return before, nil
	}
	line, err := json.Marshal(overridesEntry{Identity: identity, Policies: o})
	if err != nil {
		return nil, err
	}
	if err := m.append(append(line, '\n')); err != nil {
		return nil, fmt.Errorf("admin.overrides_file: %w", err)
	}
	return before, nil
}

// append writes line at the end of the log and syncs it. On a failure it
// cuts the log back to where it was; should even that fail, the next
// change compacts the log first.
func (m *memoryOverrides) append(line []byte) error {
	f, err := os.OpenFile(m.path, os.O_WRONLY|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	_, err = f.WriteAt(line, m.size)
	if err == nil {
		err = f.Sync()
	}
	if err != nil && (f.Truncate(m.size) != nil || f.Sync() != nil) {
		m.stale = true
	}
	if cerr := f.Close(); err == nil && cerr != nil {
		err, m.stale = cerr, true
	}
	if err != nil {
		return err
	}
	m.size += int64(len(line))
	m.lines++
	return nil
}

// compact replaces the log by table alone.
func (m *memoryOverrides) compact(table overrideTable) error {
	data, err := json.Marshal(overridesFile{Version: 2, Overrides: table})
	if err != nil {
		return err
	}
	data = append(data, '\n')
	if err := writeAtomically(m.path, data); err != nil {
		return err
	}
	m.size, m.lines, m.stale = int64(len(data)), 0, false
	return nil
}

func (m *memoryOverrides) resolve(context.Context, string) (bool, policyOverrides, error) {
	return false, nil, errors.New("the memory store always knows what became of a change")
}

func (m *memoryOverrides) close() error { return nil }

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
		return err
	}
	// The rename itself lasts once the directory is synced (where a
	// directory can be opened to sync: not everywhere).
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}

// redisOverrides keeps the table in Redis, shared by every gateway.
type redisOverrides struct {
	client redis.UniversalClient
}

// adminCallTimeout bounds one call of the admin API to Redis (the admin
// has a client of its own, with this timeout, not the store's deadline
// of milliseconds); adminDecideWithin bounds how long a change waits for
// Redis to say whether it happened, before it answers that it cannot tell.
const (
	adminCallTimeout  = 2 * time.Second
	adminDecideWithin = 6 * time.Second
)

// opMarkerTTL is how long Redis remembers what became of a change: that it
// happened (and what it replaced), or that it was fenced off and must
// never happen. A change still in flight (sent to a Redis that stopped,
// say) when its marker has expired could happen after all; a day is far
// beyond any call.
const opMarkerTTL = 24 * time.Hour

// opKey is the marker of the change op: "=" and the JSON it replaced
// ("=" alone: none) once it happened, "x" once it was fenced off.
func opKey(op string) string { return "sluice:{sluice-admin}:op:" + op }

// putScript makes one change atomically, unless its marker says it
// happened already (a repeat) or was fenced off: then it answers the
// marker and changes nothing. KEYS: the hash, the version, the marker;
// ARGV: the identity, its JSON ("" deletes it), the new version, the
// marker's TTL in milliseconds.
var putScript = redis.NewScript(`
local m = redis.call('GET', KEYS[3])
if m then return m end
local before = redis.call('HGET', KEYS[1], ARGV[1]) or ''
if ARGV[2] == '' then
  redis.call('HDEL', KEYS[1], ARGV[1])
else
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
end
redis.call('SET', KEYS[2], ARGV[3])
m = '=' .. before
redis.call('SET', KEYS[3], m, 'PX', ARGV[4])
return m
`)

// resolveScript answers the marker of a change, and fences the change
// off when it has none yet: a put that arrives later finds "x" and does
// nothing. KEYS: the marker; ARGV: its TTL in milliseconds.
var resolveScript = redis.NewScript(`
local m = redis.call('GET', KEYS[1])
if m then return m end
redis.call('SET', KEYS[1], 'x', 'PX', ARGV[1])
return 'x'
`)

// readMarker decodes a change's marker.
func readMarker(m string) (applied bool, before policyOverrides, err error) {
	switch {
	case m == "x":
		return false, nil, nil
	case m == "=":
		return true, nil, nil
	case len(m) > 1 && m[0] == '=':
		// What it replaced is only reported: should it not be valid
		// JSON (written by hand into Redis), the change happened all the
		// same.
		if json.Unmarshal([]byte(m[1:]), &before) != nil {
			before = nil
		}
		return true, before, nil
	}
	return false, nil, fmt.Errorf("unexpected marker %q of an admin change in Redis", m)
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

// put writes identity's overrides and a new version (random, not a
// counter, so that a Redis that lost its data and counts again from the
// start can never repeat the version a gateway last read) in one script,
// with the marker of op. Any failure is an unknown outcome: a script sent
// to a Redis that is slow or stopped runs when it wakes, after the call
// gave up; resolve tells, and fences it off if it has not run yet.
func (r *redisOverrides) put(ctx context.Context, _ overrideTable, identity string, o policyOverrides, op string) (policyOverrides, error) {
	var raw []byte
	if o != nil {
		var err error
		if raw, err = json.Marshal(o); err != nil {
			return nil, err
		}
	}
	keys := []string{overridesHashKey, overridesVersionKey, opKey(op)}
	m, err := putScript.Run(ctx, r.client, keys, identity, string(raw), rand.Text(), opMarkerTTL.Milliseconds()).Text()
	if err != nil {
		return nil, fmt.Errorf("%w: writing the overrides to Redis: %w", errOutcomeUnknown, err)
	}
	applied, before, err := readMarker(m)
	if err == nil && !applied {
		err = errors.New("the change was fenced off before it arrived")
	}
	return before, err
}

func (r *redisOverrides) resolve(ctx context.Context, op string) (bool, policyOverrides, error) {
	m, err := resolveScript.Run(ctx, r.client, []string{opKey(op)}, opMarkerTTL.Milliseconds()).Text()
	if err != nil {
		return false, nil, fmt.Errorf("asking Redis whether the change happened: %w", err)
	}
	return readMarker(m)
}

func (r *redisOverrides) close() error { return r.client.Close() }

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

	mu      sync.Mutex    // serialises changes and reloads of the table
	table   overrideTable // changed in place by a change of the memory store
	ver     string
	loaded  bool // a shared backend was read at least once
	failing bool // the last poll failed (logged once until it recovers)
	pending []pendingChange

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
	// Changes of unknown outcome get one more try: should Redis answer,
	// each is logged as made, or fenced off for good.
	s.mu.Lock()
	if len(s.pending) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), adminCallTimeout)
		s.resolvePending(ctx)
		cancel()
		for _, p := range s.pending {
			s.log.Warn("sluice: an admin change of unknown outcome is still unresolved at exit; it may yet happen", "op_key", opKey(p.op))
		}
	}
	s.mu.Unlock()
	_ = s.backend.close()
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
	if len(s.pending) > 0 {
		s.resolvePending(ctx)
	}
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

// applyChange makes o identity's overrides in force (nil: none), reading
// only them; s.mu is held.
func (s *overrideSync) applyChange(identity string, o policyOverrides) {
	rules := make(map[string][]sluice.Rule, len(o))
	for _, policy := range slices.Sorted(maps.Keys(o)) {
		rs, err := parseRules(o[policy], s.zone())
		if err != nil {
			s.log.Warn("sluice: runtime override ignored", "identity", identity, "policy", policy, "err", err)
			continue
		}
		rules[policy] = rs
	}
	if o == nil {
		delete(s.table, identity)
	} else {
		s.table[identity] = o
	}
	s.live.Set(identity, rules)
}

// get returns identity's overrides, or nil.
func (s *overrideSync) get(identity string) policyOverrides {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.table[identity]
}

// all returns a copy of the table in force.
func (s *overrideSync) all() overrideTable {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.table)
}

// lateOutcome is told what became of a change whose answer said its
// outcome was unknown, once the backend tells.
type lateOutcome func(applied bool, before policyOverrides)

// pendingChange is a change of unknown outcome, resolved by the poll.
type pendingChange struct {
	op   string
	late lateOutcome
}

// errNotSaved wraps the failure of a change that did not happen.
var errNotSaved = errors.New("nothing changed")

// set changes identity's overrides (nil deletes them) in the backend and,
// when that worked, here at once. It returns what they were before. The
// change is all or nothing: an error wrapping errNotSaved means it did not
// happen and never will; one wrapping errOutcomeUnknown means the backend
// did not answer within adminDecideWithin, and late is told later, by the
// poll, whether it happened. The caller's cancellation does not cut the
// change short: a change abandoned half way would be of unknown outcome.
func (s *overrideSync) set(ctx context.Context, identity string, o policyOverrides, late lateOutcome) (before policyOverrides, err error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), adminDecideWithin)
	defer cancel()
	s.mu.Lock()
	defer s.mu.Unlock()
	op := rand.Text()
	before, err = s.backend.put(ctx, s.table, identity, o, op)
	if errors.Is(err, errOutcomeUnknown) {
		before, err = s.decide(ctx, op, err)
		if errors.Is(err, errOutcomeUnknown) {
			s.pending = append(s.pending, pendingChange{op: op, late: late})
			return nil, err
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errNotSaved, err)
	}
	if !s.backend.shared() {
		s.applyChange(identity, o)
		return before, nil
	}
	// Read it all back: another gateway may have changed something
	// since the last poll. Should that fail, the change applies here
	// now and the poll reads the rest.
	if t, v, err := s.backend.load(ctx); err == nil {
		s.loaded = true
		s.apply(t, v)
		return before, nil
	}
	s.loaded = false
	s.apply(withIdentity(s.table, identity, o), s.ver)
	return before, nil
}

// decide asks the backend whether the change op happened until it answers
// or ctx ends; cause is why the change itself got no answer.
func (s *overrideSync) decide(ctx context.Context, op string, cause error) (policyOverrides, error) {
	for {
		applied, before, err := s.backend.resolve(ctx, op)
		switch {
		case err == nil && applied:
			return before, nil
		case err == nil:
			return nil, fmt.Errorf("%s; it had not happened, and is fenced off", strings.TrimPrefix(cause.Error(), errOutcomeUnknown.Error()+": "))
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (%v; then %v)", cause, ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// resolvePending resolves the changes of unknown outcome it can, telling
// each its outcome; s.mu is held.
func (s *overrideSync) resolvePending(ctx context.Context) {
	kept := s.pending[:0]
	for _, p := range s.pending {
		applied, before, err := s.backend.resolve(ctx, p.op)
		if err != nil {
			kept = append(kept, p)
			continue
		}
		if p.late != nil {
			p.late(applied, before)
		}
	}
	clear(s.pending[len(kept):])
	s.pending = kept
}
