package redisstore

import "strings"

// RedactURL returns the Redis URL s with its password replaced by xxxxx,
// for messages and logs: redis://app:xxxxx@host:6379/0. It works on URLs
// that do not parse, too, since those are the ones that end up in errors.
func RedactURL(s string) string {
	scheme := strings.Index(s, "://")
	if scheme < 0 {
		return s
	}
	rest := s[scheme+3:]
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	at := strings.LastIndexByte(rest[:end], '@')
	if at < 0 {
		return s
	}
	user, _, hasPassword := strings.Cut(rest[:at], ":")
	if !hasPassword {
		return s
	}
	return s[:scheme+3] + user + ":xxxxx" + rest[at:]
}
