package objstore

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// DefaultMaxOpenFiles is the default bound on the file handles a [LocalStore]
// keeps open between reads.
const DefaultMaxOpenFiles = 128

// LocalOption configures a [LocalStore].
type LocalOption func(*localConfig)

type localConfig struct {
	maxOpen   int
	mapCache  int64
	dropBatch int64
	stats     *Stats
	roots     []string // WithRoots
}

func newLocalConfig(opts []LocalOption) localConfig {
	c := localConfig{maxOpen: DefaultMaxOpenFiles, dropBatch: DefaultDropBatch}
	for _, o := range opts {
		o(&c)
	}
	if c.maxOpen <= 0 {
		c.maxOpen = DefaultMaxOpenFiles
	}
	if c.stats == nil {
		c.stats = new(Stats)
	}
	return c
}

// WithMaxOpenFiles bounds the open file handles cached between reads, least
// recently used closed first. Default DefaultMaxOpenFiles; zero or negative
// means the default.
func WithMaxOpenFiles(n int) LocalOption {
	return func(c *localConfig) { c.maxOpen = n }
}

// WithMapCache keeps whole-file mappings between Map calls, up to bytes of
// mapped files in all (least recently used unmapped first), instead of
// mapping and unmapping the chunks of every row group. Mapping page-cache
// pages into the process costs as much as copying them once (page-table
// entries made and torn down for every pass); a cached mapping pays it once,
// so later passes over a page-cache-warm file decode at memory speed.
//
// The price: pages touched through a cached mapping stay in the process's
// RSS (as file-backed, shared, clean pages: the kernel can still reclaim
// them) until the file's mapping is evicted or the store is closed, and a
// file truncated while mapped can fault for as long as it stays cached (see
// [Mapper]). Files larger than bytes are mapped range by range as without
// the cache. A mapping lives as long as its file's cached handle, so at most
// WithMaxOpenFiles files stay mapped: raise it for datasets of many files.
// Zero or negative (the default) turns the cache off.
func WithMapCache(bytes int64) LocalOption {
	return func(c *localConfig) { c.mapCache = bytes }
}

// WithDropBatch holds the pages that windows give back ([Window.Drop])
// until bytes of them are pending, then gives them back in one system call
// (process_madvise(2), Linux 6.13 and later), where each Drop made a
// madvise(2) call of its own: the kernel then flushes the TLBs of the
// CPUs the process runs on once for all of them. The process's RSS holds
// up to bytes more of file pages (clean, shared, reclaimable). Default
// DefaultDropBatch; zero or negative gives each Drop's pages back at once,
// as do kernels without the call.
func WithDropBatch(bytes int64) LocalOption {
	return func(c *localConfig) { c.dropBatch = bytes }
}

func withLocalStats(s *Stats) LocalOption {
	return func(c *localConfig) { c.stats = s }
}

// LocalStore is a [Store] and [Creator] on local disk. URIs are absolute,
// cleaned paths; relative paths and a "file://" prefix are accepted.
//
// ReadAt keeps a bounded cache of open handles, so many ranged reads of one
// file open it once. An Object that carries a ModTime (as List and Stat return
// it) pins that version: if the file was replaced since (size or mtime
// differ), ReadAt fails with an error wrapping ErrNotFound instead of
// returning bytes of the new file. A handle opened before the replacement
// keeps serving the old version while it stays cached.
//
// LocalStore is also a [Mapper]: Map maps file ranges with mmap (Linux), so
// the loader decodes straight from the page cache (see loader.WithMmap).
type LocalStore struct {
	cfg   localConfig
	roots *rootSet  // nil without WithRoots
	drops dropQueue // of its windows' pages (WithDropBatch)

	mu             sync.Mutex
	files          map[string]*list.Element // of *openFile
	lru            *list.List               // front = most recently used
	cachedMapBytes int64                    // sum of cachedBytes of the files in lru
	closed         bool
}

type openFile struct {
	path    string
	f       *os.File
	size    int64
	mtime   time.Time
	refs    int  // ReadAt calls and unreleased cached Map results using f
	evicted bool // removed from the cache; close when refs reaches 0

	// The whole-file mapping (WithMapCache), made on the first Map of f and
	// unmapped when f is closed. cachedBytes counts it against the cache
	// while f is in the LRU (guarded by the store's mu).
	mapMu       sync.Mutex
	whole       []byte
	populated   []atomic.Uint64 // a bit per populateChunk of whole already populated
	cachedBytes int64
}

var (
	_ Store         = (*LocalStore)(nil)
	_ Creator       = (*LocalStore)(nil)
	_ StatsReporter = (*LocalStore)(nil)
)

// NewLocalStore returns a store on local disk.
func NewLocalStore(opts ...LocalOption) *LocalStore {
	s := &LocalStore{
		cfg:   newLocalConfig(opts),
		files: make(map[string]*list.Element),
		lru:   list.New(),
	}
	s.drops.batch = s.cfg.dropBatch
	if len(s.cfg.roots) > 0 {
		s.roots = &rootSet{paths: s.cfg.roots}
	}
	return s
}

// Stats returns the store's counters.
func (s *LocalStore) Stats() *Stats { return s.cfg.stats }

// List returns the regular files whose absolute path starts with prefix,
// sorted. It walks the directory part of prefix recursively; a missing
// directory is an empty result.
func (s *LocalStore) List(ctx context.Context, prefix string) ([]Object, error) {
	abs, err := localPath(prefix, true)
	if err != nil {
		return nil, err
	}
	if s.roots != nil {
		out, _, err := s.listEscapes(ctx, prefix)
		return out, err
	}
	root := abs
	if !strings.HasSuffix(abs, "/") {
		root = filepath.Dir(abs)
	}
	var out []Object
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == root && (errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR)) {
				return fs.SkipAll
			}
			return err
		}
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		if d.IsDir() {
			// Descend only where a file could start with the prefix.
			dir := withSlash(p)
			if p != root && !strings.HasPrefix(dir, abs) && !strings.HasPrefix(abs, dir) {
				return fs.SkipDir
			}
			return nil
		}
		if !strings.HasPrefix(p, abs) {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) { // deleted while walking
				return nil
			}
			return err
		}
		if info.Mode()&fs.ModeSymlink != 0 {
			if info, err = os.Stat(p); err != nil {
				return nil // dangling link: not a file
			}
		}
		if !info.Mode().IsRegular() {
			return nil
		}
		out = append(out, Object{URI: p, Size: info.Size(), ModTime: info.ModTime()})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("objstore: list %s: %w", abs, err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].URI < out[j].URI })
	return out, nil
}

func withSlash(p string) string {
	if strings.HasSuffix(p, "/") {
		return p
	}
	return p + "/"
}

// Stat implements Store. A directory is not an object: Stat on one fails with
// an error wrapping ErrNotFound.
func (s *LocalStore) Stat(ctx context.Context, uri string) (Object, error) {
	p, err := localPath(uri, false)
	if err != nil {
		return Object{}, err
	}
	info, err := s.statLocal(p)
	if err != nil {
		return Object{}, err
	}
	if !info.Mode().IsRegular() {
		return Object{}, fmt.Errorf("objstore: %s is not a regular file: %w", p, ErrNotFound)
	}
	return Object{URI: p, Size: info.Size(), ModTime: info.ModTime()}, nil
}

func localErr(op, p string, err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("objstore: %s %s: %w", op, p, ErrNotFound)
	}
	if errors.Is(err, fs.ErrPermission) {
		return fmt.Errorf("objstore: %s %s: %w (%w)", op, p, ErrPermission, err)
	}
	return fmt.Errorf("objstore: %s %s: %w", op, p, err)
}

// ReadAt implements Store.
func (s *LocalStore) ReadAt(ctx context.Context, obj Object, p []byte, off int64) error {
	path, err := localPath(obj.URI, false)
	if err != nil {
		return err
	}
	end := off + int64(len(p))
	if off < 0 {
		return fmt.Errorf("objstore: read %s at negative offset %d", path, off)
	}
	if len(p) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("objstore: read %s [%d, %d): %w", path, off, end, err)
	}
	f, err := s.acquire(path, obj)
	if err != nil {
		return err
	}
	defer s.release(f)
	n, err := f.f.ReadAt(p, off)
	if n == len(p) {
		s.cfg.stats.Reads.Add(1)
		s.cfg.stats.BytesRead.Add(int64(n))
		return nil
	}
	if err == nil || err == io.EOF {
		if cerr := f.changed(); cerr != nil {
			return fmt.Errorf("objstore: read %s [%d, %d): got %d bytes: %w", path, off, end, n, cerr)
		}
		return fmt.Errorf("objstore: read %s [%d, %d): got %d bytes, the file has %d: %w",
			path, off, end, n, f.size, io.ErrUnexpectedEOF)
	}
	return fmt.Errorf("objstore: read %s [%d, %d): %w", path, off, end, err)
}

// changed returns an error wrapping ErrNotFound when the open file is no
// longer the version it was opened as (truncated or rewritten in place since:
// its size or mtime differ), nil otherwise.
func (f *openFile) changed() error {
	info, err := f.f.Stat()
	if err != nil {
		return fmt.Errorf("%s: %w", f.path, err)
	}
	if info.Size() == f.size && info.ModTime().Equal(f.mtime) {
		return nil
	}
	return fmt.Errorf("%s changed since it was opened (now %d bytes, modified %s; opened at %d bytes, modified %s; replace files by renaming new ones into place): %w",
		f.path, info.Size(), info.ModTime().Format(time.RFC3339Nano), f.size, f.mtime.Format(time.RFC3339Nano), ErrNotFound)
}

// matches reports whether an open file is the version obj describes.
func (f *openFile) matches(obj Object) bool {
	if obj.ModTime.IsZero() {
		return true
	}
	return f.size == obj.Size && f.mtime.Equal(obj.ModTime)
}

func (s *LocalStore) acquire(path string, obj Object) (*openFile, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, fmt.Errorf("objstore: read %s: store is closed", path)
	}
	if el, ok := s.files[path]; ok {
		f := el.Value.(*openFile)
		if f.matches(obj) {
			f.refs++
			s.lru.MoveToFront(el)
			s.mu.Unlock()
			return f, nil
		}
		s.evictLocked(el) // another version; reopen below
	}
	s.mu.Unlock()

	fh, err := s.openLocal(path)
	if err != nil {
		return nil, err
	}
	info, err := fh.Stat()
	if err != nil {
		fh.Close()
		return nil, localErr("stat", path, err)
	}
	if !info.Mode().IsRegular() {
		fh.Close()
		return nil, fmt.Errorf("objstore: %s is not a regular file: %w", path, ErrNotFound)
	}
	f := &openFile{path: path, f: fh, size: info.Size(), mtime: info.ModTime(), refs: 1}
	if !f.matches(obj) {
		fh.Close()
		return nil, fmt.Errorf("objstore: %s changed since it was listed (now %d bytes, modified %s; listed %d bytes, modified %s): %w",
			path, f.size, f.mtime.Format(time.RFC3339Nano), obj.Size, obj.ModTime.Format(time.RFC3339Nano), ErrNotFound)
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		f.evicted = true // closed by release
		return f, nil
	}
	if el, ok := s.files[path]; ok { // opened concurrently
		s.evictLocked(el)
	}
	s.files[path] = s.lru.PushFront(f)
	for s.lru.Len() > s.cfg.maxOpen {
		s.evictLocked(s.lru.Back())
	}
	return f, nil
}

func (s *LocalStore) evictLocked(el *list.Element) {
	f := el.Value.(*openFile)
	s.lru.Remove(el)
	if cur, ok := s.files[f.path]; ok && cur == el {
		delete(s.files, f.path)
	}
	f.evicted = true
	s.cachedMapBytes -= f.cachedBytes
	f.cachedBytes = 0
	if f.refs == 0 {
		s.closeLocked(f)
	}
}

func (s *LocalStore) release(f *openFile) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f.refs--
	if f.evicted && f.refs == 0 {
		s.closeLocked(f)
	}
}

// closeLocked closes an evicted file nobody uses any more, and unmaps its
// whole-file mapping.
func (s *LocalStore) closeLocked(f *openFile) {
	f.f.Close()
	if f.whole != nil {
		munmapRange(f.whole) // fails only for a range that is not mapped
		f.whole = nil
		s.cfg.stats.LiveFileMaps.Add(-1)
	}
}

// forget drops the cached handle of path, if any (after Create replaced it).
func (s *LocalStore) forget(path string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if el, ok := s.files[path]; ok {
		s.evictLocked(el)
	}
}

// Close closes the cached file handles and unmaps the cached mappings (those
// still in use when their last Map result is released). Reads after Close
// fail.
func (s *LocalStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for s.lru.Len() > 0 {
		s.evictLocked(s.lru.Front())
	}
	if s.roots != nil {
		s.roots.close() // open files and mappings keep working
	}
	return nil
}

// Create implements Creator: it creates the parent directories, writes to a
// hidden temporary file beside uri and renames it into place on Close.
func (s *LocalStore) Create(ctx context.Context, uri string) (io.WriteCloser, error) {
	path, err := localPath(uri, false)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("objstore: create %s: %w", path, err)
	}
	dir, base := filepath.Split(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("objstore: create %s: %w", path, err)
	}
	tmp, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return nil, fmt.Errorf("objstore: create %s: %w", path, err)
	}
	if err := tmp.Chmod(0o644); err != nil { // CreateTemp makes it 0600
		tmp.Close()
		os.Remove(tmp.Name())
		return nil, fmt.Errorf("objstore: create %s: %w", path, err)
	}
	return &localWriter{s: s, ctx: ctx, path: path, tmp: tmp}, nil
}

type localWriter struct {
	s    *LocalStore
	ctx  context.Context
	path string
	tmp  *os.File
	err  error
	done bool
}

func (w *localWriter) Write(p []byte) (int, error) {
	if w.done {
		return 0, fmt.Errorf("objstore: write %s: writer is closed", w.path)
	}
	if w.err != nil {
		return 0, w.err
	}
	n, err := w.tmp.Write(p)
	if err != nil {
		w.err = fmt.Errorf("objstore: write %s: %w", w.path, err)
		return n, w.err
	}
	return n, nil
}

// Close commits the file; after a failed Write, or if ctx is done, it
// removes the temporary file and returns the error.
func (w *localWriter) Close() error {
	if w.done {
		return nil
	}
	w.done = true
	err := w.err
	if err == nil {
		if cerr := w.ctx.Err(); cerr != nil {
			err = fmt.Errorf("objstore: create %s: %w", w.path, cerr)
		}
	}
	if cerr := w.tmp.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("objstore: close %s: %w", w.path, cerr)
	}
	if err == nil {
		if rerr := os.Rename(w.tmp.Name(), w.path); rerr != nil {
			err = fmt.Errorf("objstore: commit %s: %w", w.path, rerr)
		}
	}
	if err != nil {
		os.Remove(w.tmp.Name())
		return err
	}
	w.s.forget(w.path)
	return nil
}
