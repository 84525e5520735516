package main

import (
	"fmt"
	"io"
	"math"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/bench"
)

var displayName = map[string]string{
	"sluice":          "sluice",
	"sluice+coalesce": "sluice (coalescing, the default)",
	"floor":           "floor: sharded map, no limit",
	"xrate":           "x/time/rate",
	"sethvargo":       "sethvargo/go-limiter",
	"ulule":           "ulule/limiter",
	"redis_rate":      "go-redis/redis_rate",
	"classic-lua":     "classic Lua (HMGET/HMSET)",
}

func display(lib string) string {
	if d, ok := displayName[lib]; ok {
		return d
	}
	return lib
}

var header = []string{"store", "workload", "callers", "cost", "library", "ns/op", "cpu ns/op", "allocs/op",
	"checks/s", "p50", "p99", "srv µs/check", "B/key", "× sluice", "cpu × sluice"}

type table struct{ rows [][]string }

func (t *table) print(w io.Writer) {
	width := make([]int, len(header))
	all := append([][]string{header}, t.rows...)
	for _, r := range all {
		for i, c := range r {
			width[i] = max(width[i], len([]rune(c)))
		}
	}
	line := func(r []string) {
		var b strings.Builder
		b.WriteString("|")
		for i, c := range r {
			pad := strings.Repeat(" ", width[i]-len([]rune(c)))
			if i >= 5 { // figures: right-aligned
				b.WriteString(" " + pad + c + " |")
			} else {
				b.WriteString(" " + c + pad + " |")
			}
		}
		fmt.Fprintln(w, b.String())
	}
	line(header)
	sep := make([]string, len(header))
	for i := range sep {
		sep[i] = strings.Repeat("-", width[i])
		if i >= 5 {
			sep[i] = sep[i][1:] + ":"
		}
	}
	line(sep)
	for _, r := range t.rows {
		line(r)
	}
}

// key of a setting: the rows that are compared with each other.
type setting struct {
	bench, workload string
	callers, cost   int
}

func settingOf(r result) setting { return setting{r.bench, r.workload, r.callers, r.cost} }

func buildTable(rs []result, gws []*gatewayResult) *table {
	t := &table{}
	sluiceOf := map[setting]result{}
	for _, r := range rs {
		if r.lib == "sluice" {
			sluiceOf[settingOf(r)] = r
		}
	}
	order := map[string]int{"BenchmarkMemory": 0, "BenchmarkHeapPerKey": 1, "BenchmarkRedis": 2}
	wl := map[string]int{}
	for i, w := range bench.Workloads {
		wl[w] = i
	}
	rs = slices.Clone(rs)
	slices.SortStableFunc(rs, func(a, b result) int {
		if d := order[a.bench] - order[b.bench]; d != 0 {
			return d
		}
		if d := wl[a.workload] - wl[b.workload]; d != 0 {
			return d
		}
		if d := a.callers - b.callers; d != 0 {
			return d
		}
		return a.cost - b.cost
	})
	for _, r := range rs {
		m := r.metrics
		s, hasS := sluiceOf[settingOf(r)]
		switch r.bench {
		case "BenchmarkHeapPerKey":
			ratio := ""
			if hasS {
				ratio = fmtRatio(m["heap-B/key"], s.metrics["heap-B/key"])
			}
			t.rows = append(t.rows, []string{"memory", "1M keys, heap", "", "", display(r.lib),
				"", "", "", "", "", "", "", fmt.Sprintf("%.1f", m["heap-B/key"]), ratio, ""})
		case "BenchmarkMemory", "BenchmarkRedis":
			store := "memory"
			srv, bkey := "", ""
			if r.bench == "BenchmarkRedis" {
				store = "redis"
				srv = fmt.Sprintf("%.2f", m["srv-µs/check"])
				if v, ok := m["redis-B/key"]; ok {
					bkey = fmt.Sprintf("%.0f", v)
				}
			}
			ratio, cpuRatio := "", ""
			if hasS {
				ratio = fmtRatio(m["ns/op"], s.metrics["ns/op"])
				cpuRatio = fmtRatio(m["cpu-ns/op"], s.metrics["cpu-ns/op"])
			}
			t.rows = append(t.rows, []string{store, r.workload, fmt.Sprint(r.callers), fmt.Sprint(r.cost), display(r.lib),
				fmtNs(m["ns/op"]), fmtNs(m["cpu-ns/op"]), fmt.Sprintf("%.0f", m["allocs/op"]), fmtRate(m["checks/s"]),
				fmtDur(m["p50-ns"]), fmtDur(m["p99-ns"]), srv, bkey, ratio, cpuRatio})
		}
	}
	for _, gw := range gws {
		sluiceNs := 1e9 / gw.sluice.RPS()
		for _, x := range []struct {
			name string
			r    bench.LoadResult
		}{{"httputil.ReverseProxy", gw.bare}, {"ReverseProxy + BufferPool", gw.pooled}, {"sluice serve (memory)", gw.sluice}} {
			if x.r.Requests == 0 { // runs recorded before the pooled proxy was measured
				continue
			}
			ns := 1e9 / x.r.RPS()
			t.rows = append(t.rows, []string{"gateway", "GET, loopback", fmt.Sprint(gw.concurrency), "1", x.name,
				fmtNs(ns), "", "", fmtRate(x.r.RPS()), fmtDur(float64(x.r.P50)), fmtDur(float64(x.r.P99)), "", "",
				fmtRatio(ns, sluiceNs), ""})
		}
	}
	return t
}

func fmtRatio(v, base float64) string {
	if base == 0 || v == 0 || math.IsNaN(v) {
		return ""
	}
	return fmt.Sprintf("%.2f", v/base)
}

func fmtNs(ns float64) string {
	if ns == 0 {
		return ""
	}
	if ns < 100 {
		return fmt.Sprintf("%.1f", ns)
	}
	return fmt.Sprintf("%.0f", ns)
}

func fmtRate(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2fM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.1fk", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}

func fmtDur(ns float64) string {
	d := time.Duration(ns)
	switch {
	case ns == 0:
		return ""
	case d < time.Microsecond:
		return fmt.Sprintf("%dns", d.Nanoseconds())
	case d < time.Millisecond:
		return fmt.Sprintf("%.1fµs", ns/1e3)
	}
	return fmt.Sprintf("%.2fms", ns/1e6)
}

func numCPU() int { return runtime.NumCPU() }

// verdict is how a target line ends: whether this run met it.
func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT met"
}

// printTargets says where each target of the performance issues stands,
// from this run's figures.
func printTargets(w io.Writer, rs []result, gws []*gatewayResult) {
	find := func(bench, wl string, c, cost int, lib string) (result, bool) {
		for _, r := range rs {
			if r.bench == bench && r.workload == wl && r.callers == c && r.cost == cost && r.lib == lib {
				return r, true
			}
		}
		return result{}, false
	}
	fmt.Fprintln(w, "Targets (issues 2 and 5), from this run:")

	const par = 8 // "parallel": more callers than cores
	if s, ok := find("BenchmarkMemory", "uniform100k", par, 1, "sluice"); ok {
		ns := s.metrics["ns/op"]
		best, bestLib := math.Inf(1), ""
		for _, lib := range []string{"xrate", "sethvargo", "ulule"} {
			if p, ok := find("BenchmarkMemory", "uniform100k", par, 1, lib); ok && p.metrics["ns/op"] < best {
				best, bestLib = p.metrics["ns/op"], lib
			}
		}
		fmt.Fprintf(w, "- memory, 100k keys, %d callers: sluice %.1f ns/op (%.1f CPU ns), %.0f allocs/op: ≤ 100 ns/op and 0 allocs: %s\n",
			par, ns, s.metrics["cpu-ns/op"], s.metrics["allocs/op"], verdict(ns <= 100 && s.metrics["allocs/op"] == 0))
		if bestLib != "" {
			fmt.Fprintf(w, "- memory, 100k keys, %d callers: best peer %s %.1f ns/op, %.2f× sluice: ≥ 3× fewer ns/op: %s\n",
				par, display(bestLib), best, best/ns, verdict(best/ns >= 3 && s.metrics["allocs/op"] == 0))
		}
		bestCPU, bestCPULib := math.Inf(1), ""
		for _, lib := range []string{"xrate", "sethvargo", "ulule"} {
			if p, ok := find("BenchmarkMemory", "uniform100k", par, 1, lib); ok && p.metrics["cpu-ns/op"] < bestCPU {
				bestCPU, bestCPULib = p.metrics["cpu-ns/op"], lib
			}
		}
		if bestCPULib != "" {
			fmt.Fprintf(w, "  (in CPU time per check: best peer %s %.1f ns, %.2f× sluice's %.1f)\n",
				display(bestCPULib), bestCPU, bestCPU/s.metrics["cpu-ns/op"], s.metrics["cpu-ns/op"])
		}
	}
	if s, ok := find("BenchmarkMemory", "hot", par, 1, "sluice"); ok {
		if x, ok := find("BenchmarkMemory", "hot", par, 1, "xrate"); ok {
			fmt.Fprintf(w, "- memory, one hot key, %d callers: sluice %.1f ns/op vs x/time/rate %.1f: faster: %s; in CPU ns per check %.1f vs %.1f: %s\n",
				par, s.metrics["ns/op"], x.metrics["ns/op"], verdict(s.metrics["ns/op"] < x.metrics["ns/op"]),
				s.metrics["cpu-ns/op"], x.metrics["cpu-ns/op"], verdict(s.metrics["cpu-ns/op"] < x.metrics["cpu-ns/op"]))
		}
	}
	if s, ok := find("BenchmarkHeapPerKey", "", 0, 0, "sluice"); ok {
		v := s.metrics["heap-B/key"]
		kl := bench.MeanKeyLen()
		fmt.Fprintf(w, "- memory, heap per key at 1M keys: sluice %.1f B, all its own (it keeps a hash, not the key): ≤ 64 B + key (%.1f B here): %s; ≤ 64 B: %s\n",
			v, 64+kl, verdict(v <= 64+kl), verdict(v <= 64))
	}

	const wl, c = "uniform100k", 32
	s, okS := find("BenchmarkRedis", wl, c, 1, "sluice")
	sc, okC := find("BenchmarkRedis", wl, c, 1, "sluice+coalesce")
	if okS {
		bestRate, bestLib := s.metrics["checks/s"], "sluice"
		if okC && sc.metrics["checks/s"] > bestRate {
			bestRate, bestLib = sc.metrics["checks/s"], "sluice+coalesce"
		}
		for _, peer := range []string{"redis_rate", "classic-lua"} {
			if p, ok := find("BenchmarkRedis", wl, c, 1, peer); ok {
				x := bestRate / p.metrics["checks/s"]
				fmt.Fprintf(w, "- redis, %s, %d callers: %s %s checks/s vs %s %s: %.2f×, ≥ 2×: %s\n", wl, c,
					display(bestLib), fmtRate(bestRate), display(peer), fmtRate(p.metrics["checks/s"]), x, verdict(x >= 2))
			}
		}
		us := s.metrics["srv-µs/check"]
		fmt.Fprintf(w, "- redis, server CPU per check, sluice without coalescing: %.2f µs: ≤ 5 µs (issue 2): %s\n", us, verdict(us <= 5))
		if cl, ok := find("BenchmarkRedis", wl, c, 1, "classic-lua"); ok {
			cu := cl.metrics["srv-µs/check"]
			fmt.Fprintf(w, "- redis, server CPU per check: sluice %.2f µs vs classic %.2f µs: ≤ half: %s\n", us, cu, verdict(us <= cu/2))
			sb, cb := s.metrics["redis-B/key"], cl.metrics["redis-B/key"]
			if sb > 0 && cb > 0 {
				fmt.Fprintf(w, "- redis, memory per key: sluice %.0f B vs classic hash %.0f B: no more: %s\n", sb, cb, verdict(sb <= cb))
			}
		}
		if okC {
			cu := sc.metrics["srv-µs/check"]
			fmt.Fprintf(w, "- redis, server CPU per check with coalescing: %.2f µs (%.1f checks per script call): ≤ 2 µs: %s\n",
				cu, sc.metrics["checks/call"], verdict(cu <= 2))
		}
	}
	printTargets18(w, find)

	// Throughput at the highest load; added latency at the lowest, where
	// p50 is the time of one request rather than the length of a queue.
	var lo, hi *gatewayResult
	for _, gw := range gws {
		if gw.bare.RPS() == 0 || gw.sluice.RPS() == 0 {
			continue
		}
		if lo == nil || gw.concurrency < lo.concurrency {
			lo = gw
		}
		if hi == nil || gw.concurrency > hi.concurrency {
			hi = gw
		}
	}
	if hi != nil {
		x := hi.sluice.RPS() / hi.bare.RPS()
		fmt.Fprintf(w, "- gateway, %d clients: sluice serve %s req/s = %.0f%% of the bare proxy's %s: ≥ 80%%: %s\n",
			hi.concurrency, fmtRate(hi.sluice.RPS()), 100*x, fmtRate(hi.bare.RPS()), verdict(x >= 0.8))
		if hi.pooled.RPS() > 0 {
			fmt.Fprintf(w, "  (against the same proxy with a BufferPool, as sluice serve has: %.0f%% of its %s req/s, the cost of the limiting itself)\n",
				100*hi.sluice.RPS()/hi.pooled.RPS(), fmtRate(hi.pooled.RPS()))
		}
	}
	if lo != nil {
		added := lo.sluice.P50 - lo.bare.P50
		fmt.Fprintf(w, "- gateway, %d client(s), added p50: %v (%v vs %v): ≤ 100 µs: %s\n", lo.concurrency,
			added.Round(time.Microsecond), lo.sluice.P50.Round(time.Microsecond), lo.bare.P50.Round(time.Microsecond),
			verdict(added <= 100*time.Microsecond))
	}
}

// printTargets18 says where the targets of issue 18 stand: the in-memory
// store's distance to the floor, and the Redis store's default
// (coalescing, a key's checks in a batch decided together) against its
// plain path and against the classic script.
func printTargets18(w io.Writer, find func(bench, wl string, c, cost int, lib string) (result, bool)) {
	fmt.Fprintln(w, "Targets of issue 18, from this run:")
	for _, c := range []int{1, 8} {
		s, ok1 := find("BenchmarkMemory", "uniform100k", c, 1, "sluice")
		f, ok2 := find("BenchmarkMemory", "uniform100k", c, 1, "floor")
		if ok1 && ok2 {
			fmt.Fprintf(w, "- memory, 100k keys, %d caller(s): sluice %.1f ns/op (%.1f CPU ns), floor %.1f (%.1f CPU ns): %.2f× the floor (%.2f× in CPU)\n",
				c, s.metrics["ns/op"], s.metrics["cpu-ns/op"], f.metrics["ns/op"], f.metrics["cpu-ns/op"],
				s.metrics["ns/op"]/f.metrics["ns/op"], s.metrics["cpu-ns/op"]/f.metrics["cpu-ns/op"])
		}
	}
	for _, wl := range []string{"hot", "uniform100k"} {
		p, okP := find("BenchmarkRedis", wl, 1, 1, "sluice")
		d, okD := find("BenchmarkRedis", wl, 1, 1, "sluice+coalesce")
		if okP && okD {
			x := d.metrics["checks/s"] / p.metrics["checks/s"]
			fmt.Fprintf(w, "- redis, %s, 1 caller: default %s checks/s vs plain %s: %.2f×: no loss (≥ 0.95× on a noisy machine): %s\n",
				wl, fmtRate(d.metrics["checks/s"]), fmtRate(p.metrics["checks/s"]), x, verdict(x >= 0.95))
		}
	}
	if p, ok := find("BenchmarkRedis", "hot", 32, 1, "sluice"); ok {
		if d, ok := find("BenchmarkRedis", "hot", 32, 1, "sluice+coalesce"); ok {
			x := d.metrics["checks/s"] / p.metrics["checks/s"]
			fmt.Fprintf(w, "- redis, hot key, 32 callers: default %s checks/s vs plain %s: %.2f×, ≥ 3×: %s\n",
				fmtRate(d.metrics["checks/s"]), fmtRate(p.metrics["checks/s"]), x, verdict(x >= 3))
		}
	}
	for _, wl := range []string{"hot", "uniform100k", "zipf1M"} {
		d, okD := find("BenchmarkRedis", wl, 32, 1, "sluice+coalesce")
		cl, okC := find("BenchmarkRedis", wl, 32, 1, "classic-lua")
		if okD && okC {
			x := d.metrics["srv-µs/check"] / cl.metrics["srv-µs/check"]
			fmt.Fprintf(w, "- redis, %s, 32 callers, server µs per check: default %.2f (%.1f checks a call) vs classic %.2f: %.2f×, ≤ 0.2×: %s\n",
				wl, d.metrics["srv-µs/check"], d.metrics["checks/call"], cl.metrics["srv-µs/check"], x, verdict(x <= 0.2))
		}
	}
}
