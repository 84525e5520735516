package envoytest

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// Case is a set of envoyproxy/ratelimit's own configuration files, loaded
// together by one service, and the sequences of requests to send it.
type Case struct {
	Name  string
	Files []string // paths inside envoyproxy/ratelimit's module source
	// Inline are descriptor files of the case's own, by name.
	Inline    map[string]string
	Sequences []Sequence
	// Since is the first release that knows every field of the files: a
	// case is held only against releases from it on (Releases order);
	// empty for every release.
	Since string
}

// In reports whether the case applies to the release r.
func (c Case) In(r Release) bool { return since(c.Since, r) }

// In reports whether the sequence applies to the release r.
func (s Sequence) In(r Release) bool { return since(s.Since, r) }

// since reports whether r is the release of version v or newer.
func since(v string, r Release) bool {
	if v == "" {
		return true
	}
	for _, x := range Releases() {
		if x.Version == r.Version {
			return true
		}
		if x.Version == v {
			return false
		}
	}
	return false
}

// Sequence is an ordered list of requests, sent from an empty store.
type Sequence struct {
	Name     string
	Requests []*rlsv3.RateLimitRequest
	// Since is the first release whose answers to it sluice gives, when
	// older ones answer otherwise (docs/envoy.md says how); empty for
	// every release.
	Since string
}

// newer marks sq as answered the way sluice does from the release r on.
func newer(r Release, sq Sequence) Sequence {
	sq.Since = r.Version
	return sq
}

// Load reads the case's files from envoyproxy/ratelimit's module source at
// Version: base name → content.
func (c Case) Load() (map[string]string, error) { return c.LoadFrom(January) }

// LoadFrom reads the case's files from the release's source, each file
// named in Files, then those in Inline: base name → content.
func (c Case) LoadFrom(r Release) (map[string]string, error) {
	files := map[string]string{}
	for name, body := range c.Inline {
		files[name] = body
	}
	if len(c.Files) == 0 {
		return files, nil
	}
	src, err := r.Source()
	if err != nil {
		return nil, err
	}
	for _, f := range c.Files {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			return nil, fmt.Errorf("envoytest: read %s of %s@%s: %w", f, Module, r.Version, err)
		}
		files[filepath.Base(f)] = string(b)
	}
	return files, nil
}

// times repeats req n times.
func times(n int, req *rlsv3.RateLimitRequest) []*rlsv3.RateLimitRequest {
	return slices.Repeat([]*rlsv3.RateLimitRequest{req}, n)
}

// seq joins groups of requests into one sequence.
func seq(name string, groups ...[]*rlsv3.RateLimitRequest) Sequence {
	return Sequence{Name: name, Requests: slices.Concat(groups...)}
}

// one is a request of one descriptor of the pairs, counted once.
func one(domain string, pairs ...string) []*rlsv3.RateLimitRequest {
	return []*rlsv3.RateLimitRequest{Request(domain, 0, Descriptor(pairs...))}
}

// hits is a request of one descriptor of the pairs with hits_addend n.
func hits(domain string, n uint32, pairs ...string) []*rlsv3.RateLimitRequest {
	return []*rlsv3.RateLimitRequest{Request(domain, n, Descriptor(pairs...))}
}

// many is a request of several descriptors.
func many(domain string, n uint32, descs ...*commonv3.RateLimitDescriptor) []*rlsv3.RateLimitRequest {
	return []*rlsv3.RateLimitRequest{Request(domain, n, descs...)}
}

// Cases returns envoyproxy/ratelimit's example configuration and its test
// configurations, each with sequences that reach every kind of entry in it:
// nested descriptors, values and wildcards, share_threshold, unlimited,
// shadow_mode, replaces, hits_addend above 1 (request-wide and per descriptor, 0
// included), and requests that go on after a limit is spent. A sequence
// with a per-second limit is short, so that it fits in one second.
func Cases() []Case {
	D := Descriptor
	return []Case{{
		Name:  "example",
		Files: []string{"examples/ratelimit/config/example.yaml"},
		Sequences: []Sequence{
			seq("nested",
				times(4, one("rl", "foo", "pelican")[0]),
				times(4, one("rl", "foo", "pelican", "bar", "x")[0]),
				times(2, one("rl", "foo", "pelican", "bar", "bkthomps")[0]),
				one("rl", "foo", "pelican", "bar", "x", "baz", "y"),
				one("rl", "foo", "pelican", "nothing", "here"),
				times(2, one("rl", "source_cluster", "proxy", "destination_cluster", "mock")[0]),
				one("rl", "source_cluster", "proxy", "destination_cluster", "elsewhere"),
				one("rl", "source_cluster", "proxy"),
				one("rl", "no_such_key", "x"),
				one("no_such_domain", "foo", "pelican"),
			),
			seq("replaces",
				times(3, many("rl", 0, D("foo", "a", "bar", "bkthomps"), D("category", "account"))[0]),
				times(3, many("rl", 0, D("source_cluster", "proxy", "destination_cluster", "bkthomps"), D("foo", "b", "bar", "bkthomps"))[0]),
				times(2, one("rl", "foo", "c", "bar", "banned")[0]),
				times(3, many("rl", 0, D("source_cluster", "proxy", "destination_cluster", "override"), D("foo", "c", "bar", "banned"))[0]),
				times(2, many("rl", 0, D("source_cluster", "proxy", "destination_cluster", "fake"), D("category", "account"))[0]),
				times(3, one("rl", "source_cluster", "proxy", "destination_cluster", "fake")[0]),
				times(2, one("rl", "category", "account")[0]),
			),
			seq("shadow_mode and unlimited",
				times(5, one("rl", "foo", "d", "baz", "shady")[0]),
				times(4, one("rl", "foo", "d", "baz", "not-so-shady")[0]),
				times(2, one("rl", "foo", "d", "bay", "x")[0]),
				times(2, one("rl", "qux", "x")[0]),
				times(2, many("rl", 0, D("foo", "e", "baz", "shady"), D("qux", "y"), D("foo", "e"))[0]),
				times(3, many("rl", 0, D("foo", "f", "baz", "shady"), D("foo", "f", "bar", "x"))[0]),
			),
			seq("hits_addend",
				hits("rl", 3, "unspec", "u1"),
				hits("rl", 2, "unspec", "u2"),
				hits("rl", 1, "unspec", "u2"),
				many("rl", 0, WithHits(D("unspec", "u3"), 0)),
				many("rl", 0, WithHits(D("unspec", "u3"), 2)),
				many("rl", 0, WithHits(D("unspec", "u3"), 0)),
				many("rl", 5, WithHits(D("unspec", "u4"), 1), D("foo", "g"), D("qux", "z")),
				many("rl", 1, WithHits(D("foo", "h"), 2), WithHits(D("foo", "h", "bar", "x"), 3)),
				many("rl", 1, D("foo", "h", "bar", "x")),
			),
			// Quota mode refuses once every quota limit of a call is
			// over, and the metadata: of the limits that passed comes back
			// in the dynamic metadata, since main of March to July 2026:
			// upstream's integration-test/scripts/quota.sh.
			newer(Main, seq("quota mode and metadata",
				times(3, many("rl", 0, D("service", "service_1"), D("service", "service_2"))[0]),
				many("rl", 0, D("service", "service_1")),
				many("rl", 0, WithHits(D("service", "service_2"), 0), D("service", "service_3")),
				many("rl", 2, D("service", "service_2"), D("foo", "q")),
			)),
			seq("per second",
				times(3, one("rl", "foo", "s", "baz", "q")[0]),
				many("rl", 0, D("foo", "t", "baz", "q"), D("foo", "t", "baz", "not-so-shady")),
				many("rl", 0, D("foo", "t", "baz", "q"), D("foo", "t", "baz", "shady")),
			),
		},
	}, {
		Name:  "example config",
		Files: []string{"examples/ratelimit/config/config.yaml"},
		Sequences: []Sequence{
			seq("per second",
				hits("mongo_cps", 400, "database", "users"),
				hits("mongo_cps", 100, "database", "users"),
				hits("mongo_cps", 1, "database", "users"),
				many("mongo_cps", 0, WithHits(D("database", "users"), 0)),
				hits("mongo_cps", 499, "database", "default"),
				hits("mongo_cps", 2, "database", "default"),
				hits("mongo_cps", 1000, "database", "other"),
				many("mongo_cps", 7, D("database", "users"), D("database", "default"), D("database", "other")),
			),
		},
	}, {
		Name:  "basic",
		Files: []string{"test/config/basic_config.yaml"},
		Sequences: []Sequence{
			seq("per second",
				times(6, one("test-domain", "key1", "value1", "subkey1", "a")[0]),
				hits("test-domain", 9, "key1", "value1", "subkey1", "subvalue1"),
				times(2, one("test-domain", "key1", "value1", "subkey1", "subvalue1")[0]),
				one("test-domain", "key1", "value1"),
				one("test-domain", "key1", "other", "subkey1", "a"),
			),
			seq("minute, hour, day",
				hits("test-domain", 19, "key2", "x"),
				times(2, one("test-domain", "key2", "x")[0]),
				one("test-domain", "key2", "y"),
				hits("test-domain", 30, "key2", "value2"),
				one("test-domain", "key2", "value2"),
				times(3, one("test-domain", "key2", "value3")[0]),
				times(2, one("test-domain", "key3", "a")[0]),
				times(2, one("test-domain", "key4", "b")[0]),
				hits("test-domain", 14, "key5", "value5"),
				times(2, one("test-domain", "key5", "value5")[0]),
				hits("test-domain", 25, "key5", "value5", "subkey5", "subvalue5"),
				one("test-domain", "key5", "value5", "subkey5", "subvalue5"),
				one("test-domain", "key5", "value5", "subkey5", "other"),
				times(2, one("test-domain", "key6", "z")[0]),
				hits("test-domain", 70, "key7", "q"),
				one("test-domain", "key7", "q"),
				times(2, many("test-domain", 0, D("key2", "m"), D("key6", "m"), D("key3", "m"), D("nope", "m"))[0]),
			),
		},
	}, {
		Name:  "shadow mode",
		Files: []string{"test/config/shadowmode_config.yaml"},
		Sequences: []Sequence{
			seq("per second",
				hits("test-domain", 10, "key1", "value1", "subkey1", "subvalue1"),
				times(2, one("test-domain", "key1", "value1", "subkey1", "subvalue1")[0]),
				times(6, one("test-domain", "key1", "value1", "subkey1", "a")[0]),
			),
			seq("per minute",
				hits("test-domain", 20, "key2", "x"),
				times(2, one("test-domain", "key2", "x")[0]),
				hits("test-domain", 30, "key2", "value2"),
				one("test-domain", "key2", "value2"),
				many("test-domain", 0, D("key2", "x"), D("key2", "value2")),
				many("test-domain", 0, D("key2", "x"), D("key2", "y")),
			),
		},
	}, {
		Name:  "wildcard",
		Files: []string{"test/config/wildcard.yaml"},
		Sequences: []Sequence{
			seq("per minute",
				hits("test-domain", 20, "wild", "foo1"),
				one("test-domain", "wild", "foo1"),
				one("test-domain", "wild", "foo2"),
				times(2, one("test-domain", "wild", "foo")[0]),
				one("test-domain", "wild", "bar"),
				hits("test-domain", 20, "noWild", "foo"),
				one("test-domain", "noWild", "foo"),
				one("test-domain", "noWild", "foo1"),
				hits("test-domain", 21, "noVal", "anything"),
				one("test-domain", "midWild", "barxyz"),
				hits("test-domain", 20, "nestedWild", "val1", "wild", "goo5"),
				one("test-domain", "nestedWild", "val1", "wild", "goo5"),
				one("test-domain", "nestedWild", "val1", "wild", "goo"),
				one("test-domain", "nestedWild", "val2", "wild", "goo5"),
			),
			// A '*' inside a value is a wildcard since March 2026 (a
			// literal before).
			newer(Main, seq("middle wildcards",
				hits("test-domain", 19, "midWild", "barxb"),
				one("test-domain", "midWild", "bar*b"),
				one("test-domain", "midWild", "bab"),
				one("test-domain", "midWild", "bb"),
				one("test-domain", "midWild", "barb"),
				hits("test-domain", 9, "multiWild", "foobarbaz"),
				one("test-domain", "multiWild", "foo-bar-baz"),
				one("test-domain", "multiWild", "foo-baz-bar"),
				one("test-domain", "multiWild", "foobarbazbaz"),
				one("test-domain", "multiWild", "foobaz"),
			)),
		},
	}, {
		Name: "integration",
		Files: []string{
			"test/integration/runtime/current/ratelimit/config/basic.yaml",
			"test/integration/runtime/current/ratelimit/config/another.yaml",
		},
		Sequences: []Sequence{
			seq("per second",
				hits("basic", 49, "key1", "a"),
				times(2, one("basic", "key1", "a")[0]),
				hits("basic", 51, "key1_local", "b"),
			),
			seq("minute, hour, day",
				times(2, one("basic", "one_per_minute", "x")[0]),
				hits("another", 20, "key2", "z"),
				one("another", "key2", "z"),
				hits("another", 9, "key3", "z"),
				times(2, one("another", "key3", "z")[0]),
				hits("another", 21, "key4", "z"),
				many("another", 0, D("key2_local", "z"), D("key3_local", "z"), D("key4_local", "z")),
				one("basic", "key2", "z"),
			),
		},
	}, {
		Name:  "share_threshold",
		Files: []string{"test/config/share_threshold.yaml"},
		Sequences: []Sequence{
			seq("per minute",
				hits("test-domain", 99, "files", "files/a"),
				times(2, one("test-domain", "files", "files/b")[0]),
				hits("test-domain", 199, "nested", "parent", "files", "nested/x"),
				times(2, one("test-domain", "nested", "parent", "files", "nested/y")[0]),
				hits("test-domain", 299, "files", "top/a", "files", "nested/b"),
				times(2, one("test-domain", "files", "top/c", "files", "nested/d")[0]),
				hits("test-domain", 59, "route", "api/v1", "method", "GET"),
				times(2, one("test-domain", "route", "api/v2", "method", "GET")[0]),
				one("test-domain", "route", "api/v2", "method", "POST"),
				hits("test-domain", 79, "service", "svc/a", "endpoint", "e1"),
				times(2, one("test-domain", "service", "svc/b", "endpoint", "e1")[0]),
				hits("test-domain", 119, "path", "path/a", "file", "file/x", "type", "t"),
				one("test-domain", "path", "path/b", "file", "file/x", "type", "t"),
				one("test-domain", "path", "path/b", "file", "file/y", "type", "t"),
				hits("test-domain", 149, "user", "user/a", "resource", "res/1", "action", "r"),
				times(2, one("test-domain", "user", "user/b", "resource", "res/2", "action", "r")[0]),
				hits("test-domain", 50, "file", "test1"),
				one("test-domain", "file", "test1"),
				hits("test-domain", 99, "file", "test2"),
				times(2, one("test-domain", "file", "test3")[0]),
			),
			newer(Main, seq("middle wildcards",
				hits("test-domain", 99, "midpath", "/api/x/v1"),
				times(2, one("test-domain", "midpath", "/apiv1")[0]),
				hits("test-domain", 49, "multiroute", "svc-a-ep-b-rpc"),
				times(2, one("test-domain", "multiroute", "svcXepYrpc")[0]),
				hits("test-domain", 79, "midroute", "/api/a/v2"),
				times(2, one("test-domain", "midroute", "/api/b/v2")[0]),
				hits("test-domain", 59, "tenant", "t1prod", "resource", "res1v2"),
				times(2, one("test-domain", "tenant", "t2prod", "resource", "res2v2")[0]),
			)),
		},
	}, {
		Name:  "share_threshold integration",
		Files: []string{"test/integration/runtime/current/ratelimit/config/share_threshold.yaml"},
		Sequences: []Sequence{
			seq("per hour",
				hits("share-threshold-test", 9, "files", "files/a"),
				times(2, one("share-threshold-test", "files", "files/b")[0]),
				hits("share-threshold-test", 10, "files_no_share", "files_no_share/a"),
				one("share-threshold-test", "files_no_share", "files_no_share/b"),
				one("share-threshold-test", "files_no_share", "files_no_share/a"),
			),
		},
	}, {
		Name:  "metadata",
		Files: []string{"test/config/metadata.yaml"},
		Since: Main.Version,
		Sequences: []Sequence{
			seq("per second",
				times(6, one("test-domain", "key1", "value1", "subkey1", "a")[0]),
				many("test-domain", 0, D("key1", "value1", "subkey1", "b"), D("key1", "value1", "subkey1", "subvalue1")),
			),
			seq("per minute",
				hits("test-domain", 19, "key2", "x"),
				many("test-domain", 0, D("key2", "x"), D("key1", "value1", "subkey1", "c"), D("nothing", "x")),
				many("test-domain", 3, D("key2", "y"), D("key2", "x")),
			),
		},
	}, {
		// No request overrides the limit of entries that another request
		// counts under the file's limit: envoyproxy/ratelimit names both
		// counters by the entries and the window's start, so they are one
		// when the two windows start at the same second (an hour's and a
		// day's at midnight UTC), which sluice keeps apart.
		Name:   "descriptor limit override",
		Inline: map[string]string{"override.yaml": overrideDomain},
		Sequences: []Sequence{
			seq("per minute",
				many("override", 0, WithLimit(D("tenant", "a"), 2, "MINUTE")),
				many("override", 0, WithLimit(D("tenant", "a"), 2, "MINUTE")),
				many("override", 0, WithLimit(D("tenant", "a"), 2, "MINUTE")),
				many("override", 0, WithLimit(D("unknown", "a"), 1, "MINUTE"), D("tenant", "b")),
				many("override", 0, WithLimit(D("unknown", "a"), 1, "MINUTE"), WithHits(WithLimit(D("unknown", "b"), 0, "HOUR"), 0)),
				many("override", 3, WithLimit(D("tenant", "c", "user", "u"), 5, "HOUR")),
				many("override", 3, WithLimit(D("tenant", "c", "user", "u"), 5, "HOUR")),
				many("no_such_domain", 0, WithLimit(D("tenant", "a"), 0, "MINUTE")),
			),
		},
	}}
}

// overrideDomain is a descriptor file whose limits requests override.
const overrideDomain = `domain: override
descriptors:
  - key: tenant
    rate_limit:
      unit: hour
      requests_per_unit: 100
`
