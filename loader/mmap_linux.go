//go:build linux

package loader

import "syscall"

// mmapRange maps length bytes of the file fd from off (a multiple of the page
// size) read-only and shared. MAP_POPULATE maps every page of the range in
// this one system call, instead of one page fault per few pages when the
// decoder first touches them.
func mmapRange(fd uintptr, off int64, length int) ([]byte, error) {
	return syscall.Mmap(int(fd), off, length, syscall.PROT_READ, syscall.MAP_SHARED|syscall.MAP_POPULATE)
}

func munmapRange(b []byte) error { return syscall.Munmap(b) }
