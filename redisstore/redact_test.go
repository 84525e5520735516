package redisstore

import (
	"strings"
	"testing"
)

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"redis://app:pw@h:6379/0":        "redis://app:xxxxx@h:6379/0",
		"rediss://:pw@h:6380":            "rediss://:xxxxx@h:6380",
		"redis://app@h:6379/0":           "redis://app@h:6379/0",
		"redis://h:6379/0":               "redis://h:6379/0",
		"redis://a:p@ss@h:1/0":           "redis://a:xxxxx@h:1/0",
		"redis://a:pw@h:port:bad/0?x=@y": "redis://a:xxxxx@h:port:bad/0?x=@y",
		"not a url":                      "not a url",
		"":                               "",
	} {
		if got := RedactURL(in); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestNewClientErrorRedactsPassword: a URL that does not parse is quoted
// in the error without its password.
func TestNewClientErrorRedactsPassword(t *testing.T) {
	for _, u := range []string{"redis://app:hunter2@h:port:bad/0", "ftp://app:hunter2@h:1/0", "redis://:hunter2@h:1/x"} {
		_, err := NewClient(ClientOptions{URL: u})
		if err == nil || strings.Contains(err.Error(), "hunter2") || !strings.Contains(err.Error(), "xxxxx") {
			t.Errorf("NewClient(%q) error = %v; want one with the password redacted", u, err)
		}
	}
}
