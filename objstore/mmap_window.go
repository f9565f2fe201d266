package objstore

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"sync"
	"sync/atomic"
)

// WindowMapper is implemented by stores that can map a range of an object
// once for many reads of its parts: [LocalStore] (mmap of the file), and
// [Mux] for local paths. The loader maps the column chunks of the row group
// a reader reads in pieces as one window, so that a piece's pages cost no
// mmap and munmap of their own, and the pages two pieces share (the edges)
// are mapped once.
type WindowMapper interface {
	// MapWindow maps the bytes of obj at [off, off+n), read-only, without
	// populating them: [Window.Bytes] hands out parts of it, populating
	// their pages the first time. Like Map, it pins the version obj
	// describes and fails with an error wrapping io.ErrUnexpectedEOF when
	// the range ends past the end of the object.
	MapWindow(ctx context.Context, obj Object, off, n int64) (*Window, error)
}

var (
	_ WindowMapper = (*LocalStore)(nil)
	_ WindowMapper = (*Mux)(nil)
)

// Window is a range of a file mapped once ([WindowMapper]). Its parts are
// handed out by Bytes and stay valid until Release, which unmaps it. The
// pages of the parts handed out stay in the mapping until then: they are
// the file's pages in the page cache (clean, shared, and reclaimable by
// the kernel under memory pressure like any other page-cache page), not
// memory allocated by the process, but they count in its RSS. The caveats
// of [Mapper] apply (a file truncated while mapped faults).
type Window struct {
	path      string
	off, n    int64           // the range asked for
	m         []byte          // the mapping, from off rounded down to a page
	lo        int64           // off - the mapping's start
	populated []atomic.Uint64 // a bit per page of m populated
	page      int64
	stats     *Stats
	drops     *dropQueue // the store's (WithDropBatch)
	once      sync.Once
}

// Bytes returns the bytes [off, off+n) of the window's file without
// copying, populating the pages not populated before (in one system call
// per run of them); false when they are not all
// inside the window. The bytes populated count in the store's
// Stats.BytesMapped (the window itself counts one Map): a page handed out
// twice is mapped once.
func (w *Window) Bytes(off, n int64) ([]byte, bool, error) {
	if off < w.off || n < 0 || off+n > w.off+w.n || w.m == nil {
		return nil, false, nil
	}
	at := off - w.off + w.lo
	if n > 0 {
		if err := w.populate(at, n); err != nil {
			return nil, false, fmt.Errorf("objstore: map %s [%d, %d): %w", w.path, off, off+n, err)
		}
	}
	return w.m[at : at+n : at+n], true, nil
}

// populate populates the pages of m[at:at+n] not populated before.
func (w *Window) populate(at, n int64) error {
	done, err := populateRuns(w.m, w.populated, w.page, at, n)
	w.stats.BytesMapped.Add(done)
	return err
}

// Drop gives the window's whole pages inside [off, off+n) back, whether
// Bytes populated them or a touch faulted them in: they leave the
// process's page tables (and its RSS; the file's pages stay in the page
// cache), together with other pages of the store's windows once
// [WithDropBatch] bytes of them are pending. Bytes does not populate them
// again: a part handed out before or after stays valid, and its dropped
// pages fault in if touched. A reader drops the pages its pieces are done
// with, those of a compressed page included, which its next piece hands
// out again but takes decompressed (so never touches): a window then holds
// the pages in use, not every page its reader has touched.
func (w *Window) Drop(off, n int64) {
	if w.m == nil || n <= 0 {
		return
	}
	lo, hi := max(off, w.off)-w.off+w.lo, min(off+n, w.off+w.n)-w.off+w.lo
	lo = (lo + w.page - 1) / w.page * w.page // whole pages only: an edge page may hold a neighbour's bytes
	hi = min(hi/w.page*w.page, int64(len(w.m)))
	if hi <= lo {
		return
	}
	w.drops.add(w, lo, hi)
}

// Release unmaps the window; no part handed out may be used after. It may
// be called more than once.
func (w *Window) Release() {
	w.once.Do(func() {
		if w.m != nil {
			w.drops.forget(w) // before the range can be mapped again
			munmapRange(w.m)  // fails only for a range that is not mapped
			w.m = nil
			w.stats.LiveMaps.Add(-1)
		}
	})
}

// MapWindow implements WindowMapper with mmap(2): the pages covering [off,
// off+n) are mapped read-only and shared, and populated as Bytes hands them
// out. The mapping holds its own reference to the file.
func (s *LocalStore) MapWindow(ctx context.Context, obj Object, off, n int64) (*Window, error) {
	path, err := localPath(obj.URI, false)
	if err != nil {
		return nil, err
	}
	end := off + n
	if off < 0 || n <= 0 {
		return nil, fmt.Errorf("objstore: map %s [%d, %d): negative offset or empty range", path, off, end)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("objstore: map %s [%d, %d): %w", path, off, end, err)
	}
	f, err := s.acquire(path, obj)
	if err != nil {
		return nil, err
	}
	defer s.release(f)
	if end > f.size {
		return nil, fmt.Errorf("objstore: map %s [%d, %d): the file has %d bytes: %w", path, off, end, f.size, io.ErrUnexpectedEOF)
	}
	page := int64(os.Getpagesize())
	start := off &^ (page - 1)
	if end-start > math.MaxInt {
		return nil, fmt.Errorf("objstore: map %s [%d, %d): range too large", path, off, end)
	}
	rc, err := f.f.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("objstore: map %s: %w", path, err)
	}
	var m []byte
	var merr error
	if err := rc.Control(func(fd uintptr) { m, merr = mmapWindow(fd, start, int(end-start)) }); err != nil {
		return nil, fmt.Errorf("objstore: map %s: %w", path, err)
	}
	if merr != nil {
		return nil, fmt.Errorf("objstore: map %s [%d, %d): %w", path, off, end, merr)
	}
	pages := (int64(len(m)) + page - 1) / page
	s.cfg.stats.LiveMaps.Add(1)
	s.cfg.stats.Maps.Add(1)
	return &Window{path: path, off: off, n: n, m: m, lo: off - start, page: page,
		populated: make([]atomic.Uint64, (pages+63)/64), stats: s.cfg.stats, drops: &s.drops}, nil
}

// MapWindow implements WindowMapper for local paths; other URIs fail with
// an error wrapping ErrUnsupported.
func (m *Mux) MapWindow(ctx context.Context, obj Object, off, n int64) (*Window, error) {
	s, err := m.route(ctx, obj.URI)
	if err != nil {
		return nil, err
	}
	wm, ok := s.(WindowMapper)
	if !ok {
		return nil, fmt.Errorf("objstore: map %s: %w: the store has no mmap", obj.URI, ErrUnsupported)
	}
	return wm.MapWindow(ctx, obj, off, n)
}
