package memstore

import (
	"math/rand/v2"
	"testing"

	"github.com/sluicehq/sluice"
)

// tableOps drives a table and a plain map with the same operations, read
// from data, and fails at the first disagreement. Ids are drawn from a
// small space with a few home positions, so probe chains, wrap-around and
// backward shifts all happen.
func tableOps(t *testing.T, data []byte) {
	var tb table
	tb.extra = map[uint64][]sluice.Bucket{}
	ref := map[uint64]int64{} // id → fullAt
	for len(data) >= 3 {
		op, a, b := data[0]%4, data[1], data[2]
		data = data[3:]
		id := makeID(uint64(a%16)<<idBits|uint64(a)<<40, 1)
		switch op {
		case 0, 1: // insert or touch
			if s := tb.find(id); s != nil {
				s.fullAt = int64(b)
			} else {
				s := tb.insert(id)
				s.fullAt = int64(b)
				s.unlock()
			}
			ref[id] = int64(b)
		case 2: // sweep everything full at b
			n := tb.sweep(int64(b))
			want := 0
			for k, f := range ref {
				if f <= int64(b) {
					delete(ref, k)
					want++
				}
			}
			if n != want {
				t.Fatalf("sweep(%d) dropped %d, want %d", b, n, want)
			}
		case 3: // evict one
			if len(ref) == 0 {
				continue
			}
			tb.evict(int64(b), uint64(a))
			for k := range ref {
				if tb.find(k) == nil {
					delete(ref, k)
				}
			}
		}
		if tb.used != len(ref) {
			t.Fatalf("table holds %d, reference %d", tb.used, len(ref))
		}
		for k, f := range ref {
			s := tb.find(k)
			if s == nil || s.fullAt != f || s.id.Load() != k {
				t.Fatalf("id %x: found %v, want fullAt %d, unlocked", k, s, f)
			}
		}
		if p := tb.cur.Load(); p != nil && &(*p)[0] != &tb.slots[0] {
			t.Fatal("the published array is not the table's")
		}
	}
}

func TestTableAgreesWithAMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for round := 0; round < 200; round++ {
		data := make([]byte, 3*500)
		for i := range data {
			data[i] = byte(rng.UintN(256))
		}
		tableOps(t, data)
	}
}

func FuzzTable(f *testing.F) {
	f.Add([]byte{0, 1, 5, 0, 17, 9, 0, 33, 2, 2, 0, 6, 3, 1, 0})
	f.Fuzz(tableOps)
}
