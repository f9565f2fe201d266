//go:build !linux

package objstore

import (
	"errors"
	"fmt"
)

// mmapRange is only implemented on Linux; elsewhere LocalStore.Map fails
// with ErrUnsupported and the loader reads with ReadAt.
func mmapRange(fd uintptr, off int64, length int) ([]byte, error) {
	return nil, fmt.Errorf("mmap: %w on this platform", ErrUnsupported)
}

func munmapRange(b []byte) error { return nil }

func mmapWhole(fd uintptr, length int) ([]byte, error) { return mmapRange(fd, 0, length) }

func madvisePopulate(b []byte) error { return nil }

func madviseDrop(b []byte) error { return nil }

func mmapWindow(fd uintptr, off int64, length int) ([]byte, error) { return mmapRange(fd, off, length) }

var errDropsUnbatched = errors.New("process_madvise is only available on Linux")

func madviseDropAll(bufs [][]byte) (int64, error) { return 0, errDropsUnbatched }
