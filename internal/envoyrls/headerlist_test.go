package envoyrls

import (
	"strconv"
	"testing"

	"github.com/sluicehq/sluice/decide"
)

// Every length of field list, those that share one allocation and those
// that do not, comes back as Envoy's header list in order, in lower case,
// each header its own: a second list shares nothing with the first.
func TestFieldValuesEveryLength(t *testing.T) {
	for n := 0; n <= len(fieldNames); n++ {
		fs := make([]decide.Field, n)
		for i := range fs {
			fs[i] = decide.Field{Name: fieldNames[i].canonical, Value: strconv.Itoa(i)}
		}
		first, second := fieldValues(fs), fieldValues(fs)
		if len(first) != n || len(second) != n {
			t.Fatalf("%d fields: %d and %d headers", n, len(first), len(second))
		}
		for i, h := range first {
			if h.Key != fieldNames[i].lower || h.Value != strconv.Itoa(i) {
				t.Errorf("%d fields: header %d is %q: %q; want %q: %q", n, i, h.Key, h.Value, fieldNames[i].lower, strconv.Itoa(i))
			}
			second[i].Value = "changed"
			if h.Value != strconv.Itoa(i) || (i > 0 && first[i-1] == h) {
				t.Errorf("%d fields: header %d is shared", n, i)
			}
		}
	}
}
