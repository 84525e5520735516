package deploy

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// deploymentDocs is the "Deployment" section of docs/production.md.
func deploymentDocs(t *testing.T) string {
	t.Helper()
	doc := readFile(t, filepath.Join(repoRoot(t), "docs/production.md"))
	_, section, ok := strings.Cut(doc, "\n## Deployment\n")
	if !ok {
		t.Fatal("docs/production.md has no Deployment section")
	}
	if i := strings.Index(section, "\n## "); i >= 0 {
		section = section[:i]
	}
	return section
}

// subsection is the text under a ### heading of the Deployment section.
func subsection(section, title string) string {
	_, s, _ := strings.Cut(section, "\n### "+title+"\n")
	if i := strings.Index(s, "\n### "); i >= 0 {
		s = s[:i]
	}
	return s
}

// shLines are the lines of the sh blocks of a Markdown text.
func shLines(text string) []string {
	var lines []string
	for _, block := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(text, -1) {
		for _, l := range strings.Split(block[1], "\n") {
			if l = strings.TrimSpace(l); l != "" {
				lines = append(lines, l)
			}
		}
	}
	return lines
}

// lookup finds a dotted key in the chart's values.
func lookup(values map[string]any, key string) bool {
	var cur any = values
	for _, part := range strings.Split(key, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return false
		}
		if cur, ok = m[part]; !ok {
			return false
		}
	}
	return true
}

// TestDeploymentDocs keeps docs/production.md's Deployment section honest:
// every file it names exists, every make target is in the Makefile, every
// --build-arg is an ARG of the Dockerfile, every chart value it names is in
// values.yaml, every helm install renders (as helm template) into objects
// that decode strictly, and what kubectl applies decodes strictly too.
func TestDeploymentDocs(t *testing.T) {
	root := repoRoot(t)
	section := deploymentDocs(t)
	paths := regexp.MustCompile(`(?:^|[\s(`+"`"+`])((?:deploy|scripts)/[\w./-]*[\w/]|Dockerfile|compose\.yaml|Makefile)`).FindAllStringSubmatch(section, -1)
	if len(paths) < 10 {
		t.Fatalf("found %d repository paths in the Deployment section; the pattern is broken", len(paths))
	}
	for _, m := range paths {
		if _, err := os.Stat(filepath.Join(root, m[1])); err != nil {
			t.Errorf("the Deployment section names %s, which is not in the repository", m[1])
		}
	}
	makefile := readFile(t, filepath.Join(root, "Makefile"))
	for _, m := range regexp.MustCompile("`(?:[A-Z]+=\\S+ )?make (\\w+)`|\\bmake (\\w+)\\n").FindAllStringSubmatch(section+"\n", -1) {
		target := m[1] + m[2]
		if !regexp.MustCompile(`(?m)^` + target + `:`).MatchString(makefile) {
			t.Errorf("the Deployment section runs make %s, which the Makefile lacks", target)
		}
	}
	dockerfile := readFile(t, filepath.Join(root, "Dockerfile"))
	args := regexp.MustCompile(`--build-arg (\w+)=`).FindAllStringSubmatch(section, -1)
	if len(args) < 3 {
		t.Fatalf("found %d --build-arg in the Deployment section", len(args))
	}
	for _, m := range args {
		if !regexp.MustCompile(`(?m)^ARG ` + m[1] + `\b`).MatchString(dockerfile) {
			t.Errorf("the Deployment section passes --build-arg %s, which the Dockerfile does not declare", m[1])
		}
	}

	var values map[string]any
	if err := yaml.Unmarshal([]byte(readFile(t, filepath.Join(root, chart, "values.yaml"))), &values); err != nil {
		t.Fatal(err)
	}
	kube := subsection(section, "Kubernetes")
	named := 0
	for _, m := range regexp.MustCompile("`([a-zA-Z]+)(\\.[a-zA-Z.]+)?`|--set ([a-zA-Z.]+)=").FindAllStringSubmatch(kube, -1) {
		key := m[1] + m[2]
		if m[3] != "" {
			key = m[3]
		}
		first, _, dotted := strings.Cut(key, ".")
		if _, top := values[first]; !top || (!dotted && m[3] == "") {
			continue // not a chart value (a Kubernetes field, a sluice.yaml key)
		}
		named++
		if !lookup(values, key) {
			t.Errorf("the Kubernetes section names the chart value %s, which values.yaml lacks", key)
		}
	}
	if named < 8 {
		t.Errorf("found %d chart values in the Kubernetes section; the pattern is broken", named)
	}

	helmRuns, applies := 0, 0
	for _, line := range shLines(section) {
		f := strings.Fields(line)
		switch {
		case len(f) > 3 && f[0] == "helm" && f[1] == "install":
			helmRuns++
			decodeAll(t, helm(t, append([]string{"template"}, f[2:]...)...))
		case len(f) == 4 && f[0] == "kubectl" && f[1] == "apply" && f[2] == "-f":
			applies++
			decodeAll(t, readFile(t, filepath.Join(root, f[3])))
		}
	}
	if helmRuns == 0 || applies == 0 {
		t.Errorf("the Deployment section shows %d helm install and %d kubectl apply commands; want both", helmRuns, applies)
	}
}
