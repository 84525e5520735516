package main

import (
	"bufio"
	"compress/gzip"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/config"
)

// The user's documents, relative to this package.
func docFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("../../docs/*.md")
	if err != nil || len(files) == 0 {
		t.Fatalf("no docs: %v", err)
	}
	return append([]string{"../../README.md"}, files...)
}

// fence is one fenced code block of a Markdown file.
type fence struct {
	file string
	line int // of the opening fence
	lang string
	body string // without the fence's indentation
}

func (f fence) String() string { return f.file + ":" + strconv.Itoa(f.line) }

func fences(t *testing.T, path string) []fence {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []fence
	var cur *fence
	var indent string
	sc := bufio.NewScanner(strings.NewReader(string(data)))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimLeft(line, " ")
		switch {
		case cur == nil && strings.HasPrefix(trimmed, "```"):
			indent = line[:len(line)-len(trimmed)]
			cur = &fence{file: filepath.Base(path), line: n, lang: strings.TrimSpace(strings.TrimPrefix(trimmed, "```"))}
		case cur != nil && trimmed == "```":
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			cur.body += strings.TrimPrefix(line, indent) + "\n"
		}
	}
	if cur != nil {
		t.Fatalf("%s: a code block opened at line %d is never closed", path, cur.line)
	}
	return out
}

// TestDocsYAML: every YAML block of the README and docs/ is a valid sluice
// configuration (or a valid part of one), as check-config reads it. The
// files a snippet names (a password or key file at a path of the reader's
// machine) are the only thing allowed to be missing.
func TestDocsYAML(t *testing.T) {
	n := 0
	for _, path := range docFiles(t) {
		for _, f := range fences(t, path) {
			if f.lang != "yaml" && f.lang != "yml" {
				continue
			}
			n++
			_, err := config.Parse(f.String(), t.TempDir(), []byte(f.body))
			var es config.Errors
			if errors.As(err, &es) {
				for _, e := range es {
					if strings.HasSuffix(e.Field, "_file") && strings.Contains(e.Msg, "no such file") {
						continue
					}
					t.Errorf("%v", e)
				}
			} else if err != nil {
				t.Errorf("%s: %v", f, err)
			}
		}
	}
	if n < 2 {
		t.Fatalf("found %d YAML blocks; the fence parser is broken", n)
	}
}

// docSkips are the documented command lines this test does not run, each
// for a reason; any other `sluice …` line of a sh block runs, offline, in
// a directory with a small access log and the example configuration.
var docSkips = []struct{ substr, why string }{
	{"sluice demo", "serves until stopped; TestDemo runs it"},
	{"sluice serve", "serves until stopped; TestServe runs it"},
	{"--redis ", "needs a Redis at an address of the reader's"},
	{"/var/log/", "reads the reader's own logs"},
	{"--size 500MB", "writes 500 MB; the same command with --lines runs"},
}

// TestDocsCommands runs the `sluice …` command lines of the README's and
// docs' sh blocks with the binary under test, so that a renamed flag or
// subcommand fails here before a reader meets it.
func TestDocsCommands(t *testing.T) {
	dir := t.TempDir()
	example, err := os.ReadFile("../../examples/sluice.yaml")
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, data []byte) {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("sluice.yaml", example)
	code, log, errOut := runBinary(t, "advise", "generate", "--lines", "3000", "--users", "50", "--ips", "100", "--rate", "50")
	if code != 0 {
		t.Fatalf("advise generate: %d %s", code, errOut)
	}
	write("access.log", []byte(log))
	var gz strings.Builder
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write([]byte(log))
	_ = zw.Close()
	write("access.log.1.gz", []byte(gz.String()))
	write("old/access.log.2.gz", []byte(gz.String()))
	env := append(os.Environ(), "PATH="+filepath.Dir(binary)+string(os.PathListSeparator)+os.Getenv("PATH"))

	command := regexp.MustCompile(`(^|\|\s*)sluice\s`)
	ran := 0
	for _, path := range docFiles(t) {
		for _, f := range fences(t, path) {
			if f.lang != "sh" && f.lang != "shell" && f.lang != "bash" {
				continue
			}
		lines:
			for _, line := range strings.Split(f.body, "\n") {
				line = strings.TrimSpace(stripComment(line))
				if !command.MatchString(line) {
					continue
				}
				for _, s := range docSkips {
					if strings.Contains(line, s.substr) {
						continue lines
					}
				}
				ran++
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				cmd := exec.CommandContext(ctx, "bash", "-o", "pipefail", "-c", line)
				cmd.Dir, cmd.Env = dir, env
				out, err := cmd.CombinedOutput()
				cancel()
				if err != nil {
					t.Errorf("%s: %s: %v\n%s", f, line, err, out)
				}
			}
		}
	}
	if ran < 5 {
		t.Fatalf("ran %d documented commands; the fence parser is broken", ran)
	}
}

// stripComment drops a shell comment: a # that starts a word outside
// quotes.
func stripComment(line string) string {
	var quote byte
	for i := 0; i < len(line); i++ {
		switch c := line[i]; {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '#' && (i == 0 || line[i-1] == ' ' || line[i-1] == '\t'):
			return line[:i]
		}
	}
	return line
}

// TestDocsStandAlone: no user-facing text refers to a SPEC document, which
// is not part of the repository: the docs, the example configuration, the
// godoc and the messages of every package outside the tests must stand on
// their own.
func TestDocsStandAlone(t *testing.T) {
	spec := regexp.MustCompile(`\bSPEC\b`)
	root := "../.."
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			switch d.Name() {
			case ".git", "testdata", "results":
				return filepath.SkipDir
			}
			return nil
		}
		name := d.Name()
		if strings.HasSuffix(name, "_test.go") || !(strings.HasSuffix(name, ".go") || strings.HasSuffix(name, ".md") ||
			strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".lua") || name == "Makefile") {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(data), "\n") {
			if spec.MatchString(line) {
				t.Errorf("%s:%d: refers to SPEC, which readers do not have; say what it means here: %s", rel, i+1, strings.TrimSpace(line))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
