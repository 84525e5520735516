// Command compare runs sluice's comparison suite and prints one table:
// every workload, every library, its figures, and the ratio to sluice.
//
//	cd bench && go run ./cmd/compare            # what make bench runs
//	go run ./cmd/compare -only memory,heap      # a part of it
//
// It builds the benchmark binary of package bench once, runs its
// benchmarks (BenchmarkHeapPerKey, BenchmarkMemory, BenchmarkRedis) with
// -benchmem, then the gateway benchmark: sluice serve and a bare
// httputil.ReverseProxy, each its own process, in front of the same
// upstream, under the same load from this process, on loopback; then the
// Envoy rate limit service benchmark: sluice serve's envoy_rls against
// envoyproxy/ratelimit (built from its Go module into a cache directory)
// on one Redis, over gRPC from this process (-only envoy). The raw
// go test output is kept (-raw) beside the table.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/bench"
	"github.com/sluicehq/sluice/internal/testkit/envoytest"
)

func main() {
	role := flag.String("role", "", "internal: run as the gateway benchmark's upstream or bareproxy, or the Envoy benchmark's floorrls")
	listen := flag.String("listen", "", "internal: address of -role")
	upstream := flag.String("upstream", "", "internal: upstream URL of -role bareproxy")
	pooled := flag.Bool("pooled", false, "internal: -role bareproxy with a BufferPool")
	only := flag.String("only", "heap,memory,redis,gateway,envoy", "parts to run, comma-separated")
	filter := flag.String("filter", "", "regexp for the sub-benchmarks to run (go test -bench syntax after the top name), empty = all")
	memTime := flag.String("benchtime-memory", "400000x", "go test -benchtime of each in-memory benchmark")
	redisTime := flag.String("benchtime-redis", "20000x", "go test -benchtime of each Redis benchmark")
	gwDur := flag.Duration("gateway-duration", 4*time.Second, "timed part of each gateway load run")
	gwConc := flag.String("gateway-concurrency", "1,32", "concurrent clients of the gateway loads, comma-separated")
	gwRounds := flag.Int("gateway-rounds", 2, "load runs of each proxy, alternating; the best is reported")
	envoyConc := flag.String("envoy-callers", "1,32,128", "concurrent callers of the Envoy rate limit service loads, comma-separated")
	envoyKeys := flag.String("envoy-workloads", "uniform100k,hot", "key workloads of the Envoy rate limit service loads, comma-separated (hot, uniform100k, zipf1M)")
	envoyRounds := flag.Int("envoy-rounds", 2, "load runs of each rate limit service, alternating; the best is reported")
	from := flag.String("from", "", "print the table of an earlier run's raw output instead of running anything")
	raw := flag.String("raw", "", "file for the raw go test output (default: a temporary file, named at the end)")
	flag.StringVar(&prebuilt.sluice, "sluice-bin", "", "a prebuilt sluice binary to run instead of building cmd/sluice")
	flag.StringVar(&prebuilt.ratelimit, "ratelimit-bin", "", "a prebuilt envoyproxy/ratelimit binary to run instead of building it")
	flag.StringVar(&cpuSets.redis, "cpus-redis", "", "CPUs to pin redis-server to (taskset -c list, e.g. 0); empty: not pinned")
	flag.StringVar(&cpuSets.service, "cpus-service", "", "CPUs to pin the measured services (and the gateway's upstream) to, e.g. 1-7")
	flag.StringVar(&cpuSets.load, "cpus-load", "", "CPUs to pin this process, the load generator, to, e.g. 8-15")
	flag.StringVar(&sluiceRLS, "sluice-envoy-rls", "", "fields added to the envoy_rls section of the sluice service's configuration in the Envoy benchmark, comma-separated (e.g. 'max_in_flight_per_domain: 512')")
	flag.BoolVar(&tolerateFailed, "envoy-tolerate-failed", false, "go on when checks of an Envoy load run fail (deadlines on an overloaded machine); the raw lines print how many")
	flag.StringVar(&pprofDir, "envoy-pprof", "", "directory for the sluice service's CPU, goroutine, mutex and block profiles of each Envoy load run (it runs with admin.pprof and samples mutexes and blocking: not for the figures)")
	printRatelimit := flag.Bool("print-ratelimit-bin", false, "build envoyproxy/ratelimit (cached) and print its path, for scripts/pack-bench.sh")
	flag.Parse()
	if *printRatelimit {
		bin, err := envoytest.Binary()
		if err != nil {
			fatal(err)
		}
		fmt.Println(bin)
		return
	}
	if *role == "" {
		if err := checkCPUFlags(); err != nil {
			fatal(err)
		}
		if err := pinSelf(cpuSets.load); err != nil {
			fatal(err)
		}
	}

	switch *role {
	case "":
	case "upstream":
		serveRole(*listen, bench.UpstreamHandler())
		return
	case "bareproxy":
		u, err := url.Parse(*upstream)
		if err != nil {
			fatal(err)
		}
		serveRole(*listen, bench.BareProxy(u, *pooled))
		return
	case "floorrls":
		serveFloorRLS(*listen)
		return
	default:
		fatal(fmt.Errorf("unknown -role %q", *role))
	}

	if *from != "" {
		rs, gw, err := readRaw(*from)
		if err != nil {
			fatal(err)
		}
		buildTable(rs, gw).print(os.Stdout)
		fmt.Println()
		printTargets(os.Stdout, rs, gw)
		return
	}

	parts := map[string]bool{}
	for _, p := range strings.Split(*only, ",") {
		parts[strings.TrimSpace(p)] = true
	}
	work, err := os.MkdirTemp("", "sluice-compare-")
	if err != nil {
		fatal(err)
	}
	defer os.RemoveAll(work)
	rawPath := *raw
	if rawPath == "" {
		rawPath = filepath.Join(os.TempDir(), "sluice-bench-raw.txt")
	}
	rawFile, err := os.Create(rawPath)
	if err != nil {
		fatal(err)
	}
	defer rawFile.Close()

	started := time.Now()
	var results []result
	if parts["heap"] || parts["memory"] || parts["redis"] {
		testBin := filepath.Join(work, "bench.test")
		step("building the benchmark binary")
		if err := run(os.Stderr, "go", "test", "-c", "-o", testBin, "."); err != nil {
			fatal(err)
		}
		phases := []struct{ part, bench, benchtime string }{
			{"heap", "BenchmarkHeapPerKey", "1x"},
			{"memory", "BenchmarkMemory", *memTime},
			{"redis", "BenchmarkRedis", *redisTime},
		}
		for _, ph := range phases {
			if !parts[ph.part] {
				continue
			}
			pattern := "^" + ph.bench + "$"
			if *filter != "" && ph.part != "heap" {
				pattern += "/" + *filter
			}
			step(fmt.Sprintf("%s (-benchtime %s)", ph.bench, ph.benchtime))
			rs, err := runBench(testBin, rawFile, "-test.run", "^$", "-test.bench", pattern,
				"-test.benchtime", ph.benchtime, "-test.benchmem", "-test.timeout", "30m")
			results = append(results, rs...)
			if err != nil {
				fmt.Fprintf(os.Stderr, "compare: %s: %v (its rows so far are kept)\n", ph.bench, err)
			}
		}
	}
	var gw []*gatewayResult
	gwNote := ""
	if parts["gateway"] {
		for _, cs := range strings.Split(*gwConc, ",") {
			conc, err := strconv.Atoi(strings.TrimSpace(cs))
			if err != nil || conc < 1 {
				fatal(fmt.Errorf("-gateway-concurrency: %q is not a positive integer", cs))
			}
			step(fmt.Sprintf("gateway: sluice serve against httputil.ReverseProxy, %d clients", conc))
			g, err := runGateway(work, conc, *gwDur, *gwRounds)
			if err != nil {
				gwNote = err.Error()
				fmt.Fprintln(os.Stderr, "compare: gateway:", err)
				break
			}
			writeGateway(rawFile, g)
			gw = append(gw, g)
		}
	}

	var envoy []envoyResult
	envoyNote := ""
	if parts["envoy"] {
		var callers []int
		for _, cs := range strings.Split(*envoyConc, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(cs))
			if err != nil || n < 1 {
				fatal(fmt.Errorf("-envoy-callers: %q is not a positive integer", cs))
			}
			callers = append(callers, n)
		}
		var workloads []string
		for _, wl := range strings.Split(*envoyKeys, ",") {
			wl = strings.TrimSpace(wl)
			if !slices.Contains(bench.Workloads, wl) {
				fatal(fmt.Errorf("-envoy-workloads: %q is not a workload; want some of %s", wl, strings.Join(bench.Workloads, ", ")))
			}
			workloads = append(workloads, wl)
		}
		var err error
		if envoy, err = runEnvoy(work, workloads, callers, *gwDur, *envoyRounds); err != nil {
			envoyNote = err.Error()
			fmt.Fprintln(os.Stderr, "compare: envoy:", err)
		}
	}

	t := buildTable(results, gw)
	fmt.Println()
	t.print(os.Stdout)
	if gwNote != "" {
		fmt.Printf("\ngateway benchmark not run: %s\n", gwNote)
	}
	fmt.Println()
	printTargets(os.Stdout, results, gw)
	if len(envoy) > 0 {
		fmt.Println()
		printEnvoy(os.Stdout, envoy, *envoyRounds, cpuSets.load != "")
	}
	if envoyNote != "" {
		fmt.Printf("\nEnvoy rate limit service benchmark not finished: %s\n", envoyNote)
	}
	fmt.Printf("\nraw go test output: %s; whole run: %s; %d cores, GOMAXPROCS of the benchmarks as go test sets it\n",
		rawPath, time.Since(started).Round(time.Second), numCPU())
}

func step(s string) { fmt.Fprintf(os.Stderr, "== %s  [%s]\n", s, time.Now().UTC().Format("15:04:05")) }

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "compare:", err)
	os.Exit(1)
}

func run(stderr io.Writer, name string, args ...string) error {
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = stderr, stderr
	return cmd.Run()
}

// runBench runs the test binary, copies its output to raw and a progress
// dot per result to stderr, and parses the benchmark lines.
func runBench(bin string, raw io.Writer, args ...string) ([]result, error) {
	cmd := exec.Command(bin, args...)
	cmd.Dir = "."
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	var rs []result
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	n := 0
	for sc.Scan() {
		line := sc.Text()
		fmt.Fprintln(raw, line)
		if r, ok := parseLine(line); ok {
			rs = append(rs, r)
			n++
			fmt.Fprint(os.Stderr, ".")
			if n%50 == 0 {
				fmt.Fprintln(os.Stderr)
			}
		} else if strings.HasPrefix(line, "---") || strings.Contains(line, "FAIL") || strings.Contains(line, "panic") {
			fmt.Fprintln(os.Stderr, line)
		}
	}
	fmt.Fprintln(os.Stderr)
	return rs, errors.Join(sc.Err(), cmd.Wait())
}

func serveRole(addr string, h http.Handler) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		fatal(err)
	}
}
