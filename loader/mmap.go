package loader

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"sync"
)

// Mapper is implemented by stores that can map an object's bytes into memory
// instead of copying them: [LocalStore] (mmap of the file), and [Mux] for
// local paths. The loader maps the column chunks it decodes when the store
// implements Mapper and WithMmap allows it, and reads them with ReadAt
// otherwise (also when Map fails).
//
// # Caveats
//
// The bytes are the file's pages in the page cache, shared with every other
// process: if the file is truncated while mapped, touching the lost pages
// raises SIGBUS. The loader turns such a fault during decoding into an error;
// anywhere else it kills the process. Replace files by renaming a new
// version into place (as [LocalStore.Create] does), never by truncating and
// rewriting them while they are read.
type Mapper interface {
	// Map returns the bytes of obj at [off, off+n), read-only, and a
	// function that unmaps them; the bytes must not be used after it is
	// called, and it must be called exactly once. Like ReadAt, it pins the
	// version obj describes and fails with an error wrapping
	// io.ErrUnexpectedEOF when the range ends past the end of the object.
	Map(ctx context.Context, obj Object, off, n int64) (data []byte, release func(), err error)
}

var (
	_ Mapper = (*LocalStore)(nil)
	_ Mapper = (*Mux)(nil)
)

// Map implements Mapper with mmap(2): the pages covering [off, off+n) are
// mapped read-only and shared, and populated up front. The mapping holds its
// own reference to the file, so it stays valid after the handle is closed.
func (s *LocalStore) Map(ctx context.Context, obj Object, off, n int64) ([]byte, func(), error) {
	path, err := localPath(obj.URI, false)
	if err != nil {
		return nil, nil, err
	}
	end := off + n
	if off < 0 || n < 0 {
		return nil, nil, fmt.Errorf("loader: map %s [%d, %d): negative offset or length", path, off, end)
	}
	if n == 0 {
		return []byte{}, func() {}, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, fmt.Errorf("loader: map %s [%d, %d): %w", path, off, end, err)
	}
	f, err := s.acquire(path, obj)
	if err != nil {
		return nil, nil, err
	}
	defer s.release(f)
	if end > f.size {
		return nil, nil, fmt.Errorf("loader: map %s [%d, %d): the file has %d bytes: %w", path, off, end, f.size, io.ErrUnexpectedEOF)
	}
	page := int64(os.Getpagesize())
	start := off &^ (page - 1)
	if end-start > math.MaxInt {
		return nil, nil, fmt.Errorf("loader: map %s [%d, %d): range too large", path, off, end)
	}
	rc, err := f.f.SyscallConn()
	if err != nil {
		return nil, nil, fmt.Errorf("loader: map %s: %w", path, err)
	}
	var m []byte
	var merr error
	if err := rc.Control(func(fd uintptr) { m, merr = mmapRange(fd, start, int(end-start)) }); err != nil {
		return nil, nil, fmt.Errorf("loader: map %s: %w", path, err)
	}
	if merr != nil {
		return nil, nil, fmt.Errorf("loader: map %s [%d, %d): %w", path, off, end, merr)
	}
	s.liveMaps.Add(1)
	s.cfg.stats.Maps.Add(1)
	s.cfg.stats.BytesMapped.Add(n)
	var once sync.Once
	release := func() {
		once.Do(func() {
			munmapRange(m) // fails only for a range that is not mapped
			s.liveMaps.Add(-1)
		})
	}
	lo := off - start
	return m[lo : lo+n : lo+n], release, nil
}

// Map implements Mapper for local paths; other URIs fail with an error
// wrapping ErrUnsupported (GCS objects are read with ReadAt).
func (m *Mux) Map(ctx context.Context, obj Object, off, n int64) ([]byte, func(), error) {
	s, err := m.route(ctx, obj.URI)
	if err != nil {
		return nil, nil, err
	}
	mp, ok := s.(Mapper)
	if !ok {
		return nil, nil, fmt.Errorf("loader: map %s: %w: the store has no mmap", obj.URI, ErrUnsupported)
	}
	return mp.Map(ctx, obj, off, n)
}
