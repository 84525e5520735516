package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sluicehq/sluice/bench"
	"github.com/sluicehq/sluice/internal/testkit/envoytest"
)

// envoyRun is one load run of one rate limit service: its decisions and the
// CPU its process and Redis spent on them.
type envoyRun struct {
	bench.RLSResult
	cpu, redisCPU time.Duration
	syscalls      int64 // the service's reads and writes; -1: unknown
	cmdUsec       int64 // Redis's time in the commands it ran for the service (INFO commandstats)
	reads         int64 // Redis's reads of its clients' sockets: its round trips
}

// redisCmdPer is Redis's time in commands per decision, µs: its CPU less
// what its round trips (reads, replies, wake-ups) cost.
func (r envoyRun) redisCmdPer() float64 { return float64(r.cmdUsec) / float64(r.Decisions) }

// perRead is the decisions a Redis read carried.
func (r envoyRun) perRead() float64 { return float64(r.Decisions) / float64(max(r.reads, 1)) }

// syscallsPer is the service's system calls (reads and writes) per
// decision, or -1 when they could not be read.
func (r envoyRun) syscallsPer() float64 {
	if r.syscalls < 0 || r.Decisions == 0 {
		return -1
	}
	return float64(r.syscalls) / float64(r.Decisions)
}

func (r envoyRun) cpuPer() float64 { return float64(r.cpu.Nanoseconds()) / float64(r.Decisions) / 1e3 }
func (r envoyRun) redisCPUPer() float64 {
	return float64(r.redisCPU.Nanoseconds()) / float64(r.Decisions) / 1e3
}

// envoyResult is the best run of each service at one number of callers.
type envoyResult struct {
	workload             string
	callers              int
	floor, sluice, envoy envoyRun
	// redisRounds is sluice's Redis CPU a decision ÷ envoy's in each
	// round, the two measured one after the other: at one caller the
	// kept rounds' ratio swings by this machine's round trips.
	redisRounds []float64
}

// rlsService is a running rate limit service process.
type rlsService struct {
	name  string
	addr  string // gRPC host:port
	admin string // sluice's admin listener, for -envoy-pprof
	p     *proc
}

// runEnvoy compares sluice's envoy_rls with envoyproxy/ratelimit (built
// from its Go module into a cache directory, never a dependency of
// sluice): both run as their own processes on one redis-server of their
// own and load the same descriptor file, and this process loads them in
// turn over gRPC, keys of each of workloads, rounds alternated. The
// CPU of each service's process and of Redis is measured around each run.
func runEnvoy(work string, workloads []string, callers []int, dur time.Duration, rounds int) ([]envoyResult, error) {
	step("envoy: building sluice and envoyproxy/ratelimit " + envoytest.Version)
	sluiceBin, err := sluiceBinary(work)
	if err != nil {
		return nil, err
	}
	peerBin := prebuilt.ratelimit
	if peerBin == "" {
		if peerBin, err = envoytest.Binary(); err != nil {
			return nil, err
		}
	}
	srv, err := startRedis()
	if err != nil {
		return nil, err
	}
	defer srv.Stop()
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer admin.Close()

	runtimeRoot := filepath.Join(work, "runtime")
	confDir := envoytest.ConfigDir(runtimeRoot)
	if err := os.MkdirAll(confDir, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(confDir, "bench.yaml"), []byte(bench.RLSDomain), 0o644); err != nil {
		return nil, err
	}
	peer, err := startPeer(work, peerBin, runtimeRoot, srv.Addr)
	if err != nil {
		return nil, err
	}
	defer peer.p.stop()
	sl, err := startSluiceRLS(work, sluiceBin, confDir, srv.Addr)
	if err != nil {
		return nil, err
	}
	defer sl.p.stop()

	fl, err := startFloorRLS(work)
	if err != nil {
		return nil, err
	}
	defer fl.p.stop()

	ctx := context.Background()
	var results []envoyResult
	for _, wname := range workloads {
		w := bench.GetWorkload(wname)
		for _, c := range callers {
			res := envoyResult{workload: wname, callers: c}
			for round := range rounds {
				var cpu, redis [3]float64 // floor, envoy, sluice: this round's CPU and Redis CPU µs per decision
				for i, s := range []*rlsService{fl, peer, sl} {
					// Each load sends each caller's requests from its
					// first, so a first round's warm-up as long as the
					// timed part makes (and lets the service know) about
					// the counters the timed part counts, as a service
					// that has run a while knows its keys; later rounds
					// count the same ones again.
					warm := dur / 4
					if round == 0 {
						warm = dur
					}
					r, err := measureRLS(ctx, s, admin, w, c, warm, dur, fmt.Sprintf("%s-%d-r%d", wname, c, round+1))
					if err != nil {
						return results, err
					}
					fmt.Fprintf(os.Stderr, "   %s %3d callers, round %d: %-22s %8.0f decisions/s  CPU %6.1f µs/decision  Redis %5.1f µs/decision  syscalls %5.2f/decision  p50 %v  p99 %v  failed %d\n",
						wname, c, round+1, s.name, r.RPS(), r.cpuPer(), r.redisCPUPer(), r.syscallsPer(), r.P50, r.P99, r.Failed)
					cpu[i], redis[i] = r.cpuPer(), r.redisCPUPer()
					best := &res.sluice
					switch s {
					case peer:
						best = &res.envoy
					case fl:
						best = &res.floor
					}
					if r.RPS() > best.RPS() || best.Decisions == 0 {
						*best = r
					}
				}
				res.redisRounds = append(res.redisRounds, redis[2]/redis[1])
				fmt.Fprintf(os.Stderr, "   %s %3d callers, round %d: CPU above the floor sluice %.1f µs/decision, envoy %.1f: ratio %.2f\n",
					wname, c, round+1, cpu[2]-cpu[0], cpu[1]-cpu[0], aboveFloor(cpu[2], cpu[1], cpu[0]))
			}
			results = append(results, res)
		}
	}
	return results, nil
}

func measureRLS(ctx context.Context, s *rlsService, admin *redis.Client, w *bench.Workload, callers int, warm, dur time.Duration, run string) (envoyRun, error) {
	// Warm up first, then measure the CPU around the timed part alone.
	if _, err := bench.LoadRLS(ctx, s.addr, w, callers, 0, warm); err != nil {
		return envoyRun{}, fmt.Errorf("%s: %w; log: %s", s.name, err, s.p.logTail())
	}
	cpu0, err := bench.ProcessCPU(s.p.cmd.Process.Pid)
	if err != nil {
		return envoyRun{}, err
	}
	sys0, sysErr := bench.ProcessSyscalls(s.p.cmd.Process.Pid)
	rcpu0, err := bench.RedisCPU(ctx, admin)
	if err != nil {
		return envoyRun{}, err
	}
	cmd0, err := bench.CommandStats(ctx, admin)
	if err != nil {
		return envoyRun{}, err
	}
	reads0, err := bench.RedisReads(ctx, admin)
	if err != nil {
		return envoyRun{}, err
	}
	var prof *profiler
	if pprofDir != "" && s.admin != "" {
		if prof, err = startProfiles(s.admin, run, dur); err != nil {
			return envoyRun{}, err
		}
	}
	r, err := bench.LoadRLS(ctx, s.addr, w, callers, 0, dur)
	if err != nil {
		return envoyRun{}, fmt.Errorf("%s: %w; log: %s", s.name, err, s.p.logTail())
	}
	if prof != nil {
		if err := prof.wait(); err != nil {
			return envoyRun{}, err
		}
	}
	cpu1, err := bench.ProcessCPU(s.p.cmd.Process.Pid)
	if err != nil {
		return envoyRun{}, err
	}
	syscalls := int64(-1) // unknown where /proc/<pid>/io cannot be read
	if sys1, err := bench.ProcessSyscalls(s.p.cmd.Process.Pid); err == nil && sysErr == nil {
		syscalls = sys1 - sys0
	}
	rcpu1, err := bench.RedisCPU(ctx, admin)
	if err != nil {
		return envoyRun{}, err
	}
	cmd1, err := bench.CommandStats(ctx, admin)
	if err != nil {
		return envoyRun{}, err
	}
	reads1, err := bench.RedisReads(ctx, admin)
	if err != nil {
		return envoyRun{}, err
	}
	printCommandStats(s.name, cmd0, cmd1, reads1-reads0, r.Decisions)
	if r.Failed > 0 && !tolerateFailed {
		return envoyRun{}, fmt.Errorf("%s: %d of %d checks failed or were denied; log: %s", s.name, r.Failed, r.Failed+r.Decisions, s.p.logTail())
	}
	return envoyRun{RLSResult: r, cpu: cpu1 - cpu0, redisCPU: rcpu1 - rcpu0, syscalls: syscalls,
		cmdUsec: commandUsec(cmd0, cmd1), reads: reads1 - reads0}, nil
}

// commandUsec is the time Redis spent in commands between two INFO
// commandstats, the INFO calls' own left out.
func commandUsec(before, after map[string]bench.CommandStat) int64 {
	var usec int64
	for cmd, a := range after {
		if cmd != "info" {
			usec += a.Usec - before[cmd].Usec
		}
	}
	return usec
}

// printCommandStats prints, for each Redis command the run called, its
// calls per decision and the microseconds Redis spent in each call.
// The reads are Redis's reads of its clients' sockets (the INFO calls'
// own included): decisions per read is about how many a round trip
// carries.
func printCommandStats(name string, before, after map[string]bench.CommandStat, reads, decisions int64) {
	if decisions == 0 {
		return
	}
	var parts []string
	for cmd, a := range after {
		b := before[cmd]
		calls, usec := a.Calls-b.Calls, a.Usec-b.Usec
		if calls == 0 || cmd == "info" {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %.2f calls/decision %.2f µs/call", cmd, float64(calls)/float64(decisions), float64(usec)/float64(calls)))
	}
	slices.Sort(parts)
	if len(parts) > 0 {
		fmt.Fprintf(os.Stderr, "      Redis commands of %s: %s; %.2f decisions per read\n", name, strings.Join(parts, "; "), float64(decisions)/float64(max(reads, 1)))
	}
}

func startPeer(work, bin, runtimeRoot, redisAddr string) (*rlsService, error) {
	ports := make([]int, 3)
	for i := range ports {
		a, err := freeAddr()
		if err != nil {
			return nil, err
		}
		ports[i], _ = strconv.Atoi(a[strings.LastIndexByte(a, ':')+1:])
	}
	// env(1) execs the peer with exactly this environment, in its own
	// process id.
	args := append([]string{"-i"}, envoytest.Environ(runtimeRoot, redisAddr, ports[0], ports[1], ports[2])...)
	p, err := startProc(work, "envoyproxy-ratelimit", "env", append(args, bin)...)
	if err != nil {
		return nil, err
	}
	s := &rlsService{name: "envoyproxy/ratelimit", addr: "127.0.0.1:" + strconv.Itoa(ports[0]), p: p}
	if err := waitGRPC(s, "ratelimit"); err != nil {
		p.stop()
		return nil, err
	}
	return s, nil
}

// startFloorRLS starts this program as the empty rate limit service
// (-role floorrls), the floor of the benchmark.
func startFloorRLS(work string) (*rlsService, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	p, err := startProc(work, "floor-rls", self, "-role", "floorrls", "-listen", addr)
	if err != nil {
		return nil, err
	}
	s := &rlsService{name: "floor (empty handler)", addr: addr, p: p}
	if err := waitGRPC(s, ""); err != nil {
		p.stop()
		return nil, err
	}
	return s, nil
}

// serveFloorRLS serves the empty rate limit service on addr until SIGTERM
// or SIGINT.
func serveFloorRLS(addr string) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fatal(err)
	}
	srv := bench.FloorRLSServer()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go func() {
		<-ctx.Done()
		srv.Stop()
	}()
	if err := srv.Serve(ln); err != nil {
		fatal(err)
	}
}

func startSluiceRLS(work, bin, confDir, redisAddr string) (*rlsService, error) {
	var addrs [3]string
	for i := range addrs {
		a, err := freeAddr()
		if err != nil {
			return nil, err
		}
		addrs[i] = a
	}
	cfg := filepath.Join(work, "sluice-rls.yaml")
	yaml := bench.RLSConfig(addrs[0], addrs[1], addrs[2], confDir, redisAddr)
	for f := range strings.SplitSeq(sluiceRLS, ",") {
		if f = strings.TrimSpace(f); f != "" {
			yaml += "  " + f + "\n" // envoy_rls is the file's last section
		}
	}
	if pprofDir != "" {
		yaml += "admin: {pprof: true}\n"
	}
	if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
		return nil, err
	}
	p, err := startProc(work, "sluice-rls", bin, "serve", "--config", cfg)
	if err != nil {
		return nil, err
	}
	s := &rlsService{name: "sluice envoy_rls", addr: addrs[2], admin: addrs[1], p: p}
	if err := waitGRPC(s, ""); err != nil {
		p.stop()
		return nil, err
	}
	return s, nil
}

// waitGRPC waits up to 30 s for the service to report SERVING on the gRPC
// health service, or for its process to end.
func waitGRPC(s *rlsService, service string) error {
	cc, err := grpc.NewClient(s.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer cc.Close()
	health := healthpb.NewHealthClient(cc)
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case <-s.p.done:
			return fmt.Errorf("%s ended before it served: %s", s.name, s.p.logTail())
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		resp, err := health.Check(ctx, &healthpb.HealthCheckRequest{Service: service})
		cancel()
		if err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s on %s not SERVING within 30s (%v, %v); log: %s", s.name, s.addr, resp.GetStatus(), err, s.p.logTail())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// printEnvoy prints the Envoy comparison: decisions per second of the floor
// (an empty handler) and of each service, and the ratios of sluice to
// envoyproxy/ratelimit.
func printEnvoy(w io.Writer, rs []envoyResult, rounds int, pinned bool) {
	fmt.Fprintf(w, "Envoy's rate limit service (gRPC ShouldRateLimit): sluice envoy_rls against envoyproxy/ratelimit %s,\n", envoytest.Version)
	fmt.Fprintf(w, "one Redis, every check under its limit (uniform100k: keys uniform over 100,000 users; hot: one user); the floor is an empty handler\n")
	fmt.Fprintf(w, "served by grpc-go in a process of its own; best of %d alternated rounds\n\n", rounds)
	fmt.Fprintf(w, "| keys | callers | floor decisions/s | sluice decisions/s | envoy decisions/s | sluice ÷ envoy | CPU µs/decision floor / sluice / envoy | CPU ratio | above the floor µs sluice / envoy | above-floor ratio | Redis CPU µs/decision sluice / envoy | Redis ratio | Redis in commands µs/decision sluice / envoy | decisions a Redis read sluice / envoy | syscalls/decision floor / sluice / envoy | p50 sluice / envoy |\n")
	fmt.Fprintf(w, "| -- | --: | --: | --: | --: | --: | --: | --: | --: | --: | --: | --: | --: | --: | --: | --: |\n")
	for _, r := range rs {
		f, sl, en := r.floor.cpuPer(), r.sluice.cpuPer(), r.envoy.cpuPer()
		fmt.Fprintf(w, "| %s | %d | %.0f | %.0f | %.0f | %.2f× | %.1f / %.1f / %.1f | %.2f | %.1f / %.1f | %.2f | %.1f / %.1f | %.2f | %.1f / %.1f | %.1f / %.1f | %.2f / %.2f / %.2f | %v / %v |\n",
			r.workload, r.callers, r.floor.RPS(), r.sluice.RPS(), r.envoy.RPS(), r.sluice.RPS()/r.envoy.RPS(),
			f, sl, en, sl/en, sl-f, en-f, aboveFloor(sl, en, f),
			r.sluice.redisCPUPer(), r.envoy.redisCPUPer(), r.sluice.redisCPUPer()/r.envoy.redisCPUPer(),
			r.sluice.redisCmdPer(), r.envoy.redisCmdPer(), r.sluice.perRead(), r.envoy.perRead(),
			r.floor.syscallsPer(), r.sluice.syscallsPer(), r.envoy.syscallsPer(),
			r.sluice.P50.Round(time.Microsecond), r.envoy.P50.Round(time.Microsecond))
	}
	fmt.Fprintln(w)
	printTargets26(w, rs, pinned)
}

// aboveFloor is sluice's CPU per decision above the floor's over
// envoyproxy/ratelimit's above the floor (issue 26's target: at most ⅓):
// what each service adds to an empty gRPC handler.
func aboveFloor(sluice, envoy, floor float64) float64 {
	return (sluice - floor) / (envoy - floor)
}

// printTargets26 says where the targets of issue 26 stand in this run,
// from the best round of each service as the table shows them. The
// ratios (CPU above the floor, Redis CPU) can be judged on any machine;
// the scaling targets (no loss from 128 to 512 callers, 0.7× the floor's
// decisions/s) only where the load generator has cores of its own
// (pinned), since otherwise it takes its share of the services' cores.
// roundRatios is "; round by round 0.95, 1.15, 1.04", or "" for none.
func roundRatios(rs []float64) string {
	if len(rs) == 0 {
		return ""
	}
	parts := make([]string, len(rs))
	for i, x := range rs {
		parts[i] = strconv.FormatFloat(x, 'f', 2, 64)
	}
	return "; round by round " + strings.Join(parts, ", ")
}

func printTargets26(w io.Writer, rs []envoyResult, pinned bool) {
	fmt.Fprintln(w, "Targets of issue 26, from this run:")
	byKey := map[string]map[int]envoyResult{}
	var workloads []string
	for _, r := range rs {
		if byKey[r.workload] == nil {
			byKey[r.workload] = map[int]envoyResult{}
			workloads = append(workloads, r.workload)
		}
		byKey[r.workload][r.callers] = r
	}
	for _, wl := range workloads {
		for _, c := range slices.Sorted(maps.Keys(byKey[wl])) {
			r := byKey[wl][c]
			f, sl, en := r.floor.cpuPer(), r.sluice.cpuPer(), r.envoy.cpuPer()
			redis := r.sluice.redisCPUPer() / r.envoy.redisCPUPer()
			if c == 1 {
				fmt.Fprintf(w, "- %s, 1 caller: Redis CPU a decision %.2f× envoy's, at most 1×: %s (in commands %.2f×; decisions a read %.2f and %.2f%s)\n",
					wl, redis, verdict(redis <= 1), r.sluice.redisCmdPer()/r.envoy.redisCmdPer(), r.sluice.perRead(), r.envoy.perRead(), roundRatios(r.redisRounds))
				continue
			}
			if c < 32 {
				continue
			}
			above := aboveFloor(sl, en, f)
			fmt.Fprintf(w, "- %s, %d callers: CPU above the floor %.2f× envoy's, at most ⅓: %s; Redis CPU %.2f×, at most ½: %s\n",
				wl, c, above, verdict(above <= 1.0/3), redis, verdict(redis <= 0.5))
		}
	}
	judged := "judged"
	if !pinned {
		judged = "not judged: the load generator shares the services' cores (-cpus-load)"
	}
	for _, wl := range workloads {
		at := byKey[wl]
		if a, ok := at[128]; ok {
			if b, ok := at[512]; ok {
				fmt.Fprintf(w, "- %s, 128 → 512 callers: %.0f → %.0f decisions/s, no loss: %s (%s)\n",
					wl, a.sluice.RPS(), b.sluice.RPS(), verdict(b.sluice.RPS() >= a.sluice.RPS()), judged)
			}
		}
		for _, c := range slices.Sorted(maps.Keys(at)) {
			if c < 32 {
				continue
			}
			x := at[c].sluice.RPS() / at[c].floor.RPS()
			fmt.Fprintf(w, "- %s, %d callers: decisions/s %.2f× the floor's, at least 0.7×: %s (%s)\n", wl, c, x, verdict(x >= 0.7), judged)
		}
	}
}
