package config

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Admin configures the admin API on the admin listener (docs/admin.md):
// runtime overrides of identities' limits, bucket resets and usage. It is
// served only with a token; without TokenFile the listener serves
// /metrics, /healthz and /readyz alone, and /v1/admin/ answers 404 saying
// why.
type Admin struct {
	// TokenFile holds the bearer token every admin call must carry
	// (Authorization: Bearer TOKEN), at least 16 bytes; surrounding white
	// space is trimmed. Relative to the configuration file.
	TokenFile string `yaml:"token_file"`
	// OverridesFile is where the memory store keeps runtime overrides, so
	// that they survive a restart (written atomically on every change,
	// read at start). Relative to the configuration file. Empty: they last
	// until the process ends. The Redis store keeps them in Redis instead.
	OverridesFile string `yaml:"overrides_file"`
	// TLS of the admin listener, in place of the top-level tls (tls.go).
	TLS *TLS `yaml:"tls"`
	// Pprof serves Go's profiles (/debug/pprof/) on the admin listener,
	// to loopback peers only (kubectl port-forward, ssh -L): a profile
	// costs CPU for as long as the caller asks and shows the code, the
	// heap and the goroutines, so it is off by default and never answered
	// to another address, whatever the listener is bound to.
	Pprof bool `yaml:"pprof"`

	token         []byte // read from TokenFile by Load
	overridesFile string // OverridesFile resolved against the file's directory
}

// Token returns the admin token, or nil when the admin API is off.
func (a *Admin) Token() []byte { return a.token }

// Enabled reports whether the admin API is served.
func (a *Admin) Enabled() bool { return a.token != nil }

// OverridesPath is OverridesFile resolved against the configuration's
// directory, or "" when none is set.
func (a *Admin) OverridesPath() string { return a.overridesFile }

func (v *validator) admin() {
	a := &v.c.Admin
	if a.TokenFile != "" {
		a.token = v.token("admin.token_file", a.TokenFile)
	}
	if a.OverridesFile == "" {
		return
	}
	a.overridesFile = v.path(a.OverridesFile)
	if v.c.Store.Type == "redis" {
		v.warn("admin.overrides_file", "is not used with store.type redis: runtime overrides live in Redis; remove it, or use store.type memory")
		return
	}
	dir := filepath.Dir(a.overridesFile)
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		v.fail("admin.overrides_file", "%q: directory %q does not exist; want a file in an existing, writable directory", a.OverridesFile, dir)
		return
	}
	if fi, err := os.Stat(a.overridesFile); err == nil && fi.IsDir() {
		v.fail("admin.overrides_file", "%q is a directory; want a file (it is created at the first change)", a.OverridesFile)
	}
}

// warn records something valid but probably not meant, as check-config
// prints it.
func (v *validator) warn(path, format string, args ...any) {
	e := FieldError{File: v.file, Line: v.line(path), Field: path, Msg: fmt.Sprintf(format, args...)}
	v.c.Warnings = append(v.c.Warnings, e.Error())
}

// token reads the bearer token of a token_file field: one line of at
// least 16 printable bytes. It returns nil, and reports why, when the file
// holds no usable token.
func (v *validator) token(field, file string) []byte {
	path := v.path(file)
	data, err := os.ReadFile(path)
	switch {
	case err != nil:
		v.fail(field, "cannot read the token: %v", err)
	case len(data) > maxTokenBytes:
		v.fail(field, "%s is %d bytes; want one token of at most %d bytes", path, len(data), maxTokenBytes)
	default:
		token := strings.TrimSpace(string(data))
		switch {
		case token == "":
			v.fail(field, "%s is empty; want a token such as the output of: openssl rand -hex 32", path)
		case len(token) < 16:
			v.fail(field, "the token is %d bytes; want at least 16 (openssl rand -hex 32 makes one)", len(token))
		case strings.ContainsAny(token, " \t\r\n") || !isPrintable(token):
			v.fail(field, "the token holds white space or non-printable bytes; want one line of printable ASCII that can follow \"Bearer \"")
		default:
			return []byte(token)
		}
	}
	return nil
}
