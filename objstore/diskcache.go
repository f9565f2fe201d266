package objstore

import (
	"container/list"
	"context"
	"fmt"
	"io"
	"os"
	"sync"
)

// Defaults of a [DiskCache]'s options.
const (
	// DefaultCacheBlockSize: see WithCacheBlockSize.
	DefaultCacheBlockSize = 1 << 20
	// DefaultCacheFetchSize: see WithCacheFetch.
	DefaultCacheFetchSize = 8 << 20
	// DefaultCacheFetchConcurrency: see WithCacheFetch.
	DefaultCacheFetchConcurrency = 8
)

// DiskCacheOption configures [NewDiskCache].
type DiskCacheOption func(*diskCacheConfig)

type diskCacheConfig struct {
	blockSize int64
	fetchSize int64
	fetchConc int
}

func newDiskCacheConfig(opts []DiskCacheOption) diskCacheConfig {
	c := diskCacheConfig{blockSize: DefaultCacheBlockSize, fetchSize: DefaultCacheFetchSize, fetchConc: DefaultCacheFetchConcurrency}
	for _, o := range opts {
		o(&c)
	}
	if c.blockSize <= 0 {
		c.blockSize = DefaultCacheBlockSize
	}
	if c.fetchSize <= 0 {
		c.fetchSize = DefaultCacheFetchSize
	}
	c.fetchSize = max(c.fetchSize, c.blockSize)
	if c.fetchConc <= 0 {
		c.fetchConc = DefaultCacheFetchConcurrency
	}
	return c
}

// WithCacheBlockSize sets the cache's unit: objects are cached in aligned
// blocks of this many bytes (the last block of an object is shorter), each
// fetched whole on a miss, so that any later read of any sub-range of a
// cached block is a hit. A read of a few bytes costs at most one block from
// the store; a ranged read costs at most one block more at each end.
// Default DefaultCacheBlockSize (1 MiB); zero or negative means the default.
// Entries written with another block size are not found (nor served) and
// age out of the cache.
func WithCacheBlockSize(n int64) DiskCacheOption {
	return func(c *diskCacheConfig) { c.blockSize = n }
}

// WithCacheFetch sets how a read's missing blocks are fetched: consecutive
// missing blocks are fetched together in ranged reads of up to size bytes
// (rounded down to whole blocks, at least one), and up to concurrency such
// reads of one ReadAt are in flight at once. A read that spans many blocks
// is thus spread over several concurrent requests, which is what keeps a
// link with tens of milliseconds of latency busy. Defaults
// DefaultCacheFetchSize (8 MiB) and DefaultCacheFetchConcurrency (8); zero
// or negative values mean the defaults.
func WithCacheFetch(size int64, concurrency int) DiskCacheOption {
	return func(c *diskCacheConfig) { c.fetchSize, c.fetchConc = size, concurrency }
}

// DiskCache keeps byte ranges of remote objects on local disk, in aligned
// blocks (WithCacheBlockSize), keyed by [Object.CacheKey] (URI and version:
// GCS generation, ETag, or size and mtime) and block, so that reading the
// same objects again (a second epoch, a restarted server) reads nothing from
// the store. It is bounded by a size in bytes, evicting the least recently
// used blocks first. [DiskCache.Wrap] puts it in front of a [Store]; a [Mux]
// given [WithDiskCache] puts it in front of every remote store it makes.
// Local paths are never cached: they are local already.
//
// An entry is written to a temporary file and renamed into place, so a
// half-written entry is never found; each entry holds its key, offset and a
// CRC-32C of its bytes, checked on every read: an entry that is truncated or
// corrupt is removed, counted (Stats.CacheCorrupt) and fetched again.
// Entries are not fsync'd: after a power loss an entry may be empty or
// garbled, which the check catches. The index is rebuilt at start by
// scanning the directory (least recently written first out).
//
// Concurrent reads of the same missing block fetch it once (the others wait
// for that fetch). Several processes may share a directory: entries are
// replaced atomically and verified on read, so none serves wrong bytes, but
// each bounds only the entries it knows of (its own, and those present when
// it started).
//
// A DiskCache is safe for concurrent use and holds no goroutine: it needs no
// Close.
type DiskCache struct {
	dir string
	max int64
	cfg diskCacheConfig

	mu      sync.Mutex
	used    int64                    // bytes of the indexed entry files
	lru     *list.List               // front = most recently used; values are *cacheEntry
	index   map[string]*list.Element // by entry name
	flights map[string]*flight       // blocks being fetched, by entry name
}

// cacheEntry is one indexed entry file.
type cacheEntry struct {
	name string
	size int64 // of the file, header included
}

// flight is one fetch of a block from the store, which readers of the same
// block wait for instead of fetching it again. data and err are set before
// done is closed.
type flight struct {
	done chan struct{}
	data []byte
	err  error
}

// NewDiskCache opens (creating it if needed) a cache in dir holding at most
// maxBytes bytes of entries, and indexes the entries already there,
// removing temporary files left by an interrupted write. maxBytes must hold
// at least one block.
func NewDiskCache(dir string, maxBytes int64, opts ...DiskCacheOption) (*DiskCache, error) {
	cfg := newDiskCacheConfig(opts)
	if dir == "" {
		return nil, fmt.Errorf("objstore: cache: no directory given")
	}
	if maxBytes < cfg.blockSize+entryHeaderMax {
		return nil, fmt.Errorf("objstore: cache %s: size %d bytes is less than one block (%d bytes); give a larger cache size", dir, maxBytes, cfg.blockSize)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("objstore: cache %s: %w", dir, err)
	}
	c := &DiskCache{dir: dir, max: maxBytes, cfg: cfg, lru: list.New(),
		index: map[string]*list.Element{}, flights: map[string]*flight{}}
	entries, err := scanCacheDir(dir)
	if err != nil {
		return nil, fmt.Errorf("objstore: cache %s: %w", dir, err)
	}
	for _, e := range entries { // oldest first: the newest ends at the front
		c.index[e.name] = c.lru.PushFront(&cacheEntry{name: e.name, size: e.size})
		c.used += e.size
	}
	c.mu.Lock()
	c.evictLocked(nil)
	c.mu.Unlock()
	return c, nil
}

// Dir returns the cache's directory.
func (c *DiskCache) Dir() string { return c.dir }

// Used returns the bytes of the entries the cache indexes.
func (c *DiskCache) Used() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.used
}

// Len returns the number of entries the cache indexes.
func (c *DiskCache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len()
}

// Wrap returns a Store that reads remote objects through the cache and
// everything else (List, Stat, local paths, reads past an object's end)
// through s. Its counters are stats (nil: s's own when s is a StatsReporter,
// else new ones), where the cache adds its own (Stats.CacheHits and the
// fields after it). Closing it closes s, not the cache.
func (c *DiskCache) Wrap(s Store, stats *Stats) *CachedStore {
	if stats == nil {
		if r, ok := s.(StatsReporter); ok {
			stats = r.Stats()
		} else {
			stats = new(Stats)
		}
	}
	return &CachedStore{inner: s, cache: c, stats: stats}
}

// WithDiskCache makes a [Mux] read every remote store's objects through c
// (local paths are read as they are). Default: no cache.
func WithDiskCache(c *DiskCache) MuxOption {
	return func(m *muxConfig) { m.cache = c }
}

// CachedStore is a [Store] in front of another whose remote objects' bytes
// it reads through a [DiskCache] (see [DiskCache.Wrap]).
type CachedStore struct {
	inner Store
	cache *DiskCache
	stats *Stats
}

var (
	_ Store         = (*CachedStore)(nil)
	_ Creator       = (*CachedStore)(nil)
	_ StatsReporter = (*CachedStore)(nil)
)

// Stats returns the store's counters, the cache's included.
func (s *CachedStore) Stats() *Stats { return s.stats }

// List implements Store.
func (s *CachedStore) List(ctx context.Context, prefix string) ([]Object, error) {
	return s.inner.List(ctx, prefix)
}

// Stat implements Store.
func (s *CachedStore) Stat(ctx context.Context, uri string) (Object, error) {
	return s.inner.Stat(ctx, uri)
}

// Close closes the store it wraps.
func (s *CachedStore) Close() error { return s.inner.Close() }

// CanList implements ListChecker by asking the wrapped store: a cached
// https:// store still cannot list.
func (s *CachedStore) CanList(uri string) bool { return CanList(s.inner, uri) }

// Create implements Creator when the wrapped store does. A new object is a
// new version, with a new cache key: nothing cached is invalidated.
func (s *CachedStore) Create(ctx context.Context, uri string) (io.WriteCloser, error) {
	cr, ok := s.inner.(Creator)
	if !ok {
		return nil, fmt.Errorf("objstore: create %s: %w: the store cannot write", uri, ErrUnsupported)
	}
	return cr.Create(ctx, uri)
}

// ReadAt implements Store: each block of obj that [off, off+len(p))
// touches is read from the cache when it holds it, else fetched (with the
// other missing blocks of the read, see WithCacheFetch) and written to it.
func (s *CachedStore) ReadAt(ctx context.Context, obj Object, p []byte, off int64) error {
	end := off + int64(len(p))
	if uriScheme(obj.URI) == "" || len(p) == 0 || off < 0 || end > obj.Size {
		// Local files, and reads the store must refuse or explain.
		return s.inner.ReadAt(ctx, obj, p, off)
	}
	r := &cachedRead{s: s, c: s.cache, obj: obj, key: obj.CacheKey(), p: p, off: off}
	return r.run(ctx)
}

// cachedRead is one CachedStore.ReadAt.
type cachedRead struct {
	s   *CachedStore
	c   *DiskCache
	obj Object
	key string
	p   []byte
	off int64
}
