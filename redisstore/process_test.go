package redisstore_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

// The rule the processes share: far below what 64 callers ask for, even
// on a loaded machine (one that made only about 320 checks a second of a
// key was seen), so the callers press on it however slow the machine.
var sharedRule = []sluice.Rule{{Rate: 50, Burst: 25}}

const (
	processes  = 4
	goroutines = 16
	runFor     = 3 * time.Second
)

// helperReport is what one child process prints.
type helperReport struct {
	Admitted map[string]int64
	Checks   int64
	Errors   int64
	Start    int64 // Unix µs of the first check
	End      int64 // Unix µs after the last check
}

// TestHelperProcess is not a test: it is the body of the child processes
// of the multi-process tests, run as this test binary with SLUICE_HELPER set.
func TestHelperProcess(t *testing.T) {
	spec := os.Getenv("SLUICE_HELPER")
	if spec == "" {
		t.Skip("only runs as a child process of the multi-process tests")
	}
	var args struct {
		Addrs    []string
		Cluster  bool
		Coalesce bool
		Keys     []string
		StartAt  int64
		Rule     sluice.Rule
		Lease    *redisstore.Lease
	}
	if err := json.Unmarshal([]byte(spec), &args); err != nil {
		t.Fatal(err)
	}
	var client redis.UniversalClient
	if args.Cluster {
		client = redis.NewClusterClient(&redis.ClusterOptions{Addrs: args.Addrs, PoolSize: goroutines})
	} else {
		client = redis.NewClient(&redis.Options{Addr: args.Addrs[0], PoolSize: goroutines})
	}
	defer client.Close()
	var opts redisstore.Options
	if args.Coalesce {
		opts.Coalesce = &redisstore.Coalesce{}
	}
	rs := redisstore.New(client, opts)
	defer rs.Close()
	var store sluice.Store = rs
	rules := sharedRule
	if args.Lease != nil {
		ls, err := redisstore.NewLeased(rs, *args.Lease)
		if err != nil {
			t.Fatal(err)
		}
		defer ls.Close()
		store, rules = ls, []sluice.Rule{args.Rule}
	}
	time.Sleep(time.Until(time.UnixMicro(args.StartAt)))

	rep := helperReport{Admitted: map[string]int64{}, Start: time.Now().UnixMicro()}
	deadline := time.Now().Add(runFor)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			admitted := map[string]int64{}
			var checks, errs int64
			for i := g; time.Now().Before(deadline); i++ {
				key := args.Keys[i%len(args.Keys)]
				r, err := store.Check(ctx, sluice.Request{Key: key, Cost: 1, Rules: rules})
				checks++
				if err != nil {
					errs++
					continue
				}
				if r.Allowed {
					admitted[key]++
				}
			}
			mu.Lock()
			defer mu.Unlock()
			for k, n := range admitted {
				rep.Admitted[k] += n
			}
			rep.Checks += checks
			rep.Errors += errs
		}()
	}
	wg.Wait()
	rep.End = time.Now().UnixMicro()
	out, _ := json.Marshal(rep)
	fmt.Printf("REPORT %s\n", out)
}

// runProcesses starts the child processes on addrs and returns their
// combined admissions per key and the span from the first check to the last.
func runProcesses(t *testing.T, addrs []string, cluster, coalesce bool, keys []string) (map[string]int64, time.Duration, int64) {
	t.Helper()
	return runChildren(t, map[string]any{"Addrs": addrs, "Cluster": cluster, "Coalesce": coalesce, "Keys": keys})
}

// runChildren is runProcesses with the children's arguments in args
// (those of TestHelperProcess); it sets StartAt.
func runChildren(t *testing.T, args map[string]any) (map[string]int64, time.Duration, int64) {
	t.Helper()
	args["StartAt"] = time.Now().Add(2 * time.Second).UnixMicro() // all children start together
	spec, _ := json.Marshal(args)
	type child struct {
		cmd *exec.Cmd
		out bytes.Buffer
	}
	children := make([]*child, processes)
	for i := range children {
		c := &child{cmd: exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")}
		c.cmd.Env = append(os.Environ(), "SLUICE_HELPER="+string(spec))
		c.cmd.Stdout, c.cmd.Stderr = &c.out, &c.out
		if err := c.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		children[i] = c
	}
	total := map[string]int64{}
	var first, last, checks int64
	for i, c := range children {
		if err := c.cmd.Wait(); err != nil {
			t.Fatalf("child %d: %v\n%s", i, err, c.out.String())
		}
		_, line, ok := strings.Cut(c.out.String(), "REPORT ")
		if !ok {
			t.Fatalf("child %d printed no report:\n%s", i, c.out.String())
		}
		var rep helperReport
		if err := json.Unmarshal([]byte(strings.SplitN(line, "\n", 2)[0]), &rep); err != nil {
			t.Fatal(err)
		}
		if rep.Errors > 0 {
			t.Fatalf("child %d: %d of %d checks failed", i, rep.Errors, rep.Checks)
		}
		for k, n := range rep.Admitted {
			total[k] += n
		}
		if first == 0 || rep.Start < first {
			first = rep.Start
		}
		last = max(last, rep.End)
		checks += rep.Checks
	}
	return total, time.Duration(last-first) * time.Microsecond, checks
}

// assertBound checks burst + rate × elapsed + 1 from above, and from below
// that the callers did press on the limit, else the test proves nothing.
// The bound can catch a broken limit (one that is not shared, say) only if
// the callers asked for more than it: a limit that admits more admits
// min(asked, its own limit). So they must have asked for half as much
// again as the bound, and been admitted at least half of it (a loaded
// machine stalls callers, and a stalled bucket fills up and wastes tokens,
// so the lower side is loose on purpose). Neither needs the machine to be
// fast: the rule is far below what even a loaded one asks.
func assertBound(t *testing.T, key string, r sluice.Rule, admitted, asked int64, elapsed time.Duration) {
	t.Helper()
	upper := float64(r.Burst) + r.Rate*elapsed.Seconds() + 1
	t.Logf("key %s: admitted %d of %d over %v (%.0f checks a second); bound %.0f",
		key, admitted, asked, elapsed.Round(time.Millisecond), float64(asked)/elapsed.Seconds(), upper)
	if float64(admitted) > upper {
		t.Errorf("key %s: admitted %d, more than burst + rate × elapsed + 1 = %.1f", key, admitted, upper)
	}
	if float64(asked) < 1.5*upper || float64(admitted) < upper/2 {
		t.Errorf("key %s: %d asked, %d admitted over %v: the callers never pressed the limit of %.0f",
			key, asked, admitted, elapsed.Round(time.Millisecond), upper)
	}
}

func TestProcessesShareOneLimit(t *testing.T) {
	for _, coalesce := range []bool{false, true} {
		t.Run(fmt.Sprint("coalesce=", coalesce), func(t *testing.T) {
			srv := redistest.Start(t)
			admitted, elapsed, checks := runProcesses(t, []string{srv.Addr()}, false, coalesce, []string{"one-key"})
			t.Logf("%d processes × %d goroutines made %d checks", processes, goroutines, checks)
			assertBound(t, "one-key", sharedRule[0], admitted["one-key"], checks, elapsed)
		})
	}
}

func TestProcessesShareOneLimitOnACluster(t *testing.T) {
	for _, coalesce := range []bool{false, true} {
		t.Run(fmt.Sprint("coalesce=", coalesce), func(t *testing.T) { processesOnACluster(t, coalesce) })
	}
}

func processesOnACluster(t *testing.T, coalesce bool) {
	cluster := redistest.StartCluster(t, 3, 0)
	// One key per master, so the load spreads over all three.
	rs := redisstore.New(redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}), redisstore.Options{})
	var keys []string
	seen := map[string]bool{}
	for i := 0; len(keys) < 3 && i < 1000; i++ {
		key := fmt.Sprintf("tenant-%d", i)
		if m := cluster.MasterForKey(rs.Key(key)).Addr(); !seen[m] {
			seen[m] = true
			keys = append(keys, key)
		}
	}
	if len(keys) != 3 {
		t.Fatalf("found keys on %d masters, want 3", len(keys))
	}
	admitted, elapsed, checks := runProcesses(t, cluster.Addrs(), true, coalesce, keys)
	t.Logf("%d processes × %d goroutines made %d checks over 3 masters", processes, goroutines, checks)
	for _, k := range keys {
		assertBound(t, k, sharedRule[0], admitted[k], checks/int64(len(keys)), elapsed)
	}
}
