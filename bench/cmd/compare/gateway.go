package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/bench"
)

// gatewayResult is the best load run of each proxy.
type gatewayResult struct {
	concurrency          int
	bare, pooled, sluice bench.LoadResult // pooled: the bare proxy with a BufferPool
}

// runGateway builds sluice from the parent module, starts the upstream,
// then, round after round, the bare proxy and sluice serve in turn, each
// as its own process, and loads each for dur with conc clients.
func runGateway(work string, conc int, dur time.Duration, rounds int) (*gatewayResult, error) {
	sluiceBin, err := sluiceBinary(work)
	if err != nil {
		return nil, fmt.Errorf("the gateway could not be measured: %w", err)
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	upAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	up, err := startProc(work, "upstream", self, "-role", "upstream", "-listen", upAddr)
	if err != nil {
		return nil, err
	}
	defer up.stop()
	upURL := "http://" + upAddr
	if err := waitHTTP(upURL+"/", up); err != nil {
		return nil, err
	}

	ctx := context.Background()
	res := &gatewayResult{concurrency: conc}
	const path = "/products/42"
	for round := range rounds {
		// The bare reverse proxy, as is and with a buffer pool.
		for _, pooled := range []bool{false, true} {
			addr, err := freeAddr()
			if err != nil {
				return nil, err
			}
			p, err := startProc(work, "bareproxy", self, "-role", "bareproxy", "-listen", addr, "-upstream", upURL, fmt.Sprintf("-pooled=%v", pooled))
			if err != nil {
				return nil, err
			}
			if err := waitHTTP("http://"+addr+path, p); err != nil {
				p.stop()
				return nil, err
			}
			r, err := bench.Load(ctx, "http://"+addr+path, conc, dur/4, dur, 50_000_000)
			p.stop()
			if err != nil {
				return nil, err
			}
			best, name := &res.bare, "bare proxy  "
			if pooled {
				best, name = &res.pooled, "bare+pool   "
			}
			fmt.Fprintf(os.Stderr, "   round %d: %s %8.0f req/s  p50 %v  p99 %v  failed %d\n", round+1, name, r.RPS(), r.P50, r.P99, r.Failed)
			if r.RPS() > best.RPS() || best.Requests == 0 {
				*best = r
			}
		}

		// sluice serve, with the in-memory store.
		addr, err := freeAddr()
		if err != nil {
			return nil, err
		}
		admin, err := freeAddr()
		if err != nil {
			return nil, err
		}
		cfg := filepath.Join(work, "sluice.yaml")
		if err := os.WriteFile(cfg, []byte(bench.GatewayConfig(addr, admin, upURL)), 0o644); err != nil {
			return nil, err
		}
		p, err := startProc(work, "sluice", sluiceBin, "serve", "--config", cfg)
		if err != nil {
			return nil, err
		}
		if err := waitHTTP("http://"+admin+"/readyz", p); err != nil {
			p.stop()
			return nil, err
		}
		if err := waitHTTP("http://"+addr+path, p); err != nil {
			p.stop()
			return nil, err
		}
		r, err := bench.Load(ctx, "http://"+addr+path, conc, dur/4, dur, 50_000_000)
		p.stop()
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(os.Stderr, "   round %d: sluice serve %8.0f req/s  p50 %v  p99 %v  failed %d\n", round+1, r.RPS(), r.P50, r.P99, r.Failed)
		if r.Failed > 0 && r.Requests == 0 {
			return nil, fmt.Errorf("every request through sluice serve failed; its log: %s", p.logTail())
		}
		if r.RPS() > res.sluice.RPS() || res.sluice.Requests == 0 {
			res.sluice = r
		}
	}
	return res, nil
}

type proc struct {
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

func startProc(work, name, bin string, args ...string) (*proc, error) {
	logPath := filepath.Join(work, name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	if err := pin(cmd.Process.Pid, cpuSets.service); err != nil {
		p.stop()
		return nil, err
	}
	return p, nil
}

// stop sends SIGTERM and, if the process has not ended within 5 s, kills it.
func (p *proc) stop() {
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
	}
}

func (p *proc) logTail() string {
	b, _ := os.ReadFile(p.log)
	s := strings.TrimSpace(string(b))
	if len(s) > 2000 {
		s = "…" + s[len(s)-2000:]
	}
	return s
}

// waitHTTP waits up to 15 s for url to answer 200, or for p to end.
func waitHTTP(url string, p *proc) error {
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(15 * time.Second)
	for {
		select {
		case <-p.done:
			return fmt.Errorf("%s ended before %s answered: %s", filepath.Base(p.cmd.Path), url, p.logTail())
		default:
		}
		resp, err := client.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = errors.New(resp.Status)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not answer 200 within 15s: %v; log: %s", url, err, p.logTail())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return "127.0.0.1:" + strconv.Itoa(l.Addr().(*net.TCPAddr).Port), nil
}
