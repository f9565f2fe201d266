//go:build linux

package objstore

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// mmapRange maps length bytes of the file fd from off (a multiple of the page
// size) read-only and shared. MAP_POPULATE maps every page of the range in
// this one system call, instead of one page fault per few pages when the
// decoder first touches them.
func mmapRange(fd uintptr, off int64, length int) ([]byte, error) {
	return syscall.Mmap(int(fd), off, length, syscall.PROT_READ, syscall.MAP_SHARED|syscall.MAP_POPULATE)
}

func munmapRange(b []byte) error { return syscall.Munmap(b) }

// mmapWhole maps a whole file read-only and shared, without populating it:
// a cached whole-file mapping is populated range by range (madvisePopulate)
// as row groups are first read from it.
func mmapWhole(fd uintptr, length int) ([]byte, error) {
	return syscall.Mmap(int(fd), 0, length, syscall.PROT_READ, syscall.MAP_SHARED)
}

// madvPopulateRead is MADV_POPULATE_READ (Linux 5.14).
const madvPopulateRead = 22

// noPopulate is set once the kernel refused MADV_POPULATE_READ as unknown.
var noPopulate atomic.Bool

// madvisePopulate maps the pages of b, a page-aligned window of a mapping,
// into the page tables in one system call. On kernels without
// MADV_POPULATE_READ it does nothing (the pages fault in when touched); a
// range past the end of the file (truncated since it was mapped) is an
// error.
func madvisePopulate(b []byte) error {
	if len(b) == 0 || noPopulate.Load() {
		return nil
	}
	err := syscall.Madvise(b, madvPopulateRead)
	if err == syscall.EINVAL {
		noPopulate.Store(true)
		return nil
	}
	if err != nil {
		return fmt.Errorf("populating the mapping: %w", err)
	}
	return nil
}

// madviseDrop removes the pages of b, a page-aligned part of a read-only
// shared file mapping, from the page tables (MADV_DONTNEED): they leave
// the process's RSS, stay in the page cache, and fault back in if touched.
func madviseDrop(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	return syscall.Madvise(b, syscall.MADV_DONTNEED)
}

// mmapWindow maps length bytes of the file fd from off (a multiple of the
// page size) read-only and shared, without populating them (a Window
// populates the parts it hands out).
func mmapWindow(fd uintptr, off int64, length int) ([]byte, error) {
	return syscall.Mmap(int(fd), off, length, syscall.PROT_READ, syscall.MAP_SHARED)
}

// errDropsUnbatched: the kernel gives no process_madvise(2) of this
// process's own pages (before Linux 6.13, or refused by a seccomp filter).
var errDropsUnbatched = errors.New("process_madvise(MADV_DONTNEED) of the process itself is not available")

// selfPidfd is this process's pidfd (pidfd_open(2)), opened on first use
// and kept for its lifetime: process_madvise names its target by one.
var selfPidfd = sync.OnceValues(func() (int, error) { return unix.PidfdOpen(os.Getpid(), 0) })

// madviseDropAll gives back the pages of every b in bufs (page-aligned
// parts of read-only shared file mappings) in one process_madvise(2) call,
// which flushes the TLBs once for all of them (Linux 6.16 on; from 6.13 it
// takes them in one call). It returns the bytes given back;
// errDropsUnbatched where the kernel has no such call for the process
// itself.
func madviseDropAll(bufs [][]byte) (int64, error) {
	fd, err := selfPidfd()
	if err != nil {
		return 0, errDropsUnbatched
	}
	iov := make([]unix.Iovec, 0, len(bufs))
	for _, b := range bufs {
		if len(b) > 0 {
			v := unix.Iovec{Base: &b[0]}
			v.SetLen(len(b))
			iov = append(iov, v)
		}
	}
	if len(iov) == 0 {
		return 0, nil
	}
	n, _, e := unix.Syscall6(unix.SYS_PROCESS_MADVISE, uintptr(fd), uintptr(unsafe.Pointer(&iov[0])), uintptr(len(iov)), syscall.MADV_DONTNEED, 0, 0)
	switch e {
	case 0:
		return int64(n), nil
	case syscall.EINVAL, syscall.ENOSYS, syscall.EPERM, syscall.EBADF:
		return 0, errDropsUnbatched
	}
	return 0, e
}
