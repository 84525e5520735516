package deploy

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
	"go.yaml.in/yaml/v3"
)

// loadCompose loads a compose file with the Compose specification's own
// loader, which validates it against the specification's JSON schema and
// checks that every depends_on names a service.
func loadCompose(t *testing.T, dir, file string) (*types.Project, error) {
	t.Helper()
	return loader.LoadWithContext(context.Background(), types.ConfigDetails{
		WorkingDir:  dir,
		ConfigFiles: []types.ConfigFile{{Filename: file}},
		Environment: types.Mapping{},
	}, func(o *loader.Options) { o.SetProjectName("sluice", true) })
}

// TestCompose checks compose.yaml: valid by the Compose specification, the
// three services, the image built from the Dockerfile, a configuration that
// sluice check-config accepts and whose upstream and Redis are the
// compose services.
func TestCompose(t *testing.T) {
	root := repoRoot(t)
	p, err := loadCompose(t, root, filepath.Join(root, "compose.yaml"))
	if err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	for _, name := range []string{"sluice", "redis", "demo-upstream"} {
		if _, err := p.GetService(name); err != nil {
			t.Fatalf("compose.yaml: %v", err)
		}
	}
	s, _ := p.GetService("sluice")
	up, _ := p.GetService("demo-upstream")
	for _, svc := range []types.ServiceConfig{s, up} {
		if svc.Build == nil || svc.Build.Context != root || svc.Build.Dockerfile != "Dockerfile" {
			t.Errorf("service %s: build %+v, want the Dockerfile at the repository's root", svc.Name, svc.Build)
		}
		if svc.User != "65532:65532" || !svc.ReadOnly {
			t.Errorf("service %s: user %q, read_only %v: want 65532:65532 and a read-only root", svc.Name, svc.User, svc.ReadOnly)
		}
	}
	if got := strings.Join(up.Command, " "); got != "demo-upstream --listen 0.0.0.0:3000" {
		t.Errorf("demo-upstream's command: %q", got)
	}
	if _, ok := s.DependsOn["redis"]; !ok {
		t.Errorf("sluice does not wait for redis: %+v", s.DependsOn)
	}
	var config string
	for _, v := range s.Volumes {
		if v.Target == "/etc/sluice/sluice.yaml" {
			config = v.Source
		}
	}
	if config == "" {
		t.Fatalf("no file is mounted at /etc/sluice/sluice.yaml: %+v", s.Volumes)
	}
	var conf struct {
		Listen      string `yaml:"listen"`
		AdminListen string `yaml:"admin_listen"`
		DecisionAPI struct {
			Listen string `yaml:"listen"`
		} `yaml:"decision_api"`
		Upstream string `yaml:"upstream"`
		Store    struct {
			Redis struct {
				URL string `yaml:"url"`
			} `yaml:"redis"`
		} `yaml:"store"`
	}
	if err := yaml.Unmarshal([]byte(readFile(t, config)), &conf); err != nil {
		t.Fatal(err)
	}
	if u, err := url.Parse(conf.Upstream); err != nil || u.Host != "demo-upstream:3000" {
		t.Errorf("upstream %q: want the demo-upstream service on 3000", conf.Upstream)
	}
	if u, err := url.Parse(conf.Store.Redis.URL); err != nil || u.Hostname() != "redis" {
		t.Errorf("store.redis.url %q: want the redis service", conf.Store.Redis.URL)
	}
	published := map[string]bool{}
	for _, port := range s.Ports {
		published[strconv.Itoa(int(port.Target))] = true
	}
	for _, addr := range []string{conf.Listen, conf.AdminListen, conf.DecisionAPI.Listen} {
		_, port, _ := strings.Cut(addr, ":")
		if !strings.HasPrefix(addr, "0.0.0.0:") || !published[port] {
			t.Errorf("listener %q: want it on every interface and its port published", addr)
		}
	}
	bin := buildSluice(t, t.TempDir())
	if out := run(t, root, nil, bin, "check-config", config); !strings.Contains(out, ": ok") {
		t.Errorf("check-config %s: %s", config, out)
	}
}

// TestComposeLoaderCatchesMistakes: a misspelt key and a depends_on naming
// no service are refused, which TestCompose relies on.
func TestComposeLoaderCatchesMistakes(t *testing.T) {
	dir := t.TempDir()
	for name, text := range map[string]string{
		"misspelt":   "services:\n  a:\n    image: x\n    comand: [\"y\"]\n",
		"dependency": "services:\n  a:\n    image: x\n    depends_on: [b]\n",
	} {
		path := filepath.Join(dir, name+".yaml")
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := loadCompose(t, dir, path); err == nil {
			t.Errorf("%s: loaded without an error", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
}
