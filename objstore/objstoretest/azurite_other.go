//go:build !linux

package objstoretest

import "syscall"

// azuriteProcAttr puts Azurite in a process group of its own (Stop kills the
// group).
func azuriteProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
