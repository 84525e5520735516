package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const secretPassword = "hunter2-s3cret"

// TestRedisPasswordFromFileAndEnv: the password comes from a file (relative
// to the configuration, trailing newline dropped) or an environment
// variable, and no way of printing the Config shows it.
func TestRedisPasswordFromFileAndEnv(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "redis.pw"), []byte(secretPassword+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SLUICE_TEST_REDIS_PW", secretPassword)
	for _, src := range []string{"password_file: redis.pw", "password_env: SLUICE_TEST_REDIS_PW"} {
		data := "store:\n  type: redis\n  redis:\n    url: redis://10.0.0.1:6379/0\n    username: app\n    " + src + "\n"
		c, err := Parse(filepath.Join(dir, "sluice.yaml"), dir, []byte(data))
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		if got := c.Store.Redis.Password.Reveal(); got != secretPassword || c.Store.Redis.Username != "app" {
			t.Errorf("%s: password %q, username %q", src, got, c.Store.Redis.Username)
		}
		js, _ := json.Marshal(c)
		for _, s := range []string{fmt.Sprintf("%v", c), fmt.Sprintf("%+v", c), fmt.Sprintf("%#v", c), fmt.Sprint(c.Store.Redis.Password), string(js)} {
			if strings.Contains(s, secretPassword) {
				t.Errorf("%s: the password is printed: %s", src, s)
			}
		}
	}
}

// TestRedisSecretsNeverInErrors: every error about the store's URL or its
// password says what is wrong without the password.
func TestRedisSecretsNeverInErrors(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "redis.pw"), []byte(secretPassword), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "empty.pw"), []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	redis := "store:\n  type: redis\n  redis:\n"
	for _, tc := range []struct{ name, data, want string }{
		{"url of the wrong scheme", redis + "    url: \"ftp://app:" + secretPassword + "@h:1\"\n", `store.redis.url: "ftp://app:xxxxx@h:1"`},
		{"url that does not parse", redis + "    url: \"redis://app:" + secretPassword + "@h:port:bad/0\"\n", `store.redis.url: "redis://app:xxxxx@h:port:bad/0"`},
		{"database not a number", redis + "    url: \"redis://:" + secretPassword + "@h:1/abc\"\n", `store.redis.url: "redis://:xxxxx@h:1/abc": database "abc"`},
		{"cluster database", redis + "    url: \"redis://:" + secretPassword + "@h:1/3\"\n    cluster_addrs: [h:1]\n", `"redis://:xxxxx@h:1/3": a Redis Cluster has only database 0`},
		{"two passwords", redis + "    url: \"redis://app:" + secretPassword + "@h:1/0\"\n    password_file: redis.pw\n", `"redis://app:xxxxx@h:1/0" has a password, and password_file`},
		{"file and env", redis + "    url: redis://h:1/0\n    password_file: redis.pw\n    password_env: HOME\n", "store.redis.password_env: set with password_file"},
		{"missing file", redis + "    url: redis://h:1/0\n    password_file: nope.pw\n", "store.redis.password_file: cannot read the password"},
		{"empty file", redis + "    url: redis://h:1/0\n    password_file: empty.pw\n", "empty.pw is empty"},
		{"variable written with $", redis + "    url: redis://h:1/0\n    password_env: $REDIS_PW\n", `"$REDIS_PW": want the variable's name without $`},
		{"unset variable", redis + "    url: redis://h:1/0\n    password_env: SLUICE_TEST_NOT_SET\n", "SLUICE_TEST_NOT_SET is not set or empty"},
	} {
		_, err := Parse("bad.yaml", dir, []byte(tc.data))
		var es Errors
		if !errors.As(err, &es) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want %q", tc.name, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), secretPassword) {
			t.Errorf("%s: the password is in the error: %v", tc.name, err)
		}
	}
}
