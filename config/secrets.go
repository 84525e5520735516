package config

import (
	"bytes"
	"os"
	"strings"

	"github.com/sluicehq/sluice/redisstore"
)

// Secret is a value that must not be printed: its String, GoString and
// text forms say [redacted]; Reveal returns it.
type Secret string

// String returns [redacted] (or "" for no secret), so %v and %+v of a
// Config never show it.
func (s Secret) String() string { return s.mask() }

// GoString does the same for %#v.
func (s Secret) GoString() string { return `"` + s.mask() + `"` }

// MarshalText keeps the secret out of JSON and YAML dumps of a Config.
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.mask()), nil }

// Reveal returns the secret itself, for the one place that needs it.
func (s Secret) Reveal() string { return string(s) }

func (s Secret) mask() string {
	if s == "" {
		return ""
	}
	return "[redacted]"
}

// redisPassword reads store.redis.password_file or password_env into
// Store.Redis.Password. Messages name the file or the variable, never
// what is in it.
func (v *validator) redisPassword() {
	r := &v.c.Store.Redis
	if r.PasswordFile != "" && r.PasswordEnv != "" {
		v.fail("store.redis.password_env", "set with password_file; want one place for the password")
		return
	}
	if (r.PasswordFile != "" || r.PasswordEnv != "") && urlHasPassword(r.URL) {
		v.fail("store.redis.url", "%q has a password, and password_file or password_env gives another; keep one (the url is better without it)", redisstore.RedactURL(r.URL))
		return
	}
	switch {
	case r.PasswordFile != "":
		path := v.path(r.PasswordFile)
		data, err := os.ReadFile(path)
		if err != nil {
			v.fail("store.redis.password_file", "cannot read the password: %v", err)
			return
		}
		secret := bytes.TrimRight(data, "\r\n")
		if len(secret) == 0 {
			v.fail("store.redis.password_file", "%s is empty; want the password, alone on its line", path)
			return
		}
		r.Password = Secret(secret)
	case strings.HasPrefix(r.PasswordEnv, "$"):
		v.fail("store.redis.password_env", "%q: want the variable's name without $, such as REDIS_PASSWORD", r.PasswordEnv)
	case r.PasswordEnv != "":
		secret, ok := os.LookupEnv(r.PasswordEnv)
		if !ok || secret == "" {
			v.fail("store.redis.password_env", "the environment variable %s is not set or empty; want the password in it", r.PasswordEnv)
			return
		}
		r.Password = Secret(secret)
	}
}

// urlHasPassword says whether a redis:// URL carries a password.
func urlHasPassword(u string) bool {
	return redisstore.RedactURL(u) != u
}
