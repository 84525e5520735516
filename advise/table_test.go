package advise

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sluicehq/sluice/internal/loggen"
)

// TestTableFits: the text report of real and generated logs, abusers
// included, keeps every line within 120 columns, and shows each class.
func TestTableFits(t *testing.T) {
	dir := realLogs(t)
	inputs := []string{
		filepath.Join(dir, "apache_combined_2015.log"),
		filepath.Join(dir, "nasa_jul95_first_hour.log"),
		writeEvents(t, "abuse.log", abuseEvents(true)),
		genFile(t, t.TempDir(), loggen.Options{Seed: 3, Format: loggen.Mixed, Rate: 200}, 2e6),
	}
	for _, in := range inputs {
		rep, err := Run(Options{Inputs: []string{in}, MaxClasses: 200, Top: 5})
		if err != nil {
			t.Fatal(err)
		}
		// the longest key and pattern a log can hold
		rep.Classes[0].Match = "GET /" + strings.Repeat("very-long-segment/", 20) + "{id}"
		rep.Notes = append(rep.Notes, strings.Repeat("x", 300), "a note "+strings.Repeat("with many words ", 30))
		var b bytes.Buffer
		if err := writeTable(&b, rep); err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(b.String(), "\n") {
			if n := utf8.RuneCountInString(line); n > tableWidth {
				t.Errorf("%s: line %d is %d columns: %q", filepath.Base(in), i+1, n, line)
			}
		}
		if rows := strings.Count(b.String(), " anon ") + strings.Count(b.String(), " auth "); rows < len(rep.Classes) {
			t.Errorf("%s: %d rows for %d classes", filepath.Base(in), rows, len(rep.Classes))
		}
	}
}

// TestDeterministic: two runs on the same input give the same report,
// distinct-key estimates included.
func TestDeterministic(t *testing.T) {
	path := genFile(t, t.TempDir(), loggen.Options{Seed: 4, Format: loggen.Mixed, Rate: 300}, 3e6)
	a := reportOf(t, path, Options{Window: 0})
	b := reportOf(t, path, Options{Window: 0})
	if !bytes.Equal(a, b) {
		t.Errorf("two runs differ:\n%s", firstDiff(a, b))
	}
}
