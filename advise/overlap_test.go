package advise

import (
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestOverlappingFiles: each real log dealt into two files as two servers
// behind a balancer would log it (every other request to each, both files
// spanning the whole log), given in both orders, one of them gzipped, and
// on standard input one after the other, gives the report of the log as
// shipped, replay and written configuration included, with no line late:
// the files' lines are merged by time (issue #27: two servers' logs as
// arguments still produced late lines, counted in the wrong second).
func TestOverlappingFiles(t *testing.T) {
	t.Parallel()
	for _, name := range realLogNames {
		t.Run(name, func(t *testing.T) {
			tmp := t.TempDir()
			shipped := filepath.Join(realLogs(t), name)
			lines := readLines(t, shipped)
			var a, b []string
			for i, l := range lines {
				if i%2 == 0 {
					a = append(a, l)
				} else {
					b = append(b, l)
				}
			}
			fa, fb := writeLines(t, tmp, "server-a.log", a), writeLines(t, tmp, "server-b.log", b)
			// server b gzipped, under a name that sorts first
			raw, err := os.ReadFile(fb)
			if err != nil {
				t.Fatal(err)
			}
			var gz bytes.Buffer
			zw := gzip.NewWriter(&gz)
			zw.Write(raw)
			zw.Close()
			fbz := filepath.Join(tmp, "a-server-b.log.gz")
			if err := os.WriteFile(fbz, gz.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
			run := func(label string, inputs []string, stdin io.Reader) ([]byte, []byte) {
				t.Helper()
				out := filepath.Join(tmp, label+".yaml")
				rep, err := Run(Options{Inputs: inputs, stdin: stdin, MaxClasses: 200, Top: 5, MaxPolicies: 10, MinShare: 0.01, OutConfig: out})
				if err != nil {
					t.Fatal(err)
				}
				if rep.Lines != int64(len(lines)) || rep.Order.Late != 0 {
					t.Errorf("%s: %d lines of %d, order %+v", label, rep.Lines, len(lines), rep.Order)
				}
				if len(inputs) > 1 || stdin != nil {
					if !rep.Order.Reread || rep.Order.Merged < 2 {
						t.Errorf("%s: order %+v, want the files read again, merged by time", label, rep.Order)
					}
				}
				for _, f := range rep.Files {
					if f.Late != 0 {
						t.Errorf("%s: %s has %d late lines", label, f.File, f.Late)
					}
				}
				for _, n := range rep.Notes {
					if strings.Contains(n, "behind the newest line") {
						t.Errorf("%s: note %q", label, n)
					}
				}
				rep.Inputs, rep.Files, rep.MeasureSeconds, rep.MBPerSecond, rep.ReplaySeconds, rep.Order, rep.Bytes = nil, nil, 0, 0, 0, Order{}, 0
				var js bytes.Buffer
				if err := writeJSON(&js, rep); err != nil {
					t.Fatal(err)
				}
				cfg, _ := os.ReadFile(out)
				return js.Bytes(), withoutInputs(cfg)
			}
			want, wantCfg := run("shipped", []string{shipped}, nil)
			var joined bytes.Buffer
			for _, l := range append(b, a...) {
				joined.WriteString(strings.TrimSuffix(l, "\n") + "\n")
			}
			for _, v := range []struct {
				label  string
				inputs []string
				stdin  io.Reader
			}{
				{"a-b", []string{fa, fb}, nil},
				{"b-a", []string{fb, fa}, nil},
				{"gzip-b-a", []string{fbz, fa}, nil},
				{"stdin-b-then-a", []string{"-"}, &joined},
			} {
				got, cfg := run(v.label, v.inputs, v.stdin)
				if !bytes.Equal(got, want) {
					t.Errorf("%s: the report differs from the shipped file's:\n%s", v.label, firstDiff(want, got))
				}
				if !bytes.Equal(cfg, wantCfg) {
					t.Errorf("%s: the configuration differs from the shipped file's", v.label)
				}
			}
		})
	}
}
