package advise

import (
	"cmp"
	"slices"
)

// TailKey is one of the busiest callers of a class: the keys at the top of
// the distribution, whether or not they were set apart.
type TailKey struct {
	Key        string `json:"key"`
	Requests   uint32 `json:"requests"`
	Errors     uint32 `json:"errors"`
	Excused    uint32 `json:"excused_errors,omitempty"` // of the errors, those the errors rule does not count (static.go)
	Denied     uint32 `json:"denied"`
	PeakMinute uint32 `json:"peak_minute"`
	PeakSecond uint32 `json:"peak_second"`
	SetApart   string `json:"set_apart,omitempty"` // the reason, when it does not size the proposal
}

// tailKeys returns the n keys with the busiest minute (then second,
// requests, key), marking those in limited.
func tailKeys(keys []*keySum, limited []LimitedKey, n int) []TailKey {
	if n <= 0 || len(keys) == 0 {
		return nil
	}
	s := slices.Clone(keys)
	slices.SortFunc(s, func(a, b *keySum) int {
		return cmp.Or(cmp.Compare(b.peakMin, a.peakMin), cmp.Compare(b.peakSec, a.peakSec),
			cmp.Compare(b.requests, a.requests), cmp.Compare(a.key, b.key))
	})
	reason := make(map[string]string, len(limited))
	for _, l := range limited {
		reason[l.Key] = l.Reason
	}
	out := make([]TailKey, 0, min(n, len(s)))
	for _, k := range s[:min(n, len(s))] {
		out = append(out, TailKey{Key: k.key, Requests: k.requests, Errors: k.errors, Excused: k.excused, Denied: k.denied,
			PeakMinute: k.peakMin, PeakSecond: k.peakSec, SetApart: reason[k.key]})
	}
	return out
}
