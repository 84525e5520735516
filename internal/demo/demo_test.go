package demo

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/config"
)

func TestRoutes(t *testing.T) {
	srv := httptest.NewServer(Handler())
	defer srv.Close()
	for _, tc := range []struct{ method, path, body, want string }{
		{"GET", "/", "", "demo upstream"},
		{"GET", "/products/42", "", `"id":"42"`},
		{"POST", "/payments/7", "", `"status":"accepted"`},
		{"GET", "/search?q=x", "", `"q":"x"`},
		{"POST", "/ai/complete", "one two", `"tokens":6`},
	} {
		req, _ := http.NewRequest(tc.method, srv.URL+tc.path, strings.NewReader(tc.body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b), tc.want) {
			t.Errorf("%s %s: %d %s", tc.method, tc.path, resp.StatusCode, b)
		}
		if tc.path == "/ai/complete" && resp.Header.Get("X-Sluice-Cost") != "6" {
			t.Errorf("ai cost header %q, want 6", resp.Header.Get("X-Sluice-Cost"))
		}
	}
}

func TestConfigIsValid(t *testing.T) {
	c, err := config.Parse("demo.yaml", ".", Config)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Policies) != 4 {
		t.Fatalf("%d policies", len(c.Policies))
	}
}
