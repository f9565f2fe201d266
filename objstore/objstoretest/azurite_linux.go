package objstoretest

import "syscall"

// azuriteProcAttr puts Azurite in a process group of its own (Stop kills the
// group) that dies with the test binary.
func azuriteProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
