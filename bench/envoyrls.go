package bench

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// RLSDomain is the descriptor file (envoyproxy/ratelimit's format) that both
// rate limit services load for the Envoy benchmark: one fixed-window limit
// per user that no run reaches, so every check is counted in Redis and
// admitted, as most are.
const RLSDomain = `domain: bench
descriptors:
  - key: user
    rate_limit:
      unit: hour
      requests_per_unit: 1000000000
`

// RLSResult is what one load run of a rate limit service measured.
type RLSResult struct {
	Decisions int64         // answered OK
	Failed    int64         // errors and OVER_LIMIT answers
	Elapsed   time.Duration // of the timed part
	P50, P99  time.Duration
}

// RPS is the rate of decisions.
func (r RLSResult) RPS() float64 { return float64(r.Decisions) / r.Elapsed.Seconds() }

// callersPerConn is how many callers share one gRPC connection: HTTP/2
// multiplexes their calls, as Envoy's own client does.
const callersPerConn = 16

// EnvoyWindow is the HTTP/2 flow-control window, a stream's and a
// connection's, of LoadRLS's connections: Envoy's default (256 MiB,
// Http2ProtocolOptions initial_stream_window_size and
// initial_connection_window_size), fixed, as Envoy's are. A fixed window
// also keeps gRPC's client from sending the PINGs of its bandwidth
// estimator, which Envoy does not send and each service would answer.
const EnvoyWindow = 256 << 20

// RLSCallTimeout is the deadline of each call of LoadRLS.
const RLSCallTimeout = 2 * time.Second

// LoadRLS sends ShouldRateLimit requests of domain "bench" with one
// descriptor (user = a key of w) to the service at addr from callers
// goroutines, for warmup and then for duration; each call has a deadline
// of RLSCallTimeout.
func LoadRLS(ctx context.Context, addr string, w *Workload, callers int, warmup, duration time.Duration) (RLSResult, error) {
	conns := make([]rlsv3.RateLimitServiceClient, (callers+callersPerConn-1)/callersPerConn)
	for i := range conns {
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithStaticStreamWindowSize(EnvoyWindow), grpc.WithStaticConnWindowSize(EnvoyWindow))
		if err != nil {
			return RLSResult{}, fmt.Errorf("bench: dial %s: %w", addr, err)
		}
		defer cc.Close()
		conns[i] = rlsv3.NewRateLimitServiceClient(cc)
	}
	var (
		mu        sync.Mutex
		latencies []int64
		res       RLSResult
		wg        sync.WaitGroup
		firstErr  error
	)
	// Requests built beforehand, before the clock starts: the timed part
	// measures the services.
	reqsOf := make([][]*rlsv3.RateLimitRequest, callers)
	for c := range reqsOf {
		reqsOf[c] = make([]*rlsv3.RateLimitRequest, 4096)
		for i := range reqsOf[c] {
			reqsOf[c][i] = &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*commonv3.RateLimitDescriptor{{
				Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "user", Value: w.Key(c*(seqLen/callers) + i)}},
			}}}
		}
	}
	measureFrom := time.Now().Add(warmup)
	end := measureFrom.Add(duration)
	for c := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := conns[c%len(conns)]
			reqs := reqsOf[c]
			lat := make([]int64, 0, 1<<16)
			var ok, failed int64
			var err1 error
			for i := 0; ctx.Err() == nil; i++ {
				t := time.Now()
				if t.After(end) {
					break
				}
				// A deadline per call: a service that stops answering
				// fails its calls instead of holding the load up.
				callCtx, cancel := context.WithDeadline(ctx, t.Add(RLSCallTimeout))
				resp, err := client.ShouldRateLimit(callCtx, reqs[i%len(reqs)])
				cancel()
				d := time.Since(t)
				if t.Before(measureFrom) {
					continue
				}
				if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
					failed++
					if err1 == nil {
						err1 = fmt.Errorf("answer %v, error %v", resp.GetOverallCode(), err)
					}
					continue
				}
				ok++
				lat = append(lat, int64(d))
			}
			mu.Lock()
			res.Decisions += ok
			res.Failed += failed
			if firstErr == nil {
				firstErr = err1
			}
			latencies = append(latencies, lat...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	res.Elapsed = min(time.Since(measureFrom), duration)
	slices.Sort(latencies)
	if n := len(latencies); n > 0 {
		res.P50 = time.Duration(latencies[n/2])
		res.P99 = time.Duration(latencies[(n-1)*99/100])
	}
	if res.Decisions == 0 && firstErr != nil {
		return res, fmt.Errorf("bench: no decision from %s: %w", addr, firstErr)
	}
	return res, nil
}

// clockTicks is the kernel's USER_HZ, the unit of /proc/<pid>/stat times
// (100 on every Linux this runs on).
const clockTicks = 100

// ProcessCPU returns the user and system CPU time the process pid has used.
func ProcessCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, fmt.Errorf("bench: CPU time of process %d: %w", pid, err)
	}
	// The command name (field 2) may hold spaces; fields after it are plain.
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 13 {
		return 0, fmt.Errorf("bench: /proc/%d/stat has %d fields after the name, want at least 13", pid, len(fields))
	}
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("bench: /proc/%d/stat: utime %q, stime %q are not numbers", pid, fields[11], fields[12])
	}
	return time.Duration(utime+stime) * time.Second / clockTicks, nil
}

// ProcessSyscalls returns the read and write system calls the process pid
// has made (syscr + syscw of /proc/<pid>/io): each socket read, including
// one that finds nothing, and each write, so a service that answers the
// calls of a connection together makes fewer of them a decision.
func ProcessSyscalls(pid int) (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/io")
	if err != nil {
		return 0, fmt.Errorf("bench: system calls of process %d: %w", pid, err)
	}
	var n int64
	seen := 0
	for _, line := range strings.Split(string(b), "\n") {
		name, v, ok := strings.Cut(line, ":")
		if !ok || (name != "syscr" && name != "syscw") {
			continue
		}
		x, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("bench: /proc/%d/io: %s %q is not a number", pid, name, v)
		}
		n += x
		seen++
	}
	if seen != 2 {
		return 0, fmt.Errorf("bench: /proc/%d/io has no syscr and syscw", pid)
	}
	return n, nil
}

// RedisCPU returns the CPU time (user + system) redis-server has used, from
// INFO cpu.
func RedisCPU(ctx context.Context, c *redis.Client) (time.Duration, error) {
	info, err := c.Info(ctx, "cpu").Result()
	if err != nil {
		return 0, fmt.Errorf("bench: INFO cpu: %w", err)
	}
	var total float64
	for _, line := range strings.Split(info, "\n") {
		name, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (name == "used_cpu_sys" || name == "used_cpu_user") {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return 0, fmt.Errorf("bench: INFO cpu: %s is %q, not a number", name, v)
			}
			total += f
		}
	}
	return time.Duration(total * float64(time.Second)), nil
}

// RedisReads returns the reads Redis has made from its clients' sockets
// (INFO stats total_reads_processed): a read takes what a client wrote
// since the last one, so reads per decision tell how many decisions a
// round trip carries.
func RedisReads(ctx context.Context, c *redis.Client) (int64, error) {
	info, err := c.Info(ctx, "stats").Result()
	if err != nil {
		return 0, fmt.Errorf("bench: INFO stats: %w", err)
	}
	for _, line := range strings.Split(info, "\n") {
		name, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && name == "total_reads_processed" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return 0, fmt.Errorf("bench: INFO stats: %s is %q, not a number", name, v)
			}
			return n, nil
		}
	}
	return 0, fmt.Errorf("bench: INFO stats has no total_reads_processed (Redis before 6.0?)")
}

// RLSConfig is a sluice serve configuration for the Envoy benchmark: the
// rate limit service on rlsListen with the descriptor files of configDir,
// counters in the Redis at redisAddr.
func RLSConfig(listen, admin, rlsListen, configDir, redisAddr string) string {
	return fmt.Sprintf(`listen: %s
admin_listen: %s
upstream: http://127.0.0.1:9
decision_api: {listen: "off"}
store:
  type: redis
  redis: {url: "redis://%s"}
envoy_rls:
  listen: %s
  config_dir: %q
`, listen, admin, redisAddr, rlsListen, configDir)
}
