//go:build !linux

package proxytest

import "os/exec"

func setDeathSignal(*exec.Cmd) {}
