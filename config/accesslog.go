package config

import (
	"os"
	"path/filepath"
)

// AccessLog is the traffic listener's access log: one line per request,
// proxied or refused, with the policy, the caller's class and the
// decision, in a form `sluice advise` reads back.
type AccessLog struct {
	// Path is the file lines are appended to, relative to the
	// configuration file; "-" is standard output. Empty (the default):
	// no access log.
	Path string `yaml:"path"`
	// Format is combined (the default: Apache/nginx combined with
	// sluice's fields quoted after it) or json (one object a line).
	Format string `yaml:"format"`

	file string // Path resolved against the configuration's directory
}

// Access log formats.
const (
	AccessLogCombined = "combined"
	AccessLogJSON     = "json"
	AccessLogStdout   = "-"
)

// Enabled reports whether an access log is written.
func (a *AccessLog) Enabled() bool { return a.Path != "" }

// File is the path to write to: Path resolved against the directory of
// the configuration file, or "-" for standard output.
func (a *AccessLog) File() string {
	if a.file == "" {
		return a.Path
	}
	return a.file
}

func (a *AccessLog) defaults() {
	if a.Format == "" {
		a.Format = AccessLogCombined
	}
}

func (v *validator) accessLog() {
	a := &v.c.AccessLog
	v.oneOf("access_log.format", a.Format, AccessLogCombined, AccessLogJSON)
	if a.Path == "" || a.Path == AccessLogStdout {
		return
	}
	a.file = v.path(a.Path)
	dir := filepath.Dir(a.file)
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		v.fail("access_log.path", "%q: directory %q does not exist; want a file in an existing directory, or \"-\" for standard output", a.Path, dir)
		return
	}
	if fi, err := os.Stat(a.file); err == nil && fi.IsDir() {
		v.fail("access_log.path", "%q is a directory; want a file", a.Path)
	}
}
