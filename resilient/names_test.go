package resilient

import (
	"strings"
	"testing"
)

// TestLastMode: lastMode is sluice.OnError's last policy, so that the
// metrics have a counter for each and modeFor accepts each.
func TestLastMode(t *testing.T) {
	for m := range lastMode + 1 {
		if s := m.String(); strings.HasPrefix(s, "OnError(") {
			t.Errorf("mode %d is no failure policy: %s", m, s)
		}
	}
	if s := (lastMode + 1).String(); !strings.HasPrefix(s, "OnError(") {
		t.Errorf("mode %d is %s: a failure policy after lastMode", lastMode+1, s)
	}
}

// Decision, the former name of Report, still names it.
var _ Decision = Report{}
