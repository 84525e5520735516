package config

import (
	"fmt"
	"io"
	"mime"
	"os"
	"strings"
	"time"
	"unicode/utf8"
)

// What a 429 and the rate limit headers look like, beside `headers:`:
//
//	x_ratelimit_headers: false   # also X-RateLimit-Limit, -Remaining, -Reset (a Unix time)
//	retry_after_jitter: 0s       # up to this much added to each 429's Retry-After
//	deny_body: {file: "", content_type: ""}   # a 429 body of your own
//
// and, for JWTs, identity.jwt.require_exp and identity.jwt.max_age.

// DenyBody is a 429 body of your own: a file sent as it is, except that
// every {{retry_after}} becomes the seconds of the response's Retry-After.
// Clients that prefer application/problem+json still get the draft's
// problem type.
type DenyBody struct {
	File        string `yaml:"file"`         // relative to the configuration file; at most 64 KiB
	ContentType string `yaml:"content_type"` // its media type, such as text/html; charset=utf-8

	body []byte
}

const (
	maxDenyBody         = 64 << 10
	maxRetryAfterJitter = time.Hour
)

// responses validates the fields of this file; validate calls it.
func (v *validator) responses() {
	c := v.c
	if c.RetryAfterJitter < 0 || c.RetryAfterJitter > maxRetryAfterJitter {
		v.fail("retry_after_jitter", "%v: want 0s (off) up to %v, such as 2s", c.RetryAfterJitter, maxRetryAfterJitter)
	}
	j := c.Identity.JWT
	if j.MaxAge < 0 {
		v.fail("identity.jwt.max_age", "%v: want 0s (no bound) or a duration such as 24h", j.MaxAge)
	}
	if j.HS256SecretFile == "" && j.PublicKeyFile == "" {
		if j.RequireExp {
			v.fail("identity.jwt.require_exp", "set, but no JWT key is configured; want hs256_secret_file or public_key_file too")
		}
		if j.MaxAge > 0 {
			v.fail("identity.jwt.max_age", "set, but no JWT key is configured; want hs256_secret_file or public_key_file too")
		}
	}
	b := &c.DenyBody
	if b.File == "" {
		if b.ContentType != "" {
			v.fail("deny_body.content_type", "set without deny_body.file; want both, or neither")
		}
		return
	}
	if b.ContentType == "" {
		v.fail("deny_body.content_type", "missing; want the media type of %s, such as text/html; charset=utf-8", b.File)
	} else if _, _, err := mime.ParseMediaType(b.ContentType); err != nil || strings.ContainsAny(b.ContentType, "\r\n") {
		v.fail("deny_body.content_type", "%q is not a media type; want one such as text/html; charset=utf-8 or application/json", b.ContentType)
	}
	data, err := readSmall(v.path(b.File), maxDenyBody)
	switch {
	case err != nil:
		v.fail("deny_body.file", "%v", err)
	case strings.HasPrefix(b.ContentType, "text/") && !utf8.Valid(data):
		v.fail("deny_body.file", "%s is not UTF-8 text; want a text file for content type %s", b.File, b.ContentType)
	default:
		b.body = data
	}
}

// readSmall reads the file at path, refusing one larger than limit bytes.
func readSmall(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("cannot read it: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("cannot read it: %w", err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s is larger than %d bytes; want a smaller file", path, limit)
	}
	return data, nil
}
