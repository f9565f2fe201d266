//go:build linux

package objstore

import (
	"fmt"
	"sync/atomic"
	"syscall"
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
