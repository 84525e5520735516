package config

import (
	"os"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/redisstore"
)

// Values from the environment. In any scalar value of the file (never a
// key), ${VAR} is replaced by the variable's value and ${VAR:-default} by
// its value, or by default when it is unset or empty; $$ is a literal $.
// A $ followed by anything else stays as it is. A variable that is unset
// and has no default is an error naming the file, the line, the field and
// the variable.
//
// What came from the environment may be a secret (a Redis URL with its
// password), so no message of Parse shows it: an error or a warning about
// a field names the variable in place of its value.

// envUse is one variable whose value went into a field.
type envUse struct {
	name, value string
}

// lookupEnv is os.LookupEnv; tests of the package replace it.
var lookupEnv = os.LookupEnv

// expandEnv expands the variables in every scalar value under n (a
// document), in place. It returns the variables each expanded node used;
// problems go to errs, and their field paths to failed, so that the value
// left unexpanded is not reported again as invalid.
func expandEnv(file string, n *yaml.Node, errs *Errors, failed func(path string)) map[*yaml.Node][]envUse {
	x := &envExpander{file: file, errs: errs, failed: failed, used: map[*yaml.Node][]envUse{}, seen: map[*yaml.Node]bool{}}
	x.walk(n, "")
	return x.used
}

type envExpander struct {
	file   string
	errs   *Errors
	failed func(path string)
	used   map[*yaml.Node][]envUse
	seen   map[*yaml.Node]bool // an anchored node is expanded once, however many aliases name it
}

func (x *envExpander) walk(n *yaml.Node, path string) {
	if n == nil || x.seen[n] || len(*x.errs) >= maxErrors {
		return
	}
	x.seen[n] = true
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			x.walk(c, path)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			x.walk(n.Content[i+1], joinPath(path, n.Content[i].Value))
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			x.walk(c, path+"["+strconv.Itoa(i)+"]")
		}
	case yaml.ScalarNode:
		if !strings.Contains(n.Value, "$") {
			return
		}
		v, uses, msg := expandValue(n.Value, lookupEnv)
		if msg != "" {
			x.errs.add(x.file, n.Line, path, msg)
			x.failed(path)
			return
		}
		n.Value = v
		if len(uses) > 0 {
			x.used[n] = uses
		}
	}
}

// expandValue expands s; msg says what is wrong when it cannot.
func expandValue(s string, lookup func(string) (string, bool)) (v string, uses []envUse, msg string) {
	var b strings.Builder
	for i := 0; i < len(s); {
		rest := s[i:]
		switch {
		case strings.HasPrefix(rest, "$$"):
			b.WriteByte('$')
			i += 2
			continue
		case !strings.HasPrefix(rest, "${"):
			b.WriteByte(s[i])
			i++
			continue
		}
		end := strings.IndexByte(rest, '}')
		if end < 0 {
			return "", nil, "a ${ without its closing }; want ${VAR} or ${VAR:-default}, or $${ for a literal ${"
		}
		name, def, hasDef := strings.Cut(rest[2:end], ":-")
		if !validEnvName(name) {
			return "", nil, strconv.Quote(name) + " in ${...}: want a variable name of letters, digits and _ that does not start with a digit, as in ${REDIS_URL} or ${RATE:-10/s}"
		}
		val, ok := lookup(name)
		switch {
		case hasDef && val == "":
			val = def // written in the file: not from the environment
		case !ok:
			return "", nil, "${" + name + "} is not set in the environment and has no default; set " + name + " or write ${" + name + ":-default}"
		default:
			uses = append(uses, envUse{name: name, value: val})
		}
		b.WriteString(val)
		i += end + 1
	}
	return b.String(), uses, ""
}

func validEnvName(s string) bool {
	if s == "" || s[0] >= '0' && s[0] <= '9' {
		return false
	}
	for _, r := range s {
		if r != '_' && (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') && (r < '0' || r > '9') {
			return false
		}
	}
	return true
}

// minRedacted is the length from which a value from the environment is
// hidden in every message, not only in those about its own field: shorter
// values (a port, a burst of 5) would hide unrelated words and numbers.
const minRedacted = 4

// envValues are the values of a file that came from the environment,
// by field path.
type envValues struct {
	byField map[string][]envUse
	all     []envUse // the longest value first, so that one holding another is hidden whole
}

func newEnvValues(byField map[string][]envUse) *envValues {
	e := &envValues{byField: byField}
	for _, uses := range byField {
		e.all = append(e.all, uses...)
	}
	slices.SortFunc(e.all, func(a, b envUse) int { return len(b.value) - len(a.value) })
	return e
}

// hide replaces in s the values from the environment with the names of
// their variables: every value of field (or of a field below it), and
// every other value of minRedacted bytes or more.
func (e *envValues) hide(field, s string) string {
	if e == nil || len(e.all) == 0 {
		return s
	}
	var own []envUse
	if field != "" {
		for p, uses := range e.byField {
			if p == field || strings.HasPrefix(p, field+".") || strings.HasPrefix(p, field+"[") {
				own = append(own, uses...)
			}
		}
	}
	for _, u := range e.all {
		if u.value != "" && (len(u.value) >= minRedacted || slices.Contains(own, u)) {
			s = strings.ReplaceAll(s, u.value, "${"+u.name+"}")
			// A URL is shown with its password masked; the rest of it
			// came from the environment all the same.
			if masked := redisstore.RedactURL(u.value); masked != u.value {
				s = strings.ReplaceAll(s, masked, "${"+u.name+"}")
			}
		}
	}
	return s
}

// redact hides the values from the environment in the messages of errs
// and in warnings.
func (e *envValues) redact(errs Errors, warnings []string) {
	for _, f := range errs {
		f.Msg = e.hide(f.Field, f.Msg)
	}
	for i, w := range warnings {
		warnings[i] = e.hide("", w)
	}
}

// Redact returns s, a message or a value about field (a path such as
// store.redis.url; empty when about none), with every value that came
// from the environment replaced by the name of its variable, ${VAR}: for
// what the gateway logs.
func (c *Config) Redact(field, s string) string { return c.env.hide(field, s) }
