package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sync"
	"sync/atomic"
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
// With [WithMapCache], the range is a window of the file's cached whole-file
// mapping instead, populated the first time it is mapped.
func (s *LocalStore) Map(ctx context.Context, obj Object, off, n int64) ([]byte, func(), error) {
	path, err := localPath(obj.URI, false)
	if err != nil {
		return nil, nil, err
	}
	end := off + n
	if off < 0 || n < 0 {
		return nil, nil, fmt.Errorf("objstore: map %s [%d, %d): negative offset or length", path, off, end)
	}
	if n == 0 {
		return []byte{}, func() {}, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, fmt.Errorf("objstore: map %s [%d, %d): %w", path, off, end, err)
	}
	f, err := s.acquire(path, obj)
	if err != nil {
		return nil, nil, err
	}
	if end > f.size {
		s.release(f)
		return nil, nil, fmt.Errorf("objstore: map %s [%d, %d): the file has %d bytes: %w", path, off, end, f.size, io.ErrUnexpectedEOF)
	}
	if s.cfg.mapCache > 0 && f.size <= s.cfg.mapCache {
		return s.mapCached(f, off, n)
	}
	defer s.release(f)
	page := int64(os.Getpagesize())
	start := off &^ (page - 1)
	if end-start > math.MaxInt {
		return nil, nil, fmt.Errorf("objstore: map %s [%d, %d): range too large", path, off, end)
	}
	rc, err := f.f.SyscallConn()
	if err != nil {
		return nil, nil, fmt.Errorf("objstore: map %s: %w", path, err)
	}
	var m []byte
	var merr error
	if err := rc.Control(func(fd uintptr) { m, merr = mmapRange(fd, start, int(end-start)) }); err != nil {
		return nil, nil, fmt.Errorf("objstore: map %s: %w", path, err)
	}
	if merr != nil {
		return nil, nil, fmt.Errorf("objstore: map %s [%d, %d): %w", path, off, end, merr)
	}
	release := s.handOut(n, func() { munmapRange(m) }) // fails only for a range that is not mapped
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
		return nil, nil, fmt.Errorf("objstore: map %s: %w: the store has no mmap", obj.URI, ErrUnsupported)
	}
	return mp.Map(ctx, obj, off, n)
}

// populateChunk is the granularity at which a cached whole-file mapping
// remembers which of its pages were populated already.
const populateChunk = 64 << 10

// mapCached returns [off, off+n) of f's whole-file mapping, mapping the file
// first if it is not yet. The caller holds a reference to f (acquire), which
// the returned release gives back.
func (s *LocalStore) mapCached(f *openFile, off, n int64) ([]byte, func(), error) {
	fail := func(err error) ([]byte, func(), error) {
		s.release(f)
		return nil, nil, fmt.Errorf("objstore: map %s [%d, %d): %w", f.path, off, off+n, err)
	}
	f.mapMu.Lock()
	if f.whole == nil {
		if f.size > math.MaxInt {
			f.mapMu.Unlock()
			return fail(errors.New("file too large to map"))
		}
		rc, err := f.f.SyscallConn()
		if err != nil {
			f.mapMu.Unlock()
			return fail(err)
		}
		var m []byte
		var merr error
		if err := rc.Control(func(fd uintptr) { m, merr = mmapWhole(fd, int(f.size)) }); err != nil {
			merr = err
		}
		if merr != nil {
			f.mapMu.Unlock()
			return fail(merr)
		}
		f.whole = m
		f.populated = make([]atomic.Uint64, (f.size+populateChunk*64-1)/(populateChunk*64))
		s.cfg.stats.LiveFileMaps.Add(1)
		s.cfg.stats.FileMaps.Add(1)
		s.mu.Lock()
		s.admitMappingLocked(f)
		s.mu.Unlock()
	}
	f.mapMu.Unlock()
	if err := f.populate(off, n); err != nil {
		if cerr := f.changed(); cerr != nil {
			// Truncated under the cached mapping: its pages past the new
			// end are gone.
			return fail(cerr)
		}
		return fail(err)
	}
	return f.whole[off : off+n : off+n], s.handOut(n, func() { s.release(f) }), nil
}

// handOut counts a Map result of n bytes and returns its release, which
// runs free once.
func (s *LocalStore) handOut(n int64, free func()) func() {
	s.cfg.stats.LiveMaps.Add(1)
	s.cfg.stats.Maps.Add(1)
	s.cfg.stats.BytesMapped.Add(n)
	var once sync.Once
	return func() {
		once.Do(func() {
			free()
			s.cfg.stats.LiveMaps.Add(-1)
		})
	}
}

// admitMappingLocked counts f's new whole-file mapping against the cache
// and evicts the least recently used other mapped files until the cache
// fits its bound again (an evicted file in use is unmapped when released).
func (s *LocalStore) admitMappingLocked(f *openFile) {
	if f.evicted {
		return // evicted meanwhile: unmapped with the handle
	}
	f.cachedBytes = f.size
	s.cachedMapBytes += f.size
	for el := s.lru.Back(); el != nil && s.cachedMapBytes > s.cfg.mapCache; {
		prev := el.Prev()
		if g := el.Value.(*openFile); g != f && g.cachedBytes > 0 {
			s.evictLocked(el)
		}
		el = prev
	}
}

// populate maps the pages of [off, off+n) of f's whole-file mapping into the
// page tables in as few system calls as possible, skipping chunks populated
// before, so the decoder does not take a page fault every few pages.
func (f *openFile) populate(off, n int64) error {
	_, err := populateRuns(f.whole, f.populated, populateChunk, off, n)
	return err
}

// populateRuns populates the chunks of m (of size chunk each, the last one
// shorter) that [at, at+n) touches and whose bit in populated is clear, one
// madvise per run of such chunks, and sets their bits; it returns the bytes
// it populated.
func populateRuns(m []byte, populated []atomic.Uint64, chunk, at, n int64) (int64, error) {
	var done int64
	first, last := at/chunk, (at+n-1)/chunk
	for c := first; c <= last; {
		if populated[c/64].Load()&(1<<(c%64)) != 0 {
			c++
			continue
		}
		run := c
		for run <= last && populated[run/64].Load()&(1<<(run%64)) == 0 {
			run++
		}
		lo, hi := c*chunk, min(run*chunk, int64(len(m)))
		if err := madvisePopulate(m[lo:hi]); err != nil {
			return done, err
		}
		done += hi - lo
		for ; c < run; c++ {
			populated[c/64].Or(1 << (c % 64))
		}
	}
	return done, nil
}
