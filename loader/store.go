package loader

import (
	"context"
	"strconv"
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
	// ModTime is the last modification time (local disk; GCS "updated").
	ModTime time.Time
}

// CacheKey identifies this version of the object: URI plus generation (GCS) or
// size and mtime (local disk). Footer caches key on it.
func (o Object) CacheKey() string {
	if o.Generation != 0 {
		return o.URI + "#g" + strconv.FormatInt(o.Generation, 10)
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
