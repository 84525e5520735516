package deploy

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/runtime"
	serializerjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
)

const chart = "deploy/helm/sluice"

// allOn turns on every optional part of the chart.
var allOn = []string{"--values", "deploy/testdata/all-on.yaml"}

func helm(t *testing.T, args ...string) string {
	t.Helper()
	need(t, "helm")
	return run(t, repoRoot(t), nil, "helm", args...)
}

// decoder decodes YAML strictly against the Kubernetes API types: a field
// that the type lacks (a misspelling) or a duplicated one is an error, and
// so is a kind that is not registered.
func decoder() *serializerjson.Serializer {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, appsv1.AddToScheme, policyv1.AddToScheme, monitoringv1.AddToScheme} {
		if err := add(scheme); err != nil {
			panic(err)
		}
	}
	return serializerjson.NewSerializerWithOptions(serializerjson.DefaultMetaFactory, scheme, scheme, serializerjson.SerializerOptions{Yaml: true, Strict: true})
}

// decodeAll decodes every document of a helm template output.
func decodeAll(t *testing.T, rendered string) []runtime.Object {
	t.Helper()
	dec := decoder()
	var objs []runtime.Object
	for i, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(rendered, -1) {
		if strings.TrimSpace(regexp.MustCompile(`(?m)^#.*$`).ReplaceAllString(doc, "")) == "" {
			continue
		}
		obj, gvk, err := dec.Decode([]byte(doc), nil, nil)
		if err != nil {
			t.Fatalf("document %d does not decode strictly: %v\n%s", i, err, doc)
		}
		if gvk.Kind == "" {
			t.Fatalf("document %d has no kind", i)
		}
		objs = append(objs, obj)
	}
	return objs
}

func TestHelmLint(t *testing.T) {
	helm(t, "lint", "--strict", chart)
	helm(t, append([]string{"lint", "--strict", chart}, allOn...)...)
	// redis.enabled without the Secret's name is refused with a message.
	_, errOut, err := runErr(repoRoot(t), nil, "helm", "template", "sluice", chart, "--set", "redis.enabled=true")
	if err == nil || !strings.Contains(errOut, "redis.existingSecret") {
		t.Errorf("redis.enabled without redis.existingSecret: err %v, stderr %q", err, errOut)
	}
}

// TestStrictDecodingCatchesMisspelling: the decoding the other tests rely
// on refuses a field the type lacks.
func TestStrictDecodingCatchesMisspelling(t *testing.T) {
	rendered := helm(t, "template", "sluice", chart, "--show-only", "templates/deployment.yaml")
	decodeAll(t, rendered)
	bad := strings.Replace(rendered, "readOnlyRootFilesystem", "readOnlyRootFilesytem", 1)
	if _, _, err := decoder().Decode([]byte(bad), nil, nil); err == nil || !strings.Contains(err.Error(), "readOnlyRootFilesytem") {
		t.Errorf("a misspelt field decoded: %v", err)
	}
}

// TestHelmTemplate renders the chart with its defaults and with everything
// on, decodes every object strictly and checks what the deployment
// promises: probes, non-root, read-only root, resources, named ports, a
// PodDisruptionBudget, the Redis URL from a Secret, a configuration that
// sluice check-config accepts.
func TestHelmTemplate(t *testing.T) {
	bin := buildSluice(t, t.TempDir())
	for _, tc := range []struct {
		name string
		args []string
	}{{"defaults", nil}, {"all on", allOn}} {
		t.Run(tc.name, func(t *testing.T) {
			objs := decodeAll(t, helm(t, append([]string{"template", "sluice", chart}, tc.args...)...))
			kinds := map[string]int{}
			var dep *appsv1.Deployment
			var svc *corev1.Service
			var pdb *policyv1.PodDisruptionBudget
			configs := map[string]*corev1.ConfigMap{}
			for _, o := range objs {
				switch o := o.(type) {
				case *appsv1.Deployment:
					dep = o
				case *corev1.Service:
					svc = o
				case *policyv1.PodDisruptionBudget:
					pdb = o
				case *corev1.ConfigMap:
					configs[o.Name] = o
				}
				kinds[fmt.Sprintf("%T", o)]++
			}
			if dep == nil || svc == nil || pdb == nil || configs["sluice"] == nil {
				t.Fatalf("rendered kinds %v: want a Deployment, a Service, a PodDisruptionBudget and the ConfigMap sluice", kinds)
			}
			if got, want := kinds["*v1.ServiceMonitor"], map[bool]int{false: 0, true: 1}[tc.args != nil]; got != want {
				t.Errorf("%d ServiceMonitors, want %d", got, want)
			}
			if pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() < 1 || !sameLabels(pdb.Spec.Selector.MatchLabels, dep.Spec.Template.Labels) {
				t.Errorf("PodDisruptionBudget %+v does not keep a pod of the Deployment", pdb.Spec)
			}
			pod := dep.Spec.Template.Spec
			if len(pod.Containers) != 1 {
				t.Fatalf("%d containers", len(pod.Containers))
			}
			c := pod.Containers[0]
			if psc := pod.SecurityContext; psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 {
				t.Errorf("pod security context %+v: want runAsNonRoot and a non-zero runAsUser", psc)
			}
			if sc := c.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
				sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" {
				t.Errorf("container security context %+v: want a read-only root, no privilege escalation, every capability dropped", sc)
			}
			if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
				t.Errorf("resources %+v: want CPU and memory requests and a memory limit", c.Resources)
			}
			containerPorts := map[string]int32{}
			for _, p := range c.Ports {
				containerPorts[p.Name] = p.ContainerPort
			}
			if c.LivenessProbe == nil || c.LivenessProbe.HTTPGet == nil || c.LivenessProbe.HTTPGet.Path != "/healthz" || c.LivenessProbe.HTTPGet.Port.StrVal != "admin" {
				t.Errorf("liveness probe %+v: want GET /healthz on the admin port", c.LivenessProbe)
			}
			if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz" || c.ReadinessProbe.HTTPGet.Port.StrVal != "admin" {
				t.Errorf("readiness probe %+v: want GET /readyz on the admin port", c.ReadinessProbe)
			}
			// Every port sluice's configuration opens is a named port of the
			// container and of the Service.
			conf := configs["sluice"].Data["sluice.yaml"]
			want := map[string]bool{"traffic": true, "decision": true, "admin": true}
			if strings.Contains(conf, "envoy_rls:") {
				want["envoy-rls"] = true
			}
			for _, p := range svc.Spec.Ports {
				if !want[p.Name] || p.TargetPort.StrVal != p.Name || containerPorts[p.Name] != p.Port {
					t.Errorf("Service port %+v: not one of %v, or not the container's port of that name", p, want)
				}
				delete(want, p.Name)
			}
			if len(want) > 0 || len(containerPorts) != len(svc.Spec.Ports) {
				t.Errorf("ports without a Service port: %v; container ports %v", want, containerPorts)
			}
			for name, port := range containerPorts {
				addr := fmt.Sprintf("0.0.0.0:%d", port)
				if !strings.Contains(conf, addr) {
					t.Errorf("container port %s %d: sluice.yaml listens on no %s", name, port, addr)
				}
			}
			// The configuration is a directory mount (no subPath), so that
			// Kubernetes' updates reach it.
			mounted := false
			for _, m := range c.VolumeMounts {
				if m.MountPath == "/etc/sluice" && m.SubPath == "" && m.ReadOnly {
					mounted = true
				}
			}
			if !mounted || !strings.Contains(strings.Join(c.Args, " "), "--config /etc/sluice/sluice.yaml") {
				t.Errorf("mounts %+v, args %v: want the ConfigMap as the directory /etc/sluice and --config /etc/sluice/sluice.yaml", c.VolumeMounts, c.Args)
			}
			dir := t.TempDir()
			env := []string{"SLUICE_REDIS_URL=redis://127.0.0.1:6379/0"}
			if strings.Contains(conf, "type: redis") {
				if len(c.Env) != 1 || c.Env[0].Name != "SLUICE_REDIS_URL" || c.Env[0].ValueFrom == nil || c.Env[0].ValueFrom.SecretKeyRef == nil || c.Env[0].ValueFrom.SecretKeyRef.Name != "sluice-redis" {
					t.Errorf("env %+v: want SLUICE_REDIS_URL from the Secret sluice-redis", c.Env)
				}
				if !strings.Contains(conf, "url: ${SLUICE_REDIS_URL}") {
					t.Errorf("sluice.yaml does not take the Redis URL from ${SLUICE_REDIS_URL}:\n%s", conf)
				}
				// As the expansion of ${VAR} in sluice.yaml would.
				conf = strings.ReplaceAll(conf, "${SLUICE_REDIS_URL}", "redis://127.0.0.1:6379/0")
			}
			if rl := configs["sluice-ratelimit"]; rl != nil {
				os.Mkdir(filepath.Join(dir, "ratelimit"), 0o755)
				for name, text := range rl.Data {
					writeFile(t, filepath.Join(dir, "ratelimit", name), text)
				}
				conf = strings.ReplaceAll(conf, "config_dir: /etc/sluice-ratelimit", "config_dir: ratelimit")
			}
			writeFile(t, filepath.Join(dir, "sluice.yaml"), conf)
			if out := run(t, dir, env, bin, "check-config", filepath.Join(dir, "sluice.yaml")); !strings.Contains(out, ": ok") {
				t.Errorf("check-config of the ConfigMap's sluice.yaml: %s", out)
			}
		})
	}
}

func sameLabels(a, b map[string]string) bool {
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return len(a) > 0
}

// manifestsHeader starts deploy/kubernetes/sluice.yaml; `make manifests`
// writes the file.
const manifestsHeader = "# Rendered from deploy/helm/sluice by `make manifests`\n# (helm template sluice deploy/helm/sluice): do not edit, change the chart.\n"

// TestManifestsUpToDate: the plain manifests are exactly what the chart
// renders today, so they never drift from it.
func TestManifestsUpToDate(t *testing.T) {
	want := manifestsHeader + helm(t, "template", "sluice", chart)
	got := readFile(t, filepath.Join(repoRoot(t), "deploy/kubernetes/sluice.yaml"))
	if got != want {
		t.Errorf("deploy/kubernetes/sluice.yaml differs from a fresh helm template: run make manifests")
	}
	decodeAll(t, got)
}
