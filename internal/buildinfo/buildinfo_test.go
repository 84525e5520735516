package buildinfo

import (
	"runtime/debug"
	"testing"
)

func TestPseudoRevision(t *testing.T) {
	for v, want := range map[string]string{"v1.2.3": "unknown", "(devel)": "unknown", "v1.2.4-0.20261203153631-3d44cd015ef7+dirty": "3d44cd015ef7", "v1.0.0-rc.1": "unknown", "v0.0.0-20261203153631-3D44CD015EF7": "unknown"} {
		if got := PseudoRevision(v); got != want {
			t.Errorf("PseudoRevision(%q) = %q, want %q", v, got, want)
		}
	}
}

func TestParse(t *testing.T) {
	info := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: ""}}
	info.Settings = []debug.BuildSetting{{Key: "vcs.revision", Value: "3d44cd0"}, {Key: "vcs.modified", Value: "true"}}
	if got, want := Parse(info, true), (Info{Version: "(devel)", Revision: "3d44cd0+dirty", GoVersion: "go1.26.0"}); got != want {
		t.Errorf("Parse = %+v, want %+v", got, want)
	}
	if got := Parse(nil, false); got.Version != "unknown" || got.Revision != "unknown" || got.GoVersion != "unknown" {
		t.Errorf("Parse without build info = %+v", got)
	}
}
