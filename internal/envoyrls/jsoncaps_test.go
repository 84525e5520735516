package envoyrls

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/config"
)

// TestJSONHoldsTheCallCaps: /json decides through the service without the
// gRPC listener's guard, so it checks the same caps itself: a call of
// more descriptors, or a descriptor of more entries, than the settings
// allow is refused with 400 before anything is decided.
func TestJSONHoldsTheCallCaps(t *testing.T) {
	e := &config.EnvoyRLS{MaxDescriptors: 2, MaxEntries: 2}
	h := JSONHandler(func() (*config.EnvoyRLS, Decider) { return e, nil }, slog.New(slog.NewTextHandler(io.Discard, nil)), nil, nil)
	desc := `{"entries":[{"key":"a","value":"b"}]}`
	wide := `{"entries":[{"key":"a","value":"b"},{"key":"c","value":"d"},{"key":"e","value":"f"}]}`
	for _, c := range []struct {
		name  string
		descs []string
		want  int
	}{
		{"within the caps", []string{desc, desc}, http.StatusOK},
		{"one descriptor too many", []string{desc, desc, desc}, http.StatusBadRequest},
		{"one entry too many", []string{wide}, http.StatusBadRequest},
	} {
		body := `{"domain":"nowhere","descriptors":[` + strings.Join(c.descs, ",") + `]}`
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/json", strings.NewReader(body)))
		if w.Code != c.want {
			t.Errorf("%s: %d %s; want %d", c.name, w.Code, w.Body, c.want)
		}
	}
}
