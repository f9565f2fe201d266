package objstore

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strings"
	"sync"
)

// MuxOption configures [NewStore].
type MuxOption func(*muxConfig)

type muxConfig struct {
	local []LocalOption
	// opts holds each remote scheme's options, by scheme name: the []O
	// of that store's option type O, stored as []any so that the Mux
	// needs no field per store (see addSchemeOptions, schemeOptions).
	opts map[string][]any
	// cache, when set, is put in front of every remote store (WithDiskCache).
	cache *DiskCache
}

// WithLocalOptions passes options to the local disk store. Default: none.
func WithLocalOptions(opts ...LocalOption) MuxOption {
	return func(c *muxConfig) { c.local = append(c.local, opts...) }
}

// A scheme is a URI scheme the Mux routes to a remote store of its own, made
// on the first URI of that scheme. Each remote store registers its scheme
// with registerScheme from its own file (gcs.go: "gs"), together with the
// MuxOption that passes it options (WithGCSOptions): adding a store is a
// file beside local.go and gcs.go, and no line here.
type scheme struct {
	// name is the URI scheme without "://": "gs".
	name string
	// open makes the store, with the options the Mux was given for it
	// (schemeOptions) and the Mux's counters, which the store must update.
	// ctx carries no cancellation: the store outlives the call.
	open func(ctx context.Context, cfg *muxConfig, stats *Stats) (Store, error)
}

// schemes is the registry of remote schemes, filled by the stores' init
// functions and read-only afterwards.
var schemes = map[string]scheme{}

func registerScheme(s scheme) {
	if _, dup := schemes[s.name]; dup {
		panic("objstore: scheme " + s.name + " registered twice")
	}
	schemes[s.name] = s
}

// addSchemeOptions records options for the store of a scheme.
func addSchemeOptions[O any](c *muxConfig, name string, opts []O) {
	if c.opts == nil {
		c.opts = make(map[string][]any)
	}
	for _, o := range opts {
		c.opts[name] = append(c.opts[name], o)
	}
}

// schemeOptions returns the options recorded for the store of a scheme.
func schemeOptions[O any](c *muxConfig, name string) []O {
	out := make([]O, 0, len(c.opts[name]))
	for _, o := range c.opts[name] {
		out = append(out, o.(O))
	}
	return out
}

// uriScheme returns the scheme of a URI ("gs" for "gs://b/o"), or "" for a
// local path (including "file://" ones).
func uriScheme(uri string) string {
	i := strings.Index(uri, "://")
	if i < 0 || uri[:i] == "file" {
		return ""
	}
	return uri[:i]
}

// schemeList returns the registered schemes as "gs://, ..." for messages.
func schemeList() string {
	names := make([]string, 0, len(schemes))
	for n := range schemes {
		names = append(names, n+"://")
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// Mux is a [Store] and [Creator] that routes each URI by its scheme: local
// paths to a [LocalStore], and every registered remote scheme ("gs://": a
// [GCSStore]) to a store of its own, created on first use. Relative local
// paths are made absolute against the working directory, and a "file://"
// prefix is accepted. Other URI schemes are an error wrapping ErrUnsupported.
type Mux struct {
	cfg   muxConfig
	stats *Stats
	local *LocalStore

	mu     sync.Mutex
	remote map[string]Store // by scheme name, made on first use
	closed bool
}

var (
	_ Store         = (*Mux)(nil)
	_ Creator       = (*Mux)(nil)
	_ StatsReporter = (*Mux)(nil)
)

// NewStore returns a Mux over local disk and the registered remote stores
// (GCS). Remote clients are created lazily, so a job that reads only local
// files needs no credentials. ctx is not retained.
func NewStore(ctx context.Context, opts ...MuxOption) (*Mux, error) {
	var cfg muxConfig
	for _, o := range opts {
		o(&cfg)
	}
	stats := new(Stats)
	local := NewLocalStore(append(cfg.local, withLocalStats(stats))...)
	return &Mux{cfg: cfg, stats: stats, local: local, remote: make(map[string]Store)}, nil
}

// Stats returns counters aggregated over the local and remote stores.
func (m *Mux) Stats() *Stats { return m.stats }

func (m *Mux) route(ctx context.Context, uri string) (Store, error) {
	name := uriScheme(uri)
	if name == "" {
		return m.local, nil
	}
	sc, ok := schemes[name]
	if !ok {
		return nil, fmt.Errorf("objstore: %q: scheme %q: %w (use %s or a local path)", uri, name, ErrUnsupported, schemeList())
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, fmt.Errorf("objstore: %s: store is closed", uri)
	}
	if s := m.remote[name]; s != nil {
		return s, nil
	}
	// The client outlives this call: do not tie it to the caller's cancellation.
	s, err := sc.open(context.WithoutCancel(ctx), &m.cfg, m.stats)
	if err != nil {
		return nil, err
	}
	if m.cfg.cache != nil {
		s = m.cfg.cache.Wrap(s, m.stats)
	}
	m.remote[name] = s
	return s, nil
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

// CanList implements ListChecker by asking the store uri routes to.
func (m *Mux) CanList(uri string) bool {
	s, err := m.route(context.Background(), uri)
	return err != nil || CanList(s, uri)
}

// Create implements Creator.
func (m *Mux) Create(ctx context.Context, uri string) (io.WriteCloser, error) {
	s, err := m.route(ctx, uri)
	if err != nil {
		return nil, err
	}
	c, ok := s.(Creator)
	if !ok {
		return nil, fmt.Errorf("objstore: create %s: %w: the store cannot write", uri, ErrUnsupported)
	}
	return c.Create(ctx, uri)
}

// Close closes the local store and the remote stores it created.
func (m *Mux) Close() error {
	m.mu.Lock()
	m.closed = true
	remote := make([]Store, 0, len(m.remote))
	for _, s := range m.remote {
		remote = append(remote, s)
	}
	m.mu.Unlock()
	err := m.local.Close()
	for _, s := range remote {
		if serr := s.Close(); err == nil {
			err = serr
		}
	}
	return err
}

// localPath turns a local URI (a path, relative or absolute, or file://path)
// into an absolute, cleaned path. A trailing slash is kept when keepSlash is
// set, because "dir/" and "dir" are different prefixes.
func localPath(uri string, keepSlash bool) (string, error) {
	if err := checkPath(uri); err != nil {
		return "", err
	}
	p := strings.TrimPrefix(uri, "file://")
	if p == "" {
		return "", fmt.Errorf("objstore: empty local path: %w", ErrNotFound)
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", fmt.Errorf("objstore: %q: %w", uri, err)
	}
	if keepSlash && strings.HasSuffix(p, "/") && !strings.HasSuffix(abs, "/") {
		abs += "/"
	}
	return abs, nil
}
