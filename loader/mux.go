package loader

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
)

// StoreStats counts what a store did. All fields are updated atomically and
// may be read at any time; a [Mux] shares one StoreStats between the stores it
// routes to.
type StoreStats struct {
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
	// FileMaps is the number of whole-file mappings made for
	// [WithMapCache]; each serves Map calls until it is evicted.
	FileMaps atomic.Int64
}

// StatsReporter is implemented by stores that count their work.
type StatsReporter interface {
	// Stats returns the store's live counters.
	Stats() *StoreStats
}

// Creator is implemented by stores that can write objects (datasets generated
// by `meshfeed gen`, test fixtures).
type Creator interface {
	// Create returns a writer for the object at uri. Nothing is visible at
	// uri until Close returns nil; Close commits the object, replacing any
	// previous version. ctx must stay live until Close returns.
	Create(ctx context.Context, uri string) (io.WriteCloser, error)
}

// MuxOption configures [NewStore].
type MuxOption func(*muxConfig)

type muxConfig struct {
	local []LocalOption
	gcs   []GCSOption
}

// WithLocalOptions passes options to the local disk store. Default: none.
func WithLocalOptions(opts ...LocalOption) MuxOption {
	return func(c *muxConfig) { c.local = append(c.local, opts...) }
}

// WithGCSOptions passes options to the GCS store, created on the first gs://
// URI. Default: none (default credentials, or STORAGE_EMULATOR_HOST).
func WithGCSOptions(opts ...GCSOption) MuxOption {
	return func(c *muxConfig) { c.gcs = append(c.gcs, opts...) }
}

// Mux is a [Store] and [Creator] that routes "gs://" URIs to a [GCSStore],
// created on first use, and everything else to a [LocalStore]. Relative local
// paths are made absolute against the working directory, and a "file://"
// prefix is accepted. Other URI schemes are an error wrapping ErrUnsupported.
type Mux struct {
	cfg   muxConfig
	stats *StoreStats
	local *LocalStore

	mu     sync.Mutex
	gcs    *GCSStore
	closed bool
}

var (
	_ Store         = (*Mux)(nil)
	_ Creator       = (*Mux)(nil)
	_ StatsReporter = (*Mux)(nil)
)

// NewStore returns a Mux over local disk and GCS. The GCS client is created
// lazily, so a job that reads only local files needs no credentials. ctx is
// not retained.
func NewStore(ctx context.Context, opts ...MuxOption) (*Mux, error) {
	var cfg muxConfig
	for _, o := range opts {
		o(&cfg)
	}
	stats := new(StoreStats)
	local := NewLocalStore(append(cfg.local, withLocalStats(stats))...)
	return &Mux{cfg: cfg, stats: stats, local: local}, nil
}

// Stats returns counters aggregated over the local and GCS stores.
func (m *Mux) Stats() *StoreStats { return m.stats }

func (m *Mux) route(ctx context.Context, uri string) (Store, error) {
	if strings.HasPrefix(uri, "gs://") {
		g, err := m.gcsStore(ctx)
		if err != nil {
			return nil, err
		}
		return g, nil
	}
	if i := strings.Index(uri, "://"); i >= 0 && !strings.HasPrefix(uri, "file://") {
		return nil, fmt.Errorf("loader: %q: scheme %q: %w (use gs:// or a local path)", uri, uri[:i], ErrUnsupported)
	}
	return m.local, nil
}

func (m *Mux) gcsStore(ctx context.Context) (*GCSStore, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, fmt.Errorf("loader: store is closed")
	}
	if m.gcs != nil {
		return m.gcs, nil
	}
	// The client outlives this call: do not tie it to the caller's cancellation.
	g, err := NewGCSStore(context.WithoutCancel(ctx), append(m.cfg.gcs, withGCSStats(m.stats))...)
	if err != nil {
		return nil, err
	}
	m.gcs = g
	return g, nil
}

// List implements Store.
func (m *Mux) List(ctx context.Context, prefix string) ([]Object, error) {
	s, err := m.route(ctx, prefix)
	if err != nil {
		return nil, err
	}
	return s.List(ctx, prefix)
}

// Stat implements Store.
func (m *Mux) Stat(ctx context.Context, uri string) (Object, error) {
	s, err := m.route(ctx, uri)
	if err != nil {
		return Object{}, err
	}
	return s.Stat(ctx, uri)
}

// ReadAt implements Store.
func (m *Mux) ReadAt(ctx context.Context, obj Object, p []byte, off int64) error {
	s, err := m.route(ctx, obj.URI)
	if err != nil {
		return err
	}
	return s.ReadAt(ctx, obj, p, off)
}

// Create implements Creator.
func (m *Mux) Create(ctx context.Context, uri string) (io.WriteCloser, error) {
	s, err := m.route(ctx, uri)
	if err != nil {
		return nil, err
	}
	return s.(Creator).Create(ctx, uri)
}

// Close closes the local store and, if it was created, the GCS store.
func (m *Mux) Close() error {
	m.mu.Lock()
	m.closed = true
	g := m.gcs
	m.mu.Unlock()
	err := m.local.Close()
	if g != nil {
		if gerr := g.Close(); err == nil {
			err = gerr
		}
	}
	return err
}

// localPath turns a local URI (a path, relative or absolute, or file://path)
// into an absolute, cleaned path. A trailing slash is kept when keepSlash is
// set, because "dir/" and "dir" are different prefixes.
func localPath(uri string, keepSlash bool) (string, error) {
	p := strings.TrimPrefix(uri, "file://")
	if p == "" {
		return "", fmt.Errorf("loader: empty local path: %w", ErrNotFound)
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", fmt.Errorf("loader: %q: %w", uri, err)
	}
	if keepSlash && strings.HasSuffix(p, "/") && !strings.HasSuffix(abs, "/") {
		abs += "/"
	}
	return abs, nil
}
