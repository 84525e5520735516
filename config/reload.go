package config

import "go.yaml.in/yaml/v3"

// Reload says how `sluice serve` notices that its files changed. SIGHUP
// always reloads; the watch (on unless turned off) reloads without a
// signal when the configuration file or the descriptor files of
// envoy_rls.config_dir change, as a Kubernetes ConfigMap update does.
type Reload struct {
	// Watch turns the file watch on or off. Unset means on.
	Watch *bool `yaml:"watch"`
}

// Watching reports whether the files are watched.
func (r Reload) Watching() bool { return r.Watch == nil || *r.Watch }

// IdentityFiles are the files that identity names (api_keys_file,
// jwt.hs256_secret_file, jwt.public_key_file), resolved against the
// configuration file's directory: a reload reads them again, so the watch
// watches them too (a key revoked in a Secret must not wait for a signal).
func (c *Config) IdentityFiles() []string { return c.identityFiles }

// Empty reports whether the file held no YAML value at all: nothing, or
// only comments.
func (c *Config) Empty() bool { return c.empty }

// Incomplete says what makes the file look cut short rather than meant:
// it is empty, or it has no policies key. Both are valid YAML and decode
// to a gateway that limits nothing, which is how a truncated write reads;
// check-config reports them, and a reload refuses them while policies are
// running (internal/gateway). A policies key with no value counts as none;
// an explicit "policies: []" is complete. It returns nil when the file is
// complete.
func (c *Config) Incomplete() *FieldError {
	switch {
	case c.empty:
		return &FieldError{File: c.File, Msg: "the file is empty (or only comments); want a configuration with a policies key (policies: [] when nothing is to be limited)"}
	case !c.policiesSet:
		return &FieldError{File: c.File, Line: c.policiesLine, Field: "policies", Msg: "missing or without a value; want the policies to enforce, or policies: [] when nothing is to be limited (a file cut short has none)"}
	}
	return nil
}

// hasPolicies reports whether the document root has a policies key with a
// value: "policies:" with nothing after it is where a file cut short may
// end, so it does not count; "policies: []" does.
func hasPolicies(root *yaml.Node) bool {
	if root.Kind != yaml.DocumentNode || len(root.Content) == 0 || root.Content[0].Kind != yaml.MappingNode {
		return false
	}
	m := root.Content[0]
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == "policies" {
			return m.Content[i+1].Tag != "!!null"
		}
	}
	return false
}
