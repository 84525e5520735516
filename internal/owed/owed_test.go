package owed

import "testing"

// A cell gives back its key's value and until exactly, once; an overflow
// sends the entry due soonest into the merged record, which keeps the
// latest until and matches what was merged into it; an expired cell is
// free again; the zero Table remembers nothing.
func TestRememberRecallMerge(t *testing.T) {
	o := New[[3]int64](8) // one group
	if o.Cells() != Ways || o.Merged() != 1 {
		t.Fatalf("%d cells, %d merged records for 8 keys; want one group", o.Cells(), o.Merged())
	}
	const now = 1_000
	for i := range int64(Ways) {
		o.Remember(uint64(i+1)<<40, now+100*(i+2), now, [3]int64{i, i * 10, i * 100}) // due +200 … +500
	}
	if v, own, m := o.Peek(2<<40, now); v != [3]int64{1, 10, 100} || own != now+300 || m != now {
		t.Fatalf("peek: %v, own %+d, merged %+d", v, own-now, m-now)
	}
	o.Remember(9<<40, now+600, now, [3]int64{9}) // the cell due at +200 is merged
	if v, own, m := o.Recall(1<<40, now); v != ([3]int64{}) || own != now || m != now+200 {
		t.Fatalf("the merged key: %v, own %+d, merged %+d; want merged +200", v, own-now, m-now)
	}
	if v, own, _ := o.Recall(9<<40, now); v != [3]int64{9} || own != now+600 {
		t.Fatalf("the new key: %v, own %+d", v, own-now)
	}
	if _, own, _ := o.Recall(9<<40, now); own != now {
		t.Fatal("recall did not free the key's cell")
	}
	if !o.MergedHolds(1<<40) || o.Live(now) != Ways-1 || o.Live(now+500) != 0 {
		t.Fatalf("merged holds %v, live %d and %d", o.MergedHolds(1<<40), o.Live(now), o.Live(now+500))
	}
	// Every cell has expired: new keys take them, and nothing is merged.
	for i := range uint64(Ways) {
		o.Remember((i+20)<<40, now+2000, now+1000, [3]int64{})
	}
	if o.Live(now+1000) != Ways {
		t.Fatalf("%d live cells after four keys took expired ones", o.Live(now+1000))
	}
	var zero Table[int]
	zero.Remember(1, now+1, now, 5)
	if v, own, m := zero.Recall(1, now); v != 0 || own != now || m != now || zero.MergedHolds(1) {
		t.Fatal("the zero Table remembered something")
	}
}
