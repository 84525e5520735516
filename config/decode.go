package config

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// decoder fills Go values from a yaml.Node tree, field by field, so that
// every error can name the line and the path of the field (policies[0].cost)
// and unknown fields are caught with the names that would be valid.
type decoder struct {
	file  string
	errs  *Errors
	lines map[string]int // field path -> line of its value
	nodes int            // nodes visited, aliases expanded: bounds alias bombs
	// bad holds the paths already reported, and the field an unknown one
	// was probably meant to be, so that validation, which runs on the
	// same file in the same pass, does not report them again as missing
	// or zero.
	bad map[string]bool
	// env holds the variables each node's value was expanded from
	// (env.go); fromEnv the same by field path, for redactEnv.
	env     map[*yaml.Node][]envUse
	fromEnv map[string][]envUse
}

// maxNodes bounds the work on one file; a real configuration has hundreds.
const maxNodes = 100_000

var durationType = reflect.TypeOf(time.Duration(0))

func (d *decoder) fail(line int, path, format string, args ...any) {
	d.bad[path] = true
	if len(*d.errs) < maxErrors {
		d.errs.add(d.file, line, path, fmt.Sprintf(format, args...))
	}
}

// maxErrors is how many problems one file reports at most.
const maxErrors = 50

// decode fills v (addressable) from n at path.
func (d *decoder) decode(n *yaml.Node, v reflect.Value, path string) {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if d.nodes++; d.nodes > maxNodes {
		if d.nodes == maxNodes+1 {
			d.fail(n.Line, path, "the file expands to more than %d values (aliases?); write it out plainly", maxNodes)
		}
		return
	}
	if n.Kind == yaml.DocumentNode {
		if len(n.Content) == 0 {
			return
		}
		d.decode(n.Content[0], v, path)
		return
	}
	if path != "" {
		d.lines[path] = n.Line
	}
	if uses := d.env[n]; uses != nil {
		d.fromEnv[path] = append(d.fromEnv[path], uses...)
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return // an empty value leaves the default
	}
	if nd, ok := v.Addr().Interface().(nodeDecoder); ok {
		nd.decodeNode(d, n, path)
		return
	}
	if v.Kind() == reflect.Pointer {
		p := reflect.New(v.Type().Elem())
		d.decode(n, p.Elem(), path)
		v.Set(p)
		return
	}
	if v.Type() == durationType {
		s, ok := d.scalar(n, path, "a duration such as 50ms, 2s or 1m30s")
		if !ok {
			return
		}
		dur, err := time.ParseDuration(s)
		if err != nil {
			d.fail(n.Line, path, "%q: want a duration such as 50ms, 2s or 1m30s", s)
			return
		}
		v.SetInt(int64(dur))
		return
	}
	switch v.Kind() {
	case reflect.Struct:
		d.decodeStruct(n, v, path)
	case reflect.Map:
		d.decodeMap(n, v, path)
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			d.fail(n.Line, path, "want a list (- item, or [a, b]), not %s", kindName(n))
			return
		}
		s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
		for i, item := range n.Content {
			d.decode(item, s.Index(i), path+"["+strconv.Itoa(i)+"]")
		}
		v.Set(s)
	case reflect.String:
		if s, ok := d.scalar(n, path, "a string"); ok {
			v.SetString(s)
		}
	case reflect.Int, reflect.Int64:
		s, ok := d.scalar(n, path, "an integer")
		if !ok {
			return
		}
		i, err := strconv.ParseInt(strings.ReplaceAll(s, "_", ""), 0, 64)
		if err != nil {
			d.fail(n.Line, path, "%q: want an integer", s)
			return
		}
		v.SetInt(i)
	case reflect.Bool:
		s, ok := d.scalar(n, path, "true or false")
		if !ok {
			return
		}
		switch strings.ToLower(s) {
		case "true", "yes", "on":
			v.SetBool(true)
		case "false", "no", "off":
			v.SetBool(false)
		default:
			d.fail(n.Line, path, "%q: want true or false", s)
		}
	default:
		panic("config: cannot decode into " + v.Type().String())
	}
}

func (d *decoder) scalar(n *yaml.Node, path, want string) (string, bool) {
	if n.Kind != yaml.ScalarNode {
		d.fail(n.Line, path, "want %s, not %s", want, kindName(n))
		return "", false
	}
	return n.Value, true
}

func (d *decoder) decodeStruct(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.MappingNode {
		d.fail(n.Line, path, "want a mapping (key: value), not %s", kindName(n))
		return
	}
	t := v.Type()
	fields := make(map[string]int, t.NumField())
	var names []string
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
		if name == "" || name == "-" {
			continue
		}
		fields[name] = i
		names = append(names, name)
	}
	seen := make(map[string]bool, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		fieldPath := k.Value
		if path != "" {
			fieldPath = path + "." + k.Value
		}
		if k.Kind == yaml.ScalarNode && k.Value == "<<" && k.Tag == "!!merge" {
			d.fail(k.Line, path, "merge keys (<<) are not supported; write the fields out")
			continue
		}
		idx, ok := fields[k.Value]
		if !ok {
			if seen[k.Value] {
				continue // reported at its first occurrence
			}
			seen[k.Value] = true
			msg := "unknown field"
			if s := closest(k.Value, names); s != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", s)
				if !seen[s] {
					d.bad[joinPath(path, s)] = true // reported: not also "missing"
				}
			}
			d.fail(k.Line, fieldPath, "%s; valid here: %s", msg, strings.Join(names, ", "))
			continue
		}
		if seen[k.Value] {
			d.fail(k.Line, fieldPath, "set twice; keep one")
			continue
		}
		seen[k.Value] = true
		d.decode(val, v.Field(idx), fieldPath)
	}
}

func joinPath(path, field string) string {
	if path == "" {
		return field
	}
	return path + "." + field
}

// reported says whether path, or a field that holds it, already has a
// decoding error.
func (d *decoder) reported(path string) bool {
	for p := path; ; {
		if d.bad[p] {
			return true
		}
		i := strings.LastIndexAny(p, ".[")
		if i < 0 {
			return d.bad[""]
		}
		p = p[:i]
	}
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return fmt.Sprintf("%q", n.Value)
	}
	return "this"
}

// closest returns the name in names nearest to s by edit distance, if it
// is near enough to be a typo.
func closest(s string, names []string) string {
	best, bestDist := "", 3
	for _, name := range names {
		if d := editDistance(s, name); d < bestDist {
			best, bestDist = name, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
