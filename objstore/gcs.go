package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"sort"
	"strings"
	"time"

	"cloud.google.com/go/storage"
	gax "github.com/googleapis/gax-go/v2"
	"google.golang.org/api/googleapi"
	"google.golang.org/api/iterator"
	"google.golang.org/api/option"
	htransport "google.golang.org/api/transport/http"
)

// GCSOption configures a [GCSStore].
type GCSOption func(*gcsConfig)

type gcsConfig struct {
	endpoint   string
	clientOpts []option.ClientOption
	retry      retryConfig
	stats      *StoreStats
}

func newGCSConfig(opts []GCSOption) *gcsConfig {
	c := &gcsConfig{}
	for _, o := range opts {
		o(c)
	}
	if c.endpoint == "" {
		c.endpoint = os.Getenv("STORAGE_EMULATOR_HOST")
	}
	c.retry.setDefaults()
	if c.stats == nil {
		c.stats = new(StoreStats)
	}
	return c
}

// WithGCSEndpoint points the store at an emulator (fake-gcs-server) at url,
// e.g. "http://127.0.0.1:4443", without authentication. Default: the
// STORAGE_EMULATOR_HOST environment variable ("host:port" or a URL) if set,
// otherwise real GCS with Application Default Credentials.
func WithGCSEndpoint(url string) GCSOption {
	return func(c *gcsConfig) { c.endpoint = url }
}

// WithGCSClientOptions adds options for the real GCS client, such as
// option.WithCredentialsFile. Ignored with an emulator endpoint. Default: none.
func WithGCSClientOptions(opts ...option.ClientOption) GCSOption {
	return func(c *gcsConfig) { c.clientOpts = append(c.clientOpts, opts...) }
}

// WithStallTimeout aborts and retries a read attempt when neither response
// headers nor body bytes arrived for d. Default DefaultStallTimeout; zero or
// negative means the default.
func WithStallTimeout(d time.Duration) GCSOption {
	return func(c *gcsConfig) { c.retry.stallTimeout = d }
}

// WithRetryBudget bounds retries. A ReadAt fails with ErrUnavailable after
// maxAttempts consecutive requests that received no bytes, or when a retry
// would start more than maxDuration after the ReadAt began (a transfer that
// keeps making progress is never cut off; a stalled one ends after the stall
// timeout). List, Stat and Create use the same limits through the client's
// retryer. Defaults DefaultRetryAttempts and DefaultRetryDuration; zero or
// negative values mean the defaults.
func WithRetryBudget(maxAttempts int, maxDuration time.Duration) GCSOption {
	return func(c *gcsConfig) { c.retry.maxAttempts, c.retry.maxDuration = maxAttempts, maxDuration }
}

// WithRetryBackoff sets the exponential backoff between retries: the first
// wait is about initial, doubling up to maxWait, jittered. Defaults
// DefaultRetryInitialWait and DefaultRetryMaxWait; zero or negative values
// mean the defaults.
func WithRetryBackoff(initial, maxWait time.Duration) GCSOption {
	return func(c *gcsConfig) { c.retry.initialWait, c.retry.maxWait = initial, maxWait }
}

// WithGCSOptions passes options to the GCS store a [Mux] creates on the
// first gs:// URI. Default: none (default credentials, or
// STORAGE_EMULATOR_HOST).
func WithGCSOptions(opts ...GCSOption) MuxOption {
	return func(c *muxConfig) { addSchemeOptions(c, "gs", opts) }
}

func init() {
	registerScheme(scheme{name: "gs", open: func(ctx context.Context, c *muxConfig, stats *StoreStats) (Store, error) {
		return NewGCSStore(ctx, append(schemeOptions[GCSOption](c, "gs"), withGCSStats(stats))...)
	}})
}

func withGCSStats(s *StoreStats) GCSOption {
	return func(c *gcsConfig) { c.stats = s }
}

// GCSStore is a [Store] and [Creator] on Google Cloud Storage, with URIs
// "gs://bucket/name".
//
// Reads are ranged, pin the object generation when the Object has one, and
// are retried under the store's retry budget (see [WithRetryBudget],
// [WithStallTimeout]); a read that breaks off resumes at the first missing
// byte.
type GCSStore struct {
	cfg       *gcsConfig
	client    *storage.Client
	transport *trackingTransport
}

var (
	_ Store         = (*GCSStore)(nil)
	_ Creator       = (*GCSStore)(nil)
	_ StatsReporter = (*GCSStore)(nil)
)

// NewGCSStore returns a store on GCS, or on the emulator named by
// WithGCSEndpoint or STORAGE_EMULATOR_HOST.
func NewGCSStore(ctx context.Context, opts ...GCSOption) (*GCSStore, error) {
	cfg := newGCSConfig(opts)
	base := http.DefaultTransport.(*http.Transport).Clone()
	base.MaxIdleConns = 256
	base.MaxIdleConnsPerHost = 256
	tt := &trackingTransport{base: base}

	var copts []option.ClientOption
	if cfg.endpoint != "" {
		ep := cfg.endpoint
		if !strings.Contains(ep, "://") {
			ep = "http://" + ep
		}
		ep = strings.TrimSuffix(ep, "/") + "/storage/v1/"
		copts = []option.ClientOption{
			option.WithEndpoint(ep),
			option.WithHTTPClient(&http.Client{Transport: tt}),
			// The emulator serves XML-API reads only on its PublicHost.
			storage.WithJSONReads(),
			storage.WithDisabledClientMetrics(),
		}
	} else {
		topts := append([]option.ClientOption{
			option.WithScopes(storage.ScopeFullControl, "https://www.googleapis.com/auth/cloud-platform"),
		}, cfg.clientOpts...)
		authed, err := htransport.NewTransport(ctx, tt, topts...)
		if err != nil {
			return nil, fmt.Errorf("objstore: GCS credentials: %w", err)
		}
		copts = append(append([]option.ClientOption{}, cfg.clientOpts...),
			option.WithHTTPClient(&http.Client{Transport: authed}))
	}
	client, err := storage.NewClient(ctx, copts...)
	if err != nil {
		return nil, fmt.Errorf("objstore: GCS client: %w", err)
	}
	// The default retryer has no attempt or time limit.
	client.SetRetry(
		storage.WithMaxAttempts(cfg.retry.maxAttempts),
		storage.WithMaxRetryDuration(cfg.retry.maxDuration),
		storage.WithBackoff(gax.Backoff{Initial: cfg.retry.initialWait, Max: cfg.retry.maxWait, Multiplier: 2}),
		storage.WithPolicy(storage.RetryIdempotent),
	)
	return &GCSStore{cfg: cfg, client: client, transport: tt}, nil
}

// Client returns the underlying storage client (for tests and benchmarks).
func (s *GCSStore) Client() *storage.Client { return s.client }

// Stats returns the store's counters.
func (s *GCSStore) Stats() *StoreStats { return s.cfg.stats }

// Close closes the client and idle connections.
func (s *GCSStore) Close() error {
	err := s.client.Close()
	s.transport.CloseIdleConnections()
	return err
}

// ParseGCSURI splits "gs://bucket/name" into bucket and object name; name may
// be empty ("gs://bucket" or "gs://bucket/").
func ParseGCSURI(uri string) (bucket, name string, err error) {
	rest, ok := strings.CutPrefix(uri, "gs://")
	if !ok {
		return "", "", fmt.Errorf("objstore: %q is not a gs:// URI", uri)
	}
	bucket, name, _ = strings.Cut(rest, "/")
	if bucket == "" {
		return "", "", fmt.Errorf("objstore: %q has no bucket name", uri)
	}
	return bucket, name, nil
}

// gcsErr maps a storage error for op on uri to the package's sentinels.
func gcsErr(op, uri string, err error) error {
	var ge *googleapi.Error
	switch {
	case errors.Is(err, storage.ErrObjectNotExist):
		return fmt.Errorf("objstore: %s %s: %w", op, uri, ErrNotFound)
	case errors.Is(err, storage.ErrBucketNotExist):
		return fmt.Errorf("objstore: %s %s: bucket does not exist: %w", op, uri, ErrNotFound)
	case errors.As(err, &ge) && ge.Code == http.StatusNotFound:
		return fmt.Errorf("objstore: %s %s: %w", op, uri, ErrNotFound)
	case errors.As(err, &ge) && (ge.Code == http.StatusForbidden || ge.Code == http.StatusUnauthorized):
		return fmt.Errorf("objstore: %s %s: permission denied (HTTP %d; check the credentials and their storage.objects permissions): %w",
			op, uri, ge.Code, fs.ErrPermission)
	}
	return fmt.Errorf("objstore: %s %s: %w", op, uri, err)
}

// permanent reports whether retrying err cannot help.
func permanent(err error) bool {
	if errors.Is(err, storage.ErrObjectNotExist) || errors.Is(err, storage.ErrBucketNotExist) {
		return true
	}
	var ge *googleapi.Error
	if errors.As(err, &ge) {
		return ge.Code/100 == 4 && ge.Code != http.StatusRequestTimeout && ge.Code != http.StatusTooManyRequests
	}
	return false
}

// List implements Store with a prefix query. Object names ending in "/"
// (folder placeholders) are returned like any other object.
func (s *GCSStore) List(ctx context.Context, prefix string) ([]Object, error) {
	bucket, name, err := ParseGCSURI(prefix)
	if err != nil {
		return nil, err
	}
	q := &storage.Query{Prefix: name}
	if err := q.SetAttrSelection([]string{"Name", "Size", "Generation", "Updated"}); err != nil {
		return nil, fmt.Errorf("objstore: list %s: %w", prefix, err)
	}
	it := s.client.Bucket(bucket).Objects(ctx, q)
	var out []Object
	for {
		a, err := it.Next()
		if err == iterator.Done {
			break
		}
		if err != nil {
			return nil, gcsErr("list", prefix, err)
		}
		out = append(out, Object{URI: "gs://" + bucket + "/" + a.Name, Size: a.Size, Generation: a.Generation, ModTime: a.Updated})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].URI < out[j].URI })
	return out, nil
}

// Stat implements Store.
func (s *GCSStore) Stat(ctx context.Context, uri string) (Object, error) {
	bucket, name, err := ParseGCSURI(uri)
	if err != nil {
		return Object{}, err
	}
	if name == "" {
		return Object{}, fmt.Errorf("objstore: stat %s: a bucket is not an object: %w", uri, ErrNotFound)
	}
	a, err := s.client.Bucket(bucket).Object(name).Attrs(ctx)
	if err != nil {
		return Object{}, gcsErr("stat", uri, err)
	}
	return Object{URI: uri, Size: a.Size, Generation: a.Generation, ModTime: a.Updated}, nil
}

// errPastEnd is returned by readOnce when the object ended before the range.
type errPastEnd struct{ size int64 }

func (e errPastEnd) Error() string { return fmt.Sprintf("object has %d bytes", e.size) }

// ReadAt implements Store.
func (s *GCSStore) ReadAt(ctx context.Context, obj Object, p []byte, off int64) error {
	bucket, name, err := ParseGCSURI(obj.URI)
	if err != nil {
		return err
	}
	end := off + int64(len(p))
	what := fmt.Sprintf("read %s [%d, %d)", obj.URI, off, end)
	if obj.Generation != 0 {
		what = fmt.Sprintf("read %s#%d [%d, %d)", obj.URI, obj.Generation, off, end)
	}
	switch {
	case name == "":
		return fmt.Errorf("objstore: %s: a bucket is not an object: %w", what, ErrNotFound)
	case off < 0:
		return fmt.Errorf("objstore: %s: negative offset", what)
	case len(p) == 0:
		return nil
	case obj.Generation != 0 && end > obj.Size:
		// A pinned generation cannot grow: no request needed.
		return fmt.Errorf("objstore: %s: past the end, the object has %d bytes: %w", what, obj.Size, io.ErrUnexpectedEOF)
	}

	h := s.client.Bucket(bucket).Object(name).Retryer(storage.WithPolicy(storage.RetryNever))
	if obj.Generation != 0 {
		h = h.Generation(obj.Generation)
	}
	t := newReadTracker(&s.cfg.retry, s.cfg.stats)
	defer t.stop()
	return t.read(ctx, what, p, off,
		func(ctx context.Context, p []byte, off int64) (int, error) { return readOnce(ctx, h, p, off) },
		func(err error) error {
			var pe errPastEnd
			var ge *googleapi.Error
			switch {
			case errors.As(err, &pe):
				return fmt.Errorf("objstore: %s: past the end, the object has %d bytes: %w", what, pe.size, io.ErrUnexpectedEOF)
			case errors.As(err, &ge) && ge.Code == http.StatusRequestedRangeNotSatisfiable:
				return fmt.Errorf("objstore: %s: past the end of the object: %w", what, io.ErrUnexpectedEOF)
			case permanent(err):
				if obj.Generation != 0 && gcsNotFound(err) {
					return s.generationGone(ctx, what, obj, h)
				}
				return gcsErr("read", obj.URI, err)
			}
			return nil
		})
}

func gcsNotFound(err error) bool {
	var ge *googleapi.Error
	return errors.Is(err, storage.ErrObjectNotExist) || (errors.As(err, &ge) && ge.Code == http.StatusNotFound)
}

// generationGone explains a 404 on a pinned generation: overwritten or deleted.
func (s *GCSStore) generationGone(ctx context.Context, what string, obj Object, h *storage.ObjectHandle) error {
	a, err := s.client.Bucket(h.BucketName()).Object(h.ObjectName()).Attrs(ctx)
	if err == nil && a.Generation != obj.Generation {
		return fmt.Errorf("objstore: %s: generation %d no longer exists, the object was overwritten after it was listed (now generation %d): %w",
			what, obj.Generation, a.Generation, ErrNotFound)
	}
	return fmt.Errorf("objstore: %s: %w", what, ErrNotFound)
}

// readOnce makes one ranged read of len(p) bytes at off, returning how many
// bytes it placed in p.
func readOnce(ctx context.Context, h *storage.ObjectHandle, p []byte, off int64) (int, error) {
	r, err := h.NewRangeReader(ctx, off, int64(len(p)))
	if err != nil {
		return 0, err
	}
	defer r.Close()
	n, err := io.ReadFull(r, p)
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		// A clean end of body before the range was filled.
		if size := r.Attrs.Size; off+int64(len(p)) > size {
			return n, errPastEnd{size: size}
		}
		return n, fmt.Errorf("body ended after %d of %d bytes: %w", n, len(p), err)
	}
	return n, err
}

// Create implements Creator with an object writer; Close commits the object.
func (s *GCSStore) Create(ctx context.Context, uri string) (io.WriteCloser, error) {
	bucket, name, err := ParseGCSURI(uri)
	if err != nil {
		return nil, err
	}
	if name == "" {
		return nil, fmt.Errorf("objstore: create %s: no object name", uri)
	}
	w := s.client.Bucket(bucket).Object(name).NewWriter(ctx)
	return &gcsWriter{w: w, uri: uri}, nil
}

type gcsWriter struct {
	w   *storage.Writer
	uri string
}

func (w *gcsWriter) Write(p []byte) (int, error) {
	n, err := w.w.Write(p)
	if err != nil {
		return n, gcsErr("write", w.uri, err)
	}
	return n, nil
}

func (w *gcsWriter) Close() error {
	if err := w.w.Close(); err != nil {
		return gcsErr("commit", w.uri, err)
	}
	return nil
}
