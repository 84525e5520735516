package advise

import "math"

// Dist summarizes a distribution of per-key counts (per second or per
// minute). Percentiles are nearest-rank: the pN is the smallest count c
// such that at least N% of the samples are ≤ c. Counts are integers, so
// percentiles are exact integers, with no interpolation.
type Dist struct {
	Samples  uint64  `json:"samples"`  // (key, second) or (key, minute) pairs with a request
	Requests uint64  `json:"requests"` // the sum of their counts
	Mean     float64 `json:"mean"`
	P50      uint32  `json:"p50"`
	P90      uint32  `json:"p90"`
	P99      uint32  `json:"p99"`
	Max      uint32  `json:"max"`
}

func summarize(h *hist) Dist {
	bins := h.bins()
	var d Dist
	for _, b := range bins {
		d.Samples += b.Freq
		d.Requests += uint64(b.Count) * b.Freq
	}
	if d.Samples == 0 {
		return d
	}
	d.Mean = float64(d.Requests) / float64(d.Samples)
	d.P50 = quantile(bins, d.Samples, 50)
	d.P90 = quantile(bins, d.Samples, 90)
	d.P99 = quantile(bins, d.Samples, 99)
	d.Max = bins[len(bins)-1].Count
	return d
}

// quantile is the nearest-rank pct-th percentile: the count of the sample
// of rank ceil(pct/100 × total), in increasing order.
func quantile(bins []Bin, total uint64, pct uint64) uint32 {
	rank := (pct*total + 99) / 100
	var cum uint64
	for _, b := range bins {
		cum += b.Freq
		if cum >= rank {
			return b.Count
		}
	}
	return bins[len(bins)-1].Count
}

// Proposal is the rule proposed for a class.
//
//	rate       = 2 × p99 of the per-second counts, in requests per second
//	sustained  = p99 of the per-minute counts / 60
//	burstiness = p99 per second / sustained, clamped to [1, 60]
//	multiplier = round(5 + 5 × ln(burstiness) / ln(60)), in [5, 10]
//	burst      = multiplier × rate
//
// A class whose callers send at an even pace (burstiness 1: the busiest
// seconds are just the busiest minute spread out) gets a burst of 5 ×
// rate; one whose callers send everything in one second of the minute
// (burstiness 60) gets 10 × rate; in between on a log scale. Every number
// is an integer but burstiness, so the proposal is exact: rate and burst
// are whole numbers, rounding only in the multiplier (half away from zero).
type Proposal struct {
	Rate       float64 `json:"rate_per_second"`
	Burst      int64   `json:"burst"`
	Burstiness float64 `json:"burstiness"`
	Multiplier int64   `json:"multiplier"`
	// Basis is the reading of the rule: keys (proposeByKeys, the default)
	// or samples (propose, --statistic samples).
	Basis string `json:"basis"`
	// BurstWindow is how much of the rate the burst may hold, with the
	// keys reading: 10s (the rule's 10 × rate), or 1m when the keys'
	// short peaks need more than 10 s of the rate.
	BurstWindow string `json:"burst_window,omitempty"`
	// Floor is "static" when the class serves static assets and the
	// proposal was raised to their floor (static.go).
	Floor string `json:"floor,omitempty"`
}

func propose(sec, perMin Dist) Proposal {
	if sec.Samples == 0 {
		return Proposal{}
	}
	rate := 2 * float64(sec.P99)
	b := 60.0
	if perMin.P99 > 0 {
		b = float64(sec.P99) * 60 / float64(perMin.P99)
	}
	b = math.Max(1, math.Min(60, b))
	k := int64(math.Round(5 + 5*math.Log(b)/math.Log(60)))
	k = max(5, min(10, k))
	return Proposal{Rate: rate, Burst: k * int64(rate), Burstiness: b, Multiplier: k, Basis: "samples"}
}
