package objstore

import (
	"context"
	"io"
	"strconv"
	"sync/atomic"
	"time"
)

// Object is one stored object, as seen when it was listed or stat'ed.
type Object struct {
	// URI is "gs://bucket/name" for GCS and an absolute, cleaned path on local disk.
	URI string
	// Size in bytes.
	Size int64
	// Generation is the GCS object generation; reads pin it, so an object
	// overwritten mid-epoch is an error rather than a silent mix of versions.
	// Zero on local disk.
	Generation int64
	// ETag is the entity tag of this version of the object (S3, Azure, HTTPS):
	// reads pin it with If-Match, so an object replaced mid-epoch is an
	// error rather than a silent mix of versions. Empty on GCS and local
	// disk.
	ETag string
	// ModTime is the last modification time (local disk; GCS "updated").
	ModTime time.Time
}

// CacheKey identifies this version of the object: URI plus generation (GCS),
// ETag (S3, Azure, HTTPS) or size and mtime (local disk, HTTPS without an
// ETag). Footer caches key on it.
func (o Object) CacheKey() string {
	if o.Generation != 0 {
		return o.URI + "#g" + strconv.FormatInt(o.Generation, 10)
	}
	if o.ETag != "" {
		return o.URI + "#e" + o.ETag
	}
	return o.URI + "#s" + strconv.FormatInt(o.Size, 10) + "m" + strconv.FormatInt(o.ModTime.UnixNano(), 10)
}

// Store is a blob store: local disk, GCS, or something that wraps one of them
// (fault injection in tests, accounting).
//
// Implementations are safe for concurrent use.
type Store interface {
	// List returns the objects whose URI starts with prefix, sorted by URI.
	// An empty result is not an error.
	List(ctx context.Context, prefix string) ([]Object, error)
	// Stat returns the object at uri. A missing object is an error that
	// satisfies errors.Is(err, ErrNotFound) and names the URI.
	Stat(ctx context.Context, uri string) (Object, error)
	// ReadAt fills all of p with the bytes of obj at [off, off+len(p)). It
	// never returns a short read without an error: reading past the end is
	// an error wrapping io.ErrUnexpectedEOF that names the object. Transient
	// failures are retried within the store's retry budget; a read that
	// breaks off resumes where it stopped.
	ReadAt(ctx context.Context, obj Object, p []byte, off int64) error
	// Close releases clients and connections.
	Close() error
}

// Stats counts what a store did. All fields are updated atomically and
// may be read at any time; a [Mux] shares one Stats between the stores it
// routes to.
type Stats struct {
	// BytesRead is the number of bytes returned by successful ReadAt calls.
	BytesRead atomic.Int64
	// Reads is the number of successful ReadAt calls.
	Reads atomic.Int64
	// Retries is the number of requests re-issued after a failed one
	// (an error status, a broken or stalled connection). Resumes are
	// retries too.
	Retries atomic.Int64
	// Resumes is the number of retries that continued a ranged read past
	// the bytes already received instead of starting it over.
	Resumes atomic.Int64
	// Maps is the number of successful Map calls (local files read through
	// mmap instead of ReadAt; see [Mapper]).
	Maps atomic.Int64
	// BytesMapped is the number of bytes those Map calls made available. They
	// are not counted in BytesRead.
	BytesMapped atomic.Int64
	// BytesDropped is the number of bytes of windows given back before
	// their Release ([Window.Drop]: out of the process's page tables,
	// still in the page cache); a page given back twice counts twice.
	BytesDropped atomic.Int64
	// FileMaps is the number of whole-file mappings made for
	// [WithMapCache]; each serves Map calls until it is evicted.
	FileMaps atomic.Int64
	// LiveMaps is the number of Map results handed out and not yet
	// released (a gauge: zero once every reader that mapped is closed).
	LiveMaps atomic.Int64
	// LiveFileMaps is the number of whole-file mappings ([WithMapCache])
	// not yet unmapped (a gauge: zero after Close).
	LiveFileMaps atomic.Int64

	// The counters of a DiskCache in front of the store ([WithDiskCache],
	// [DiskCache.Wrap]); zero without one. BytesRead and Reads count only
	// what was read from the store itself.

	// CacheHits is the number of cache blocks a read found in the cache,
	// or took from another read's fetch of the same block: no request.
	CacheHits atomic.Int64
	// CacheMisses is the number of cache blocks fetched from the store.
	CacheMisses atomic.Int64
	// CacheBytesSaved is the number of bytes reads took from cache hits:
	// bytes that were not read from the store.
	CacheBytesSaved atomic.Int64
	// CacheEvictions is the number of cache entries removed to keep the
	// cache within its size.
	CacheEvictions atomic.Int64
	// CacheCorrupt is the number of cache entries found truncated or
	// corrupt on read (checksum, size or header); each was removed and its
	// block fetched again.
	CacheCorrupt atomic.Int64
	// CacheWriteErrors is the number of fetched blocks that could not be
	// written to the cache (a full disk, a failing one): the read went on,
	// uncached.
	CacheWriteErrors atomic.Int64
}

// StatsReporter is implemented by stores that count their work.
type StatsReporter interface {
	// Stats returns the store's live counters.
	Stats() *Stats
}

// ListChecker is implemented by stores that cannot list every URI they
// read (the HTTPS store: HTTP has no listing). A store that does not
// implement it lists all of its URIs. See [CanList].
type ListChecker interface {
	// CanList reports whether List works for URIs like uri.
	CanList(uri string) bool
}

// CanList reports whether store can list URIs like uri: false for http(s)://
// (the HTTPS store, or a Mux routing to it), whose List fails with
// ErrUnsupported; [Match] then takes only exact URIs, each checked by Stat.
func CanList(store Store, uri string) bool {
	if l, ok := store.(ListChecker); ok {
		return l.CanList(uri)
	}
	return true
}

// Creator is implemented by stores that can write objects (datasets generated
// by `meshfeed gen`, test fixtures).
type Creator interface {
	// Create returns a writer for the object at uri. Nothing is visible at
	// uri until Close returns nil; Close commits the object, replacing any
	// previous version. ctx must stay live until Close returns.
	Create(ctx context.Context, uri string) (io.WriteCloser, error)
}
