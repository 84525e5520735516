package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestParseCPUList(t *testing.T) {
	for in, want := range map[string][]int{"": nil, "0": {0}, "1-3": {1, 2, 3}, "0,2-3, 5": {0, 2, 3, 5}} {
		got, err := parseCPUList(in)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("parseCPUList(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"a", "3-1", "-1", "1-", "1,,2", "0-99999"} {
		if _, err := parseCPUList(bad); err == nil {
			t.Errorf("parseCPUList(%q): no error", bad)
		}
	}
}

// The flags that point at prebuilt binaries and CPU sets are checked
// before anything runs, with an error that names the flag.
func TestCheckCPUFlags(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "sluice")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	plain := filepath.Join(dir, "plain")
	if err := os.WriteFile(plain, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	defer func() {
		prebuilt.sluice, prebuilt.ratelimit, cpuSets.redis, cpuSets.service, cpuSets.load = "", "", "", "", ""
	}()
	prebuilt.sluice = exe
	if err := checkCPUFlags(); err != nil {
		t.Errorf("an executable -sluice-bin: %v", err)
	}
	for _, tc := range []struct {
		set  func()
		flag string
	}{
		{func() { prebuilt.ratelimit = plain }, "-ratelimit-bin"},
		{func() { prebuilt.ratelimit = filepath.Join(dir, "none") }, "-ratelimit-bin"},
		{func() { cpuSets.service = "7-1" }, "-cpus-service"},
	} {
		prebuilt.ratelimit, cpuSets.service = "", ""
		tc.set()
		if err := checkCPUFlags(); err == nil || !strings.Contains(err.Error(), tc.flag) {
			t.Errorf("want an error naming %s, got %v", tc.flag, err)
		}
	}
}
