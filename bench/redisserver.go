package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisServer is a redis-server of the benchmark's own, on a free loopback
// port, without persistence: never the shared instance on 6379.
type RedisServer struct {
	Addr string
	cmd  *exec.Cmd
	dir  string
}

// StartRedis starts redis-server (from PATH) and waits until it answers.
func StartRedis() (*RedisServer, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("bench: redis-server not found on PATH (apt-get install redis-server): %w", err)
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "sluice-bench-redis-")
	if err != nil {
		return nil, err
	}
	s := &RedisServer{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), dir: dir}
	s.cmd = exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir, "--protected-mode", "yes")
	// The server dies with the benchmark process, even when it is killed.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("bench: start redis-server: %w", err)
	}
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err = c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return s, nil
		}
		if time.Now().After(deadline) {
			s.Stop()
			return nil, fmt.Errorf("bench: redis-server on %s did not answer PING: %w", s.Addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop ends the server and removes its directory.
func (s *RedisServer) Stop() {
	if s.cmd.Process != nil {
		s.cmd.Process.Kill()
		s.cmd.Wait()
	}
	os.RemoveAll(s.dir)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// CommandStat is one line of INFO commandstats.
type CommandStat struct {
	Calls int64
	Usec  int64
}

// CommandStats returns INFO commandstats by command name ("evalsha", …).
func CommandStats(ctx context.Context, c *redis.Client) (map[string]CommandStat, error) {
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, err
	}
	stats := map[string]CommandStat{}
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		// cmdstat_evalsha:calls=10,usec=123,usec_per_call=12.30,...
		name, rest, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		var st CommandStat
		for _, kv := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "calls":
				st.Calls, _ = strconv.ParseInt(v, 10, 64)
			case "usec":
				st.Usec, _ = strconv.ParseInt(v, 10, 64)
			}
		}
		stats[strings.TrimPrefix(name, "cmdstat_")] = st
	}
	return stats, sc.Err()
}

// ScriptUsec is the server time spent in scripts (EVALSHA and EVAL, which
// include the commands the scripts call) and the number of script calls.
func ScriptUsec(stats map[string]CommandStat) (usec, calls int64) {
	for _, name := range []string{"evalsha", "eval", "evalsha_ro", "eval_ro"} {
		usec += stats[name].Usec
		calls += stats[name].Calls
	}
	return usec, calls
}

// MemoryUsage is MEMORY USAGE key SAMPLES 0: the bytes Redis holds for the
// key, its value and its expiry.
func MemoryUsage(ctx context.Context, c *redis.Client, key string) (int64, error) {
	n, err := c.MemoryUsage(ctx, key, 0).Result()
	if errors.Is(err, redis.Nil) {
		return 0, fmt.Errorf("bench: key %q is not in Redis", key)
	}
	return n, err
}

// Pid returns the redis-server's process id.
func (s *RedisServer) Pid() int { return s.cmd.Process.Pid }
