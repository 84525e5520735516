package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// TestServeRedisPasswordFile runs the gateway on a Redis that only an ACL
// user may use, with the password in a file and the URL without it: the
// decision API's buckets land in that Redis. With the wrong password in
// the file, serve refuses to start, and says so without the password.
func TestServeRedisPasswordFile(t *testing.T) {
	const password = "pw-Correct-Horse-4417"
	srv := redistest.Start(t, redistest.WithACLUser("app", password))
	dir := t.TempDir()
	pwFile := filepath.Join(dir, "redis.pw")
	if err := os.WriteFile(pwFile, []byte(password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "sluice.yaml")
	data := fmt.Sprintf(`listen: 127.0.0.1:0
admin_listen: 127.0.0.1:0
decision_api: {listen: 127.0.0.1:0}
store:
  type: redis
  on_error: closed
  redis:
    url: redis://%s/0
    username: app
    password_file: redis.pw
    timeout: 2s
policies:
  - {name: api, match: /, anonymous: [{rate: 1/h, burst: 2}]}
`, srv.Addr())
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := runBinary(t, "check-config", path); code != 0 {
		t.Fatalf("check-config: exit %d %s %s", code, out, errOut)
	}
	s := startServe(t, path)
	var bodies []string
	for range 3 {
		_, body := send(t, "POST", s.decision+"/v1/check", `{"policy":"api","key":"k1"}`, "Content-Type", "application/json")
		bodies = append(bodies, body)
	}
	if !strings.Contains(bodies[0], `"allowed":true`) || !strings.Contains(bodies[2], `"allowed":false`) {
		t.Fatalf("decisions through Redis: %v", bodies)
	}
	keys, err := srv.Client(t).Keys(context.Background(), "*").Result()
	if err != nil || len(keys) == 0 {
		t.Fatalf("no bucket in Redis: %v %v", keys, err)
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	<-s.exited
	if strings.Contains(s.logs(), password) {
		t.Errorf("the password is in the log:\n%s", s.logs())
	}

	const wrong = "pw-Wrong-Battery-9921"
	if err := os.WriteFile(pwFile, []byte(wrong), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := runBinary(t, "serve", "--config", path)
	if code == 0 || strings.Contains(errOut, wrong) || strings.Contains(errOut, password) {
		t.Errorf("serve with the wrong password: exit %d, stderr %q; want a failure that does not print the password", code, errOut)
	}
}
