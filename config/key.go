package config

import (
	"fmt"
	"reflect"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/decide"
)

// Key is a policy's key: what its buckets are keyed by, in place of the
// identity rules (docs/http.md, "Keys"). It is written as the word global,
// one bucket for every caller of the policy:
//
//	key: global
//
// or as a list of request attributes, combined in order:
//
//	key: [{header: X-Tenant}, {path: tenant}, {claim: org}, {client_ip: true}]
//
// Unset, the identity rules apply: anonymous callers by client IP,
// authenticated ones by identity.
type Key struct {
	Global bool
	Parts  []KeyPart
}

// KeyPart is one attribute of a key; exactly one field is set.
type KeyPart struct {
	Header   string `yaml:"header"`    // a request header
	Path     string `yaml:"path"`      // a wildcard of the policy's match pattern
	Claim    string `yaml:"claim"`     // a claim of the caller's verified JWT
	ClientIP bool   `yaml:"client_ip"` // the client address (after trusted_proxies)
}

// keyExample is what a key may look like, for messages.
const keyExample = "global, or a list of attributes such as [{header: X-Tenant}, {path: tenant}, {claim: org}, {client_ip: true}]"

// nodeDecoder is a field that decodes its own YAML node: one that may be
// written in more than one shape.
type nodeDecoder interface {
	decodeNode(d *decoder, n *yaml.Node, path string)
}

// decodeNode reads global, or a list of attributes.
func (k *Key) decodeNode(d *decoder, n *yaml.Node, path string) {
	switch n.Kind {
	case yaml.ScalarNode:
		if n.Value == "global" {
			k.Global = true
			return
		}
		hint := ""
		switch {
		case closest(n.Value, []string{"global"}) != "":
			hint = ` (did you mean "global"?)`
		case strings.Contains(n.Value, ":"):
			hint = " (an attribute goes in a list: [{header: X-Tenant}])"
		}
		d.fail(n.Line, path, "%q%s: want %s", n.Value, hint, keyExample)
	case yaml.SequenceNode:
		d.decode(n, reflect.ValueOf(&k.Parts).Elem(), path)
		if len(n.Content) == 0 {
			d.fail(n.Line, path, "an empty list keys by nothing; want %s, or leave key out for the identity rules", keyExample)
		}
	default:
		d.fail(n.Line, path, "want %s, not %s", keyExample, kindName(n))
	}
}

// key checks the key of the policy p at field at against its pattern and
// the identity configuration.
func (v *validator) key(at string, p *Policy) {
	at += ".key"
	if len(p.Key.Parts) > 8 {
		v.fail(at, "%d attributes; want at most 8", len(p.Key.Parts))
	}
	seen := make(map[string]int)
	for i, kp := range p.Key.Parts {
		field := fmt.Sprintf("%s[%d]", at, i)
		var set []string
		for name, ok := range map[string]bool{"header": kp.Header != "", "path": kp.Path != "", "claim": kp.Claim != "", "client_ip": kp.ClientIP} {
			if ok {
				set = append(set, name)
			}
		}
		if len(set) != 1 {
			v.fail(field, "want exactly one of header, path, claim and client_ip: true in each item, such as {header: X-Tenant}; this one sets %d", len(set))
			continue
		}
		name := decide.KeyPart{Header: kp.Header, Path: kp.Path, Claim: kp.Claim, ClientIP: kp.ClientIP}.Name()
		if j, dup := seen[name]; dup {
			v.fail(field, "%s is also key[%d]; keep one", name, j)
		}
		seen[name] = i
		switch {
		case kp.Header != "" && !validHeaderName(kp.Header):
			v.fail(field+".header", "%q: want a header name such as X-Tenant", kp.Header)
		case kp.Path != "":
			if _, _, err := decide.PatternWildcard(p.Match, kp.Path); err != nil {
				v.fail(field+".path", "%v (the name in braces, without them)", err)
			}
		case kp.Claim != "" && v.c.Identity.JWT.HS256SecretFile == "" && v.c.Identity.JWT.PublicKeyFile == "":
			v.fail(field+".claim", "%q: claims come only from verified tokens; configure identity.jwt (hs256_secret_file or public_key_file)", kp.Claim)
		}
	}
}

// options is the key as package decide takes it.
func (k Key) options() decide.Key {
	out := decide.Key{Global: k.Global}
	for _, kp := range k.Parts {
		out.Parts = append(out.Parts, decide.KeyPart{Header: kp.Header, Path: kp.Path, Claim: kp.Claim, ClientIP: kp.ClientIP})
	}
	return out
}
