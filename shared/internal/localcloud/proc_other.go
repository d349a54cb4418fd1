//go:build !linux

package localcloud

import "syscall"

// sysProcAttr: the emulator only runs on Linux; elsewhere nothing is set.
func sysProcAttr() *syscall.SysProcAttr { return nil }

// killMarked finds no processes outside Linux.
func killMarked(string) int { return 0 }
