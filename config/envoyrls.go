package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/decide"
)

// EnvoyRLS serves Envoy's global rate limit service (gRPC,
// envoy.service.ratelimit.v3) from envoyproxy/ratelimit's descriptor files,
// read as they are (docs/envoy.md).
type EnvoyRLS struct {
	// Listen is the gRPC listener's HOST:PORT. Empty (the default): no
	// gRPC listener.
	Listen string `yaml:"listen"`
	// ConfigDir holds envoyproxy/ratelimit's descriptor files: every
	// *.yaml and *.yml in it, one domain each. Relative to the
	// configuration file.
	ConfigDir string `yaml:"config_dir"`
	// TLS of the gRPC listener, in place of the top-level tls (tls.go).
	TLS *TLS `yaml:"tls"`
	// ResponseHeaders is what an answer's response_headers_to_add carry:
	// "sluice" (the default: the RateLimit headers of the top-level
	// headers setting), "envoyproxy" (envoyproxy/ratelimit's three with
	// LIMIT_RESPONSE_HEADERS_ENABLED: the limit, what remains and the
	// seconds until the window resets, named by the three fields below)
	// or "none".
	ResponseHeaders string `yaml:"response_headers"`
	LimitHeader     string `yaml:"limit_header"`     // default RateLimit-Limit
	RemainingHeader string `yaml:"remaining_header"` // default RateLimit-Remaining
	ResetHeader     string `yaml:"reset_header"`     // default RateLimit-Reset
	// DynamicMetadata: every answer carries dynamic_metadata as
	// envoyproxy/ratelimit's RESPONSE_DYNAMIC_METADATA does (the domain,
	// the descriptors, and the metadata: of the limits that passed).
	DynamicMetadata bool `yaml:"response_dynamic_metadata"`
	// Upstream, when set, serves as envoyproxy/ratelimit does (`sluice
	// ratelimit`, FromUpstreamEnv): ConfigDir is read the way it reads
	// its runtime directory, and its HTTP endpoints are served. Never
	// from YAML.
	Upstream *Upstream `yaml:"-"`

	// The bounds of the gRPC listener beyond the server section's
	// (envoyrls_limits.go); zero values are the defaults.

	// MaxStreamsPerConnection is the HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS
	// of a connection; a stream beyond it is refused (REFUSED_STREAM).
	MaxStreamsPerConnection int `yaml:"max_streams_per_connection"`
	// MaxStreamsPerIP bounds the streams one client address holds open
	// over all its connections; RESOURCE_EXHAUSTED beyond.
	MaxStreamsPerIP int `yaml:"max_streams_per_ip"`
	// FirstMessageTimeout bounds the time from a stream's headers to its
	// request message; DEADLINE_EXCEEDED beyond.
	FirstMessageTimeout time.Duration `yaml:"first_message_timeout"`
	// MaxInFlightPerDomain bounds the calls of one domain decided at once;
	// a call beyond waits up to DomainWait for a slot, then gets
	// RESOURCE_EXHAUSTED. 0 (the default): 16 per CPU.
	MaxInFlightPerDomain int           `yaml:"max_in_flight_per_domain"`
	DomainWait           time.Duration `yaml:"domain_wait"`
	// BusyDomainRest paces a domain beyond MaxInFlightPerDomain while
	// another domain is called: each of its calls holds its slot for
	// this many times as long as it took, at most DomainWait, before it is
	// answered; its own time leaves out what it waited on the store. 0:
	// the default, DefaultRLSBusyDomainRest; -1: no pacing.
	BusyDomainRest int `yaml:"busy_domain_rest"`
	// MaxDescriptors bounds the descriptors of a call, MaxEntries the
	// entries of a descriptor; INVALID_ARGUMENT beyond.
	MaxDescriptors int `yaml:"max_descriptors"`
	MaxEntries     int `yaml:"max_entries"`

	dir      string // ConfigDir resolved against the configuration file's directory
	domains  map[string]*RLSDescriptor
	policies []decide.Policy
	// perSecond names the policies of limits whose unit is SECOND.
	perSecond map[string]bool
}

// Dir returns the directory of the descriptor files as read: ConfigDir,
// relative to the configuration file's directory. Empty without one.
func (e *EnvoyRLS) Dir() string { return e.dir }

// Enabled reports whether the gRPC listener is configured.
func (e *EnvoyRLS) Enabled() bool { return e.Listen != "" }

// Domains returns the descriptor trees read from ConfigDir, by domain.
func (e *EnvoyRLS) Domains() map[string]*RLSDescriptor { return e.domains }

// Policies returns the policies the descriptors compile to, one per
// rate_limit that the store decides: they have no pattern and are reached
// only by name (RLSLimit.Policy).
func (e *EnvoyRLS) Policies() []decide.Policy { return e.policies }

// PerSecond reports whether policy, one of Policies, decides a limit whose
// unit is SECOND: with `sluice ratelimit`'s REDIS_PERSECOND
// (Upstream.PerSecond), its counters live in the per-second Redis.
func (e *EnvoyRLS) PerSecond(policy string) bool { return e.perSecond[policy] }

// RLSDescriptor is one level of a descriptor tree: the domain, or one
// descriptor of a file.
type RLSDescriptor struct {
	// Children are the descriptors below, by "key_value", or "key" alone
	// when the value is empty, as envoyproxy/ratelimit indexes them.
	Children map[string]*RLSDescriptor
	// Wildcards are the keys of Children whose value holds a "*", in the
	// order of the file: a "key_value" that matches none exactly takes
	// the first that matches it (Wildcard).
	Wildcards []string
	// Limit is the descriptor's rate_limit; nil when it has none.
	Limit *RLSLimit
	// Shared is the wildcard value ("files/*") under share_threshold:
	// every value it matches counts in one bucket. Empty otherwise.
	Shared string
	// ValueToMetric: value_to_metric, a call's value is part of the
	// stats key where the file has a key alone or a wildcard.
	ValueToMetric bool

	wild [][]string // Wildcards, each split on "*"
}

// Wildcard returns the child of the first wildcard (in the order of the
// file) that final, a request entry's "key_value", matches, and its key;
// nil when none does. Each "*" stands for any run of characters, none
// included, wherever it is in the value (envoyproxy/ratelimit's main since
// March 2026; its January 2026 commit only knew a trailing "*").
func (d *RLSDescriptor) Wildcard(final string) (*RLSDescriptor, string) {
	for i, parts := range d.wild {
		if globMatch(parts, final) {
			return d.Children[d.Wildcards[i]], d.Wildcards[i]
		}
	}
	return nil, ""
}

// globMatch reports whether s is parts joined by runs of any characters:
// it starts with the first part, ends with the last, and holds the others
// in order between them without overlap.
func globMatch(parts []string, s string) bool {
	first, last := parts[0], parts[len(parts)-1]
	if len(s) < len(first)+len(last) || !strings.HasPrefix(s, first) || !strings.HasSuffix(s, last) {
		return false
	}
	rest := s[len(first) : len(s)-len(last)]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(rest, p)
		if i < 0 {
			return false
		}
		rest = rest[i+len(p):]
	}
	return true
}

// RLSLimit is one rate_limit of a descriptor file.
type RLSLimit struct {
	// Policy is the name of the policy that decides it,
	// "rls:DOMAIN/key=value/key" (each part escaped by rlsNamePart); empty when unlimited or when
	// requests_per_unit is 0 (every hit over the limit), which no store
	// needs to decide.
	Policy string
	// Unit is SECOND, MINUTE, HOUR, DAY, WEEK, MONTH or YEAR, as Envoy's
	// enum spells it; UnitSeconds its length (a month is 30 days, a year
	// 365). Empty and 0 when unlimited.
	Unit            string
	UnitSeconds     int64
	RequestsPerUnit uint32
	Unlimited       bool
	Name            string   // rate_limit.name, which replaces names
	Replaces        []string // names of the limits this one replaces
	Shadow          bool     // shadow_mode: decide and count, never refuse
	Quota           bool     // quota_mode: over the limit is reported, never refused
	// Counted: the decision is envoyproxy/ratelimit's fixed window, which
	// counts a refused hit too. False for sluice's other algorithms.
	Counted bool
	// Metadata is the descriptor's metadata:, returned in an answer's
	// dynamic metadata when the limit passes; nil without one.
	Metadata *structpb.Struct
	// StatsKey is the key envoyproxy/ratelimit names the limit's stats
	// by: the domain and each descriptor's key, or key_value, joined by
	// dots ("domain.key1_value1.key2"), as in the file.
	StatsKey string
	// DynamicStats: the stats key is made from a call's values
	// (detailed_metric on the limit's descriptor, or value_to_metric on
	// one on its way), not StatsKey.
	DynamicStats bool
	// DetailedMetric: detailed_metric, the stats key is every entry's
	// key_value of the call.
	DetailedMetric bool
	File           string
	Line           int
}

// The units of envoyproxy/ratelimit, in seconds.
var rlsUnits = map[string]int64{
	"SECOND": 1, "MINUTE": 60, "HOUR": 3600, "DAY": 86400,
	"WEEK": 7 * 86400, "MONTH": 30 * 86400, "YEAR": 365 * 86400,
}

// The YAML of a descriptor file. The fields are envoyproxy/ratelimit's;
// algorithm, burst and on_error in rate_limit are sluice's additions.
type rlsFile struct {
	Domain      string          `yaml:"domain"`
	Descriptors []rlsDescriptor `yaml:"descriptors"`
}

type rlsDescriptor struct {
	Key            string          `yaml:"key"`
	Value          string          `yaml:"value"`
	RateLimit      *rlsRateLimit   `yaml:"rate_limit"`
	Descriptors    []rlsDescriptor `yaml:"descriptors"`
	ShadowMode     bool            `yaml:"shadow_mode"`
	QuotaMode      bool            `yaml:"quota_mode"`
	DetailedMetric bool            `yaml:"detailed_metric"`
	ValueToMetric  bool            `yaml:"value_to_metric"`
	ShareThreshold bool            `yaml:"share_threshold"`
	Metadata       rlsMetadata     `yaml:"metadata"`
}

// rlsMetadata is a descriptor's metadata: any YAML mapping, read as a
// protobuf Struct (numbers, strings, booleans, null, lists and mappings).
type rlsMetadata struct{ s *structpb.Struct }

func (m *rlsMetadata) decodeNode(d *decoder, n *yaml.Node, path string) {
	if n.Kind != yaml.MappingNode {
		d.fail(n.Line, path, "want a mapping of names to values (the dynamic metadata of an answer), not %s", kindName(n))
		return
	}
	if len(n.Content) == 0 {
		return
	}
	v, err := structValue(n, 0)
	var le *lineError
	if errors.As(err, &le) {
		d.fail(le.line, path, "%s", le.msg)
		return
	}
	m.s = v.GetStructValue()
}

// lineError is a mistake at a line of a descriptor file.
type lineError struct {
	line int
	msg  string
}

func (e *lineError) Error() string { return fmt.Sprintf("line %d: %s", e.line, e.msg) }

// structValue is the protobuf value of the YAML node n, at nesting depth.
func structValue(n *yaml.Node, depth int) (*structpb.Value, error) {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if depth > 32 {
		return nil, &lineError{n.Line, "nested more than 32 deep; want flatter metadata"}
	}
	switch n.Kind {
	case yaml.MappingNode:
		fields := make(map[string]*structpb.Value, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			if k.Kind != yaml.ScalarNode {
				return nil, &lineError{k.Line, "a metadata name must be a plain value, not " + kindName(k)}
			}
			v, err := structValue(n.Content[i+1], depth+1)
			if err != nil {
				return nil, err
			}
			fields[k.Value] = v
		}
		return structpb.NewStructValue(&structpb.Struct{Fields: fields}), nil
	case yaml.SequenceNode:
		vals := make([]*structpb.Value, len(n.Content))
		for i, c := range n.Content {
			v, err := structValue(c, depth+1)
			if err != nil {
				return nil, err
			}
			vals[i] = v
		}
		return structpb.NewListValue(&structpb.ListValue{Values: vals}), nil
	}
	switch n.ShortTag() {
	case "!!null":
		return structpb.NewNullValue(), nil
	case "!!bool":
		var b bool
		if err := n.Decode(&b); err == nil {
			return structpb.NewBoolValue(b), nil
		}
	case "!!int", "!!float":
		var f float64
		if err := n.Decode(&f); err == nil {
			return structpb.NewNumberValue(f), nil
		}
	}
	return structpb.NewStringValue(n.Value), nil
}

type rlsRateLimit struct {
	Unit            string       `yaml:"unit"`
	RequestsPerUnit *int64       `yaml:"requests_per_unit"`
	Unlimited       bool         `yaml:"unlimited"`
	Name            string       `yaml:"name"`
	Replaces        []rlsReplace `yaml:"replaces"`
	Algorithm       string       `yaml:"algorithm"`
	Burst           int64        `yaml:"burst"`
	OnError         string       `yaml:"on_error"`
}

type rlsReplace struct {
	Name string `yaml:"name"`
}

// maxRLSFiles bounds the files of config_dir; maxRLSFileBytes each file.
const (
	maxRLSFiles     = 1000
	maxRLSFileBytes = 4 << 20
)

func (v *validator) envoyRLS() {
	e := &v.c.EnvoyRLS
	if e.Listen != "" {
		v.hostPort("envoy_rls.listen", e.Listen)
		c := v.c
		if (e.Listen == c.Listen || e.Listen == c.AdminListen || e.Listen == c.DecisionAPI.Listen) && !strings.HasSuffix(e.Listen, ":0") {
			v.fail("envoy_rls.listen", "%q is also the traffic, admin or decision listener; want an address of its own, such as 127.0.0.1:8081", e.Listen)
		}
	}
	switch e.ResponseHeaders {
	case "":
		e.ResponseHeaders = "sluice"
	case "sluice", "envoyproxy", "none":
	default:
		v.fail("envoy_rls.response_headers", "%q: want sluice (the headers setting's), envoyproxy (its LIMIT_RESPONSE_HEADERS_ENABLED three) or none", e.ResponseHeaders)
	}
	for _, h := range []struct {
		field string
		name  *string
		def   string
	}{{"limit_header", &e.LimitHeader, "RateLimit-Limit"}, {"remaining_header", &e.RemainingHeader, "RateLimit-Remaining"}, {"reset_header", &e.ResetHeader, "RateLimit-Reset"}} {
		if *h.name == "" {
			*h.name = h.def
		} else if !validHeaderName(*h.name) {
			v.fail("envoy_rls."+h.field, "%q: want a header name, such as %s", *h.name, h.def)
		}
	}
	if e.ConfigDir == "" {
		return
	}
	if e.Listen == "" {
		f := FieldError{File: v.file, Line: v.line("envoy_rls.config_dir"), Field: "envoy_rls.config_dir",
			Msg: "set, but envoy_rls.listen is empty: no gRPC listener serves these descriptors; set listen, such as 127.0.0.1:8081"}
		v.c.Warnings = append(v.c.Warnings, f.Error())
	}
	dir := v.path(e.ConfigDir)
	e.dir = dir
	files, _, skipped, err := e.listFiles()
	if err != nil {
		v.fail("envoy_rls.config_dir", "cannot read the descriptor files: %v; want a directory of envoyproxy/ratelimit YAML files", err)
		return
	}
	if len(files) == 0 && len(skipped) > 0 {
		v.fail("envoy_rls.config_dir", "%s holds %d files (such as %s) but none named *.yaml or *.yml, so no descriptor would be loaded; rename them", dir, len(skipped), filepath.Base(skipped[0]))
		return
	}
	if len(files) > maxRLSFiles {
		v.fail("envoy_rls.config_dir", "%s holds %d descriptor files; want at most %d", dir, len(files), maxRLSFiles)
		return
	}
	l := &rlsLoader{v: v, domains: make(map[string]*RLSDescriptor), where: make(map[string]string), names: make(map[string]string), perSecond: make(map[string]bool)}
	for _, f := range files {
		l.file(f)
	}
	if len(l.domains) > 0 {
		l.overrides()
	}
	e.domains, e.policies, e.perSecond = l.domains, l.policies, l.perSecond
}

// RLSOverridePolicy is the name of the policy that counts the hits of
// descriptors whose request carries its own limit (Envoy's
// RateLimitDescriptor.limit) in the unit given (SECOND … YEAR). Its
// window holds far more than any limit, so it counts every hit and
// refuses none: the service compares the count with the request's limit.
func RLSOverridePolicy(unit string) string { return "rls:@limit/" + unit }

// RLSOverrideCapacity is what the window of an override policy of a unit
// of secs seconds holds: 2^32−1 hits, at most 10^9 a second.
func RLSOverrideCapacity(secs int64) int64 {
	return min(math.MaxUint32, 1_000_000_000*secs)
}

// overrides adds the policies of RLSOverridePolicy, one per unit.
func (l *rlsLoader) overrides() {
	for _, unit := range []string{"SECOND", "MINUTE", "HOUR", "DAY", "WEEK", "MONTH", "YEAR"} {
		secs := rlsUnits[unit]
		n := RLSOverrideCapacity(secs)
		p := decide.Policy{
			Name:          RLSOverridePolicy(unit),
			Cost:          1,
			Authenticated: []sluice.Rule{{Rate: float64(n) / float64(secs), Burst: n}},
			Algorithm:     algo.FixedWindow,
			CountDenied:   true,
			WindowKey:     true,
		}
		p.OnError = l.v.c.Store.onError
		l.policies = append(l.policies, p)
		l.perSecond[p.Name] = unit == "SECOND"
	}
}

// rlsLoader reads descriptor files into trees and policies; its errors
// name the descriptor file, the line and the field.
type rlsLoader struct {
	v         *validator
	domains   map[string]*RLSDescriptor
	where     map[string]string // domain -> file:line that defines it
	names     map[string]string // policy name -> file:line, for collisions
	policies  []decide.Policy
	perSecond map[string]bool // the policies of unit SECOND

	cur   string // the file being read
	lines map[string]int
}

func (l *rlsLoader) fail(path, format string, args ...any) {
	line := 0
	for p := path; p != ""; {
		if n, ok := l.lines[p]; ok {
			line = n
			break
		}
		i := strings.LastIndexAny(p, ".[")
		if i < 0 {
			break
		}
		p = p[:i]
	}
	l.v.errs.add(l.cur, line, path, fmt.Sprintf(format, args...))
}

func (l *rlsLoader) file(path string) {
	l.cur, l.lines = path, make(map[string]int)
	info, err := os.Stat(path)
	if err == nil && info.Size() > maxRLSFileBytes {
		err = fmt.Errorf("%d bytes; want at most %d", info.Size(), maxRLSFileBytes)
	}
	var data []byte
	if err == nil {
		data, err = os.ReadFile(path)
	}
	if err != nil {
		l.v.errs.add(path, 0, "", "cannot read this descriptor file: "+err.Error())
		return
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var root yaml.Node
	if err := dec.Decode(&root); err != nil {
		if errors.Is(err, io.EOF) {
			l.v.errs.add(path, 0, "domain", "the file is empty; want an envoyproxy/ratelimit descriptor file (domain: and descriptors:)")
		} else {
			l.v.errs.add(path, yamlErrorLine(err), "", "not valid YAML: "+err.Error())
		}
		return
	}
	var f rlsFile
	d := &decoder{file: path, errs: l.v.errs, lines: l.lines, bad: make(map[string]bool)}
	d.decode(&root, reflect.ValueOf(&f).Elem(), "")
	if d.nodes > maxNodes {
		return
	}
	if f.Domain == "" {
		l.fail("domain", "missing; want the domain Envoy's rate limit filter names, such as domain: edge")
		return
	}
	top := l.domains[f.Domain]
	if at, dup := l.where[f.Domain]; dup {
		if up := l.v.c.EnvoyRLS.Upstream; up == nil || !up.MergeDomains {
			l.fail("domain", "%q is also the domain of %s; want one file per domain (with `sluice ratelimit`, MERGE_DOMAIN_CONFIG=true merges them)", f.Domain, at)
			return
		}
		// MERGE_DOMAIN_CONFIG: this file's descriptors join the domain's,
		// as there; one given twice is refused below.
	} else {
		l.where[f.Domain] = fmt.Sprintf("%s:%d", path, l.lines["domain"])
		top = &RLSDescriptor{Children: map[string]*RLSDescriptor{}}
		l.domains[f.Domain] = top
	}
	l.descriptors(top, f.Domain, "rls:"+rlsNamePart(f.Domain), f.Domain, false, "descriptors", f.Descriptors)
}

// rlsNamePart is a domain, key or value as a part of a policy name, with
// each byte that a name may not hold as it is written %XX (hex): '/' and
// '=', which separate the parts, '@', which begins the names of
// RLSOverridePolicy, '%' itself, and what a name in a RateLimit header
// may not hold (a quote, a backslash, a byte outside printable ASCII).
// So no two limits a file may hold, nor a limit and an override policy,
// share a name (envoyproxy/ratelimit loads key a=b beside key a with value
// b, and a value of b/c beside value b with a child key c), and every name
// is one the headers can carry.
func rlsNamePart(s string) string {
	i := strings.IndexFunc(s, func(r rune) bool { return r >= utf8.RuneSelf || rlsNameEscaped(byte(r)) })
	if i < 0 {
		return s
	}
	b := []byte(s[:i])
	for j := i; j < len(s); j++ {
		if c := s[j]; rlsNameEscaped(c) {
			b = append(b, '%', "0123456789ABCDEF"[c>>4], "0123456789ABCDEF"[c&15])
		} else {
			b = append(b, c)
		}
	}
	return string(b)
}

func rlsNameEscaped(c byte) bool {
	return c < 0x20 || c >= 0x7f || strings.IndexByte(`/=@%"\`, c) >= 0
}

// descriptors loads list, at field path at, under parent, whose policy
// name so far is name and stats key stats; v2m: a descriptor above has
// value_to_metric.
func (l *rlsLoader) descriptors(parent *RLSDescriptor, domain, name, stats string, v2m bool, at string, list []rlsDescriptor) {
	for i := range list {
		dp := fmt.Sprintf("%s[%d]", at, i)
		d := &list[i]
		if d.Key == "" {
			l.fail(dp+".key", "missing; want the descriptor key Envoy sends, such as key: remote_address")
			continue
		}
		final := d.Key
		if d.Value != "" {
			final += "_" + d.Value
		}
		if _, dup := parent.Children[final]; dup {
			l.fail(dp+".key", "key %q with value %q is given twice at this level (envoyproxy/ratelimit's composite key %q); keep one", d.Key, d.Value, final)
			continue
		}
		node := &RLSDescriptor{Children: map[string]*RLSDescriptor{}}
		wildcard := strings.Contains(final, "*")
		if d.ShareThreshold {
			if !wildcard {
				l.fail(dp+".share_threshold", "needs a wildcard value holding a '*', such as value: files/*; %q has none", d.Value)
			} else {
				node.Shared = d.Value
			}
		}
		if wildcard {
			parent.Wildcards = append(parent.Wildcards, final)
			parent.wild = append(parent.wild, strings.Split(final, "*"))
		}
		path := name + "/" + rlsNamePart(d.Key)
		if d.Value != "" {
			path += "=" + rlsNamePart(d.Value)
		}
		node.ValueToMetric = d.ValueToMetric
		v2m := v2m || d.ValueToMetric
		if d.RateLimit != nil {
			node.Limit = l.limit(dp, path, d)
			node.Limit.StatsKey = stats + "." + final
			node.Limit.DetailedMetric = d.DetailedMetric
			node.Limit.DynamicStats = d.DetailedMetric || v2m
		}
		parent.Children[final] = node
		l.descriptors(node, domain, path, stats+"."+final, v2m, dp+".descriptors", d.Descriptors)
	}
}

// limit reads the rate_limit of d (at field path dp) and, when the store
// decides it, adds the policy named name.
func (l *rlsLoader) limit(dp, name string, d *rlsDescriptor) *RLSLimit {
	rl := d.RateLimit
	at := dp + ".rate_limit"
	lim := &RLSLimit{Unlimited: rl.Unlimited, Name: rl.Name, Shadow: d.ShadowMode, Quota: d.QuotaMode, Metadata: d.Metadata.s, File: l.cur, Line: l.lines[at]}
	unit := strings.ToUpper(rl.Unit)
	secs, validUnit := rlsUnits[unit]
	switch {
	case rl.Unlimited && validUnit:
		l.fail(at+".unit", "%q with unlimited: true; want no unit on an unlimited rate_limit", rl.Unit)
	case !rl.Unlimited && !validUnit:
		l.fail(at+".unit", "%q: want one of second, minute, hour, day, week, month (30 days), year (365 days)", rl.Unit)
	case validUnit:
		lim.Unit, lim.UnitSeconds = unit, secs
	}
	if rl.RequestsPerUnit != nil {
		n := *rl.RequestsPerUnit
		if n < 0 || n > math.MaxUint32 {
			l.fail(at+".requests_per_unit", "%d: want a whole number from 0 to %d", n, uint32(math.MaxUint32))
		} else {
			lim.RequestsPerUnit = uint32(n)
		}
	} else if !rl.Unlimited {
		f := FieldError{File: l.cur, Line: l.lines[at], Field: at + ".requests_per_unit",
			Msg: "missing: 0, so every hit is over the limit (as envoyproxy/ratelimit reads it); write requests_per_unit: 0 if that is meant"}
		l.v.c.Warnings = append(l.v.c.Warnings, f.Error())
	}
	for j, r := range rl.Replaces {
		rp := fmt.Sprintf("%s.replaces[%d].name", at, j)
		switch {
		case r.Name == "":
			l.fail(rp, "missing; want the name of the rate_limit this one replaces")
		case r.Name == rl.Name:
			l.fail(rp, "%q is this rate_limit's own name; a limit cannot replace itself", r.Name)
		default:
			lim.Replaces = append(lim.Replaces, r.Name)
		}
	}
	// sluice's additions.
	alg := rl.Algorithm
	if alg == "" {
		alg = algo.FixedWindow
		lim.Counted = true
	}
	if !slices.Contains(algo.Names(), alg) {
		l.fail(at+".algorithm", "%q: want one of %s (sluice's addition; without it, envoyproxy/ratelimit's fixed window)", alg, strings.Join(algo.Names(), ", "))
		return lim
	}
	burst := int64(lim.RequestsPerUnit)
	if rl.Burst != 0 {
		switch {
		case alg != algo.TokenBucket && alg != algo.LeakyBucket:
			l.fail(at+".burst", "%d: burst is for algorithm: token_bucket or leaky_bucket; %s admits requests_per_unit per unit", rl.Burst, alg)
		case rl.Burst < 1:
			l.fail(at+".burst", "%d: want 1 or more", rl.Burst)
		default:
			burst = rl.Burst
		}
	}
	onError := l.v.c.Store.onError
	if rl.OnError != "" {
		mode, ok := parseOnError(rl.OnError)
		if !ok {
			l.fail(at+".on_error", "%q: want one of open, closed, local (sluice's addition; without it, store.on_error)", rl.OnError)
		}
		onError = mode
	}
	if rl.Unlimited || lim.Unit == "" || lim.RequestsPerUnit == 0 {
		return lim // decided without the store
	}
	rule := sluice.Rule{Rate: float64(lim.RequestsPerUnit) / float64(secs), Burst: burst}
	if err := rule.Validate(); err != nil {
		l.fail(at, "%d per %s: %v", lim.RequestsPerUnit, strings.ToLower(unit), err)
		return lim
	}
	if at, dup := l.names[name]; dup {
		l.fail(dp+".key", "names the same limit as %s (%q); rename one key or value", at, name)
		return lim
	}
	l.names[name] = fmt.Sprintf("%s:%d", l.cur, l.lines[dp+".key"])
	lim.Policy = name
	// A refused hit of envoyproxy/ratelimit's window is counted by the
	// same store call that refuses it (CountDenied), not by a second one:
	// a request field, not an algorithm of its own, so the fixed window's
	// math, store and keys stay one.
	p := decide.Policy{
		Name:          name,
		Cost:          1,
		Authenticated: []sluice.Rule{rule},
		Shadow:        d.ShadowMode || d.QuotaMode,
		CountDenied:   lim.Counted,
		// Its counters on Redis are envoyproxy/ratelimit's, named by the
		// service (package envoyrls), so that the two can share a Redis.
		WindowKey: lim.Counted,
	}
	if alg != algo.TokenBucket {
		p.Algorithm = alg
	}
	p.OnError = onError
	l.policies = append(l.policies, p)
	l.perSecond[name] = unit == "SECOND"
	return lim
}
