package advise

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

// A what-if replays the proposal with its rate and burst scaled by a
// factor (×0.5 stricter, ×2 looser), in the same pass as the replay of the
// proposal itself, on a store of its own: the figures are real replays,
// not extrapolations. Memory: the store's buckets, as for the replay, and
// the hashes of the keys each what-if rejected, exact up to
// maxWhatIfKeys; past that the distinct keys are estimated (HyperLogLog,
// 4 KiB per class, within about 2%) and marked so.

// WhatIf is what the proposal scaled by Factor would have rejected.
type WhatIf struct {
	Factor       float64 `json:"factor"`
	Rate         string  `json:"rate"`
	Burst        int64   `json:"burst"`
	Rejected     int64   `json:"rejected"`
	RejectedKeys int     `json:"rejected_keys"`
	// Estimated: more keys were rejected than the what-if counts exactly;
	// RejectedKeys is an estimate within about 2%.
	Estimated bool `json:"rejected_keys_estimated,omitempty"`
}

// maxWhatIfKeys bounds the rejected keys a what-if counts exactly (some
// 40 bytes each). A variable, for the test.
var maxWhatIfKeys = 1_000_000

// DefaultWhatIf are the factors --html replays when --what-if is not given.
var DefaultWhatIf = []float64{0.5, 2}

type variant struct {
	factor   float64
	rules    [][]sluice.Rule
	store    *memstore.Store
	rejected []int64
	keys     []map[uint64]struct{}
	est      []*distinct // the same keys, estimated
	exact    int         // hashes held in keys
	over     bool        // keys stopped at maxWhatIfKeys
}

// scaleRule is r with rate and burst times f; the burst at least 1.
func scaleRule(r sluice.Rule, f float64) sluice.Rule {
	return sluice.Rule{Rate: r.Rate * f, Burst: max(1, int64(math.Round(float64(r.Burst)*f)))}
}

// addVariants makes rp also replay rules scaled by each of factors.
func (rp *replayer) addVariants(factors []float64) {
	for _, f := range factors {
		v := &variant{
			factor:   f,
			rules:    make([][]sluice.Rule, len(rp.rules)),
			store:    memstore.New(memstore.Options{SweepInterval: -1}),
			rejected: make([]int64, len(rp.rules)),
			keys:     make([]map[uint64]struct{}, len(rp.rules)),
			est:      make([]*distinct, len(rp.rules)),
		}
		for c, rs := range rp.rules {
			for _, r := range rs {
				v.rules[c] = append(v.rules[c], scaleRule(r, f))
			}
		}
		rp.variants = append(rp.variants, v)
	}
}

// checkVariants replays one request, of key hash h, on every variant.
func (rp *replayer) checkVariants(class int32, k string, h uint64, at int64, sweep bool) {
	for _, v := range rp.variants {
		if sweep {
			v.store.Sweep(at)
		}
		res := v.store.CheckAt(sluice.Request{Key: k, Cost: 1, Rules: v.rules[class]}, at)
		if !res.Allowed {
			v.rejected[class]++
			if v.est[class] == nil {
				v.est[class] = new(distinct)
			}
			v.est[class].add(h)
			if v.over {
				continue
			}
			if v.keys[class] == nil {
				v.keys[class] = make(map[uint64]struct{})
			}
			if _, ok := v.keys[class][h]; !ok {
				if v.exact >= maxWhatIfKeys {
					v.over, v.keys = true, nil // from here on, estimates only
					continue
				}
				v.keys[class][h] = struct{}{}
				v.exact++
			}
		}
	}
}

// whatIfs are the variants' figures for class.
func (rp *replayer) whatIfs(class int32) []WhatIf {
	var out []WhatIf
	for _, v := range rp.variants {
		r := v.rules[class][0]
		w := WhatIf{Factor: v.factor, Rate: sluice.FormatRate(r.Rate), Burst: r.Burst, Rejected: v.rejected[class]}
		switch {
		case !v.over:
			w.RejectedKeys = len(v.keys[class])
		case v.est[class] != nil:
			w.RejectedKeys, w.Estimated = int(v.est[class].count()), true
		}
		out = append(out, w)
	}
	return out
}

func (rp *replayer) closeVariants() {
	for _, v := range rp.variants {
		v.store.Close()
	}
}

// parseWhatIf reads --what-if: factors separated by commas, each above 0
// and at most 100; empty gives DefaultWhatIf when html is set.
func parseWhatIf(v string, html bool) ([]float64, error) {
	if v == "" {
		if html {
			return slices.Clone(DefaultWhatIf), nil
		}
		return nil, nil
	}
	var out []float64
	for f := range strings.SplitSeq(v, ",") {
		x, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || !(x > 0 && x <= 100) {
			return nil, fmt.Errorf("--what-if %q: want factors above 0 and at most 100, separated by commas, such as 0.5,2", v)
		}
		if len(out) == 8 {
			return nil, fmt.Errorf("--what-if %q: at most 8 factors", v)
		}
		out = append(out, x)
	}
	return out, nil
}
