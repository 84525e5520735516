package main

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"

	"github.com/sluicehq/sluice/bench"
)

// prebuilt names binaries to run instead of building them, for a machine
// without a Go toolchain (-sluice-bin, -ratelimit-bin).
var prebuilt struct{ sluice, ratelimit string }

// cpuSets are the CPU lists (taskset -c syntax: "0", "1-7", "0,2-3") that
// the processes are pinned to; empty: not pinned.
var cpuSets struct{ redis, service, load string }

// parseCPUList checks a CPU list in taskset -c syntax and returns the CPUs.
func parseCPUList(s string) ([]int, error) {
	if s == "" {
		return nil, nil
	}
	var cpus []int
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(part), "-")
		a, err := strconv.Atoi(lo)
		b := a
		if err == nil && isRange {
			b, err = strconv.Atoi(hi)
		}
		if err != nil || a < 0 || b < a || b > 4095 {
			return nil, fmt.Errorf("CPU list %q: want numbers and ranges such as 0,2-7", s)
		}
		for c := a; c <= b; c++ {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}

// checkCPUFlags validates the -cpus-* flags and the prebuilt binaries.
func checkCPUFlags() error {
	for name, list := range map[string]string{"-cpus-redis": cpuSets.redis, "-cpus-service": cpuSets.service, "-cpus-load": cpuSets.load} {
		if _, err := parseCPUList(list); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	if cpuSets.redis+cpuSets.service+cpuSets.load != "" {
		if _, err := exec.LookPath("taskset"); err != nil {
			return fmt.Errorf("the -cpus-* flags need taskset (util-linux) on PATH: %w", err)
		}
	}
	for name, bin := range map[string]string{"-sluice-bin": prebuilt.sluice, "-ratelimit-bin": prebuilt.ratelimit} {
		if bin == "" {
			continue
		}
		if st, err := os.Stat(bin); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
			return fmt.Errorf("%s %q: not an executable file", name, bin)
		}
	}
	return nil
}

// pin pins every thread of process pid to the CPUs of list; nothing when
// list is empty.
func pin(pid int, list string) error {
	if list == "" {
		return nil
	}
	if out, err := exec.Command("taskset", "-a", "-p", "-c", list, strconv.Itoa(pid)).CombinedOutput(); err != nil {
		return fmt.Errorf("taskset -a -p -c %s %d: %v: %s", list, pid, err, out)
	}
	return nil
}

// pinSelf re-executes this process under taskset -c list (every thread
// of a Go process must be pinned, and new ones inherit it), once.
func pinSelf(list string) error {
	const env = "SLUICE_COMPARE_PINNED"
	if list == "" || os.Getenv(env) != "" {
		return nil
	}
	taskset, err := exec.LookPath("taskset")
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	args := append([]string{"taskset", "-c", list, self}, os.Args[1:]...)
	return syscall.Exec(taskset, args, append(os.Environ(), env+"=1"))
}

// startRedis starts the benchmark's redis-server, pinned to -cpus-redis.
func startRedis() (*bench.RedisServer, error) {
	srv, err := bench.StartRedis()
	if err != nil {
		return nil, err
	}
	if err := pin(srv.Pid(), cpuSets.redis); err != nil {
		srv.Stop()
		return nil, err
	}
	return srv, nil
}

// sluiceBinary returns -sluice-bin, or builds cmd/sluice into work.
func sluiceBinary(work string) (string, error) {
	if prebuilt.sluice != "" {
		return prebuilt.sluice, nil
	}
	bin := work + "/sluice"
	build := exec.Command("go", "build", "-o", bin, "./cmd/sluice")
	build.Dir = ".."
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/sluice: %v\n%s", err, out)
	}
	return bin, nil
}
