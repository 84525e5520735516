package bench

import (
	"math/rand/v2"
	"strconv"
	"sync"
)

// seqLen is the length of every pre-generated key sequence; callers walk
// it from different offsets, so the benchmark loop never draws a random
// number or builds a string.
const seqLen = 1 << 22

// Workload is a set of keys and the order in which callers use them.
type Workload struct {
	Name string
	Keys []string
	seq  []uint32 // indexes into Keys, seqLen of them
}

// Key returns the i-th key of the sequence (i wraps).
func (w *Workload) Key(i int) string {
	return w.Keys[w.seq[i&(seqLen-1)]]
}

var (
	keysOnce sync.Once
	allKeys  []string // "user:0" … "user:999999", shared by every workload
)

// keys returns the first n of a million pre-built keys.
func keys(n int) []string {
	keysOnce.Do(func() {
		allKeys = make([]string, 1_000_000)
		for i := range allKeys {
			allKeys[i] = "user:" + strconv.Itoa(i)
		}
	})
	return allKeys[:n]
}

var (
	workloadsMu sync.Mutex
	workloads   = map[string]*Workload{}
)

// Workloads names the workloads of the suite, in table order.
var Workloads = []string{"hot", "uniform100k", "zipf1M"}

// GetWorkload returns the named workload, built once: "hot" (one key),
// "uniform100k" (100,000 keys, uniform) or "zipf1M" (1,000,000 keys,
// Zipf s=1.1: the most used key takes an eighth of the checks, half of
// them go to 69 keys and 90% to 62,000; the sequence of 4M checks touches
// about 350,000 distinct keys, and the warm-up all million).
func GetWorkload(name string) *Workload {
	workloadsMu.Lock()
	defer workloadsMu.Unlock()
	if w, ok := workloads[name]; ok {
		return w
	}
	r := rand.New(rand.NewPCG(1, 2)) // fixed seed: the same work in every run
	w := &Workload{Name: name, seq: make([]uint32, seqLen)}
	switch name {
	case "hot":
		w.Keys = keys(1)
	case "uniform100k":
		w.Keys = keys(100_000)
		for i := range w.seq {
			w.seq[i] = uint32(r.IntN(len(w.Keys)))
		}
	case "zipf1M":
		w.Keys = keys(1_000_000)
		z := rand.NewZipf(r, 1.1, 1, uint64(len(w.Keys)-1))
		// A random permutation, so that the hot keys are not the first ones
		// (and not neighbours in whatever order a store keeps).
		perm := r.Perm(len(w.Keys))
		for i := range w.seq {
			w.seq[i] = uint32(perm[z.Uint64()])
		}
	default:
		panic("bench: unknown workload " + name)
	}
	workloads[name] = w
	return w
}

// MeanKeyLen is the mean length in bytes of the million keys.
func MeanKeyLen() float64 {
	var n int
	for _, k := range keys(1_000_000) {
		n += len(k)
	}
	return float64(n) / 1e6
}
