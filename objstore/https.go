package objstore

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// HTTPSOption configures an [HTTPSStore].
type HTTPSOption func(*httpsConfig)

type httpsConfig struct {
	policy  RetryPolicy
	retry   retryConfig
	header  http.Header
	rootCAs *x509.CertPool
	stats   *Stats
}

// WithHTTPSRetry sets the retry budget, backoff and stall timeout of reads
// and Stat. Default: RetryPolicy{} (the package defaults).
func WithHTTPSRetry(p RetryPolicy) HTTPSOption { return func(c *httpsConfig) { c.policy = p } }

// WithHTTPSHeader adds a header to every request, for instance
// "Authorization: Bearer TOKEN" for a private Hugging Face repository. Go's
// client drops Authorization on a redirect to another host. Default: none.
func WithHTTPSHeader(key, value string) HTTPSOption {
	return func(c *httpsConfig) {
		if c.header == nil {
			c.header = make(http.Header)
		}
		c.header.Add(key, value)
	}
}

// WithHTTPSRootCAs trusts these certificate authorities instead of the
// system's (a test server's certificate, a private CA). Default: the
// system's roots.
func WithHTTPSRootCAs(pool *x509.CertPool) HTTPSOption {
	return func(c *httpsConfig) { c.rootCAs = pool }
}

// WithHTTPSOptions passes options to the HTTPS store a [Mux] creates on the
// first https:// (or http://) URI. Default: none.
func WithHTTPSOptions(opts ...HTTPSOption) MuxOption {
	return func(c *muxConfig) { addSchemeOptions(c, "https", opts) }
}

func withHTTPSStats(s *Stats) HTTPSOption { return func(c *httpsConfig) { c.stats = s } }

func init() {
	for _, name := range []string{"https", "http"} {
		registerScheme(scheme{name: name, open: func(ctx context.Context, c *muxConfig, stats *Stats) (Store, error) {
			return NewHTTPSStore(append(schemeOptions[HTTPSOption](c, "https"), withHTTPSStats(stats))...), nil
		}})
	}
}

// HTTPSStore is a [Store] on web servers that honour Range requests, with
// URIs "https://host/path" (and "http://" to loopback hosts only: anything
// else is refused, wrapping ErrUnsupported).
//
// HTTP has no listing: List fails with ErrUnsupported, [CanList] reports
// false, and [Match] accepts only exact URLs (a glob, or a URL ending in
// "/", is an error saying to name each file).
//
// An object's size comes from HEAD (Content-Length) or, when HEAD does not
// tell, from the Content-Range of a "Range: bytes=0-0" probe. Its version is
// its ETag, else its Last-Modified time; a server that sends neither is
// refused (ErrUnsupported), since a change between reads could not be told.
// Reads send If-Match (a strong ETag) or If-Unmodified-Since and check the
// validators of every response: an object changed mid-epoch is an error
// wrapping ErrNotFound that names it. A server that answers a partial read
// with the whole object (200, Range ignored) is an error naming the URL.
// Retries, the stall timeout and resumption are those of the other HTTP
// stores (see RetryPolicy).
type HTTPSStore struct {
	cfg       *httpsConfig
	client    *http.Client
	transport *trackingTransport
}

var (
	_ Store         = (*HTTPSStore)(nil)
	_ StatsReporter = (*HTTPSStore)(nil)
)

// NewHTTPSStore returns an HTTPS store.
func NewHTTPSStore(opts ...HTTPSOption) *HTTPSStore {
	c := &httpsConfig{}
	for _, o := range opts {
		o(c)
	}
	c.retry = c.policy.config()
	if c.stats == nil {
		c.stats = new(Stats)
	}
	base := http.DefaultTransport.(*http.Transport).Clone()
	base.MaxIdleConns, base.MaxIdleConnsPerHost = 256, 256
	// Validators and byte offsets are those of the identity encoding.
	base.DisableCompression = true
	if c.rootCAs != nil {
		base.TLSClientConfig = &tls.Config{RootCAs: c.rootCAs, MinVersion: tls.VersionTLS12}
	}
	tt := &trackingTransport{base: base}
	client := &http.Client{Transport: tt, CheckRedirect: func(req *http.Request, via []*http.Request) error {
		if len(via) >= 10 {
			return fmt.Errorf("stopped after 10 redirects")
		}
		_, err := checkHTTPURL(req.URL.String())
		return err
	}}
	return &HTTPSStore{cfg: c, client: client, transport: tt}
}

// Stats returns the store's counters.
func (s *HTTPSStore) Stats() *Stats { return s.cfg.stats }

// Close closes idle connections.
func (s *HTTPSStore) Close() error {
	s.transport.CloseIdleConnections()
	return nil
}

// CanList reports false: HTTP servers have no listing.
func (s *HTTPSStore) CanList(string) bool { return false }

// checkHTTPURL parses an https:// URL, or an http:// one to a loopback host.
func checkHTTPURL(uri string) (*url.URL, error) {
	if err := checkPath(uri); err != nil {
		return nil, err
	}
	u, err := url.Parse(uri)
	switch {
	case err != nil:
		return nil, fmt.Errorf("objstore: %q: %w: %v", uri, ErrInvalidPath, err)
	case u.Scheme != "https" && u.Scheme != "http":
		return nil, fmt.Errorf("objstore: %q is not an https:// URL", uri)
	case u.Host == "" || u.Hostname() == "":
		return nil, fmt.Errorf("objstore: %q has no host: %w", uri, ErrInvalidPath)
	case u.User != nil:
		return nil, fmt.Errorf("objstore: %q: %w: credentials in the URL are not supported (use objstore.WithHTTPSHeader)", uri, ErrUnsupported)
	case u.Fragment != "":
		return nil, fmt.Errorf("objstore: %q: %w: a URL with a fragment (#) names no object", uri, ErrInvalidPath)
	case u.Scheme == "http" && !isLoopbackHost(u.Hostname()):
		return nil, fmt.Errorf("objstore: %q: %w: plain http:// is served only from loopback hosts (127.0.0.1, ::1, localhost); use https://", uri, ErrUnsupported)
	}
	return u, nil
}

// List implements Store: HTTP has no listing, so it is an error wrapping
// ErrUnsupported.
func (s *HTTPSStore) List(ctx context.Context, prefix string) ([]Object, error) {
	if _, err := checkHTTPURL(prefix); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("objstore: list %s: %w: HTTP servers have no listing, so http(s):// takes no directory or glob; name each file (https://host/path/part-0.parquet)", prefix, ErrUnsupported)
}

// request makes a request for uri with the store's headers.
func (s *HTTPSStore) request(ctx context.Context, method, uri string) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, uri, nil)
	if err != nil {
		return nil, err
	}
	for k, v := range s.cfg.header {
		req.Header[k] = v
	}
	return req, nil
}

// drain reads and closes a response body that is not wanted, so that the
// connection can be reused.
func drain(resp *http.Response) {
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
}

// httpStatusErr is a response status an attempt failed with.
type httpStatusErr struct{ status int }

func (e httpStatusErr) Error() string {
	return fmt.Sprintf("HTTP %d %s", e.status, http.StatusText(e.status))
}

// httpErr maps a failed HTTP call for op on uri to the package's sentinels.
func httpErr(op, uri string, err error) error {
	var se httpStatusErr
	if errors.As(err, &se) {
		switch se.status {
		case http.StatusNotFound, http.StatusGone:
			return fmt.Errorf("objstore: %s %s: %w (%v)", op, uri, ErrNotFound, err)
		case http.StatusUnauthorized, http.StatusForbidden:
			return fmt.Errorf("objstore: %s %s: %w (%v; check the token the server wants, objstore.WithHTTPSHeader): %w",
				op, uri, ErrPermission, err, fs.ErrPermission)
		}
	}
	return fmt.Errorf("objstore: %s %s: %w", op, uri, err)
}

// httpPermanent reports whether retrying err cannot help: any 4xx but 408
// and 429, and a URL refused before sending.
func httpPermanent(err error) bool {
	var se httpStatusErr
	if errors.As(err, &se) {
		return se.status/100 == 4 && se.status != http.StatusRequestTimeout && se.status != http.StatusTooManyRequests
	}
	return errors.Is(err, ErrUnsupported) || errors.Is(err, ErrInvalidPath)
}

// Stat implements Store with HEAD, or a one-byte ranged GET when HEAD does
// not give the size, retried under the store's budget.
func (s *HTTPSStore) Stat(ctx context.Context, uri string) (Object, error) {
	if _, err := checkHTTPURL(uri); err != nil {
		return Object{}, err
	}
	var obj Object
	var probe bool
	err := metaCall(ctx, &s.cfg.retry, "stat "+uri, func(ctx context.Context) (err error) {
		obj, probe, err = s.statOnce(ctx, uri, probe)
		return err
	}, func(err error) error {
		if httpPermanent(err) {
			return httpErr("stat", uri, err)
		}
		return nil
	})
	if err != nil {
		return Object{}, err
	}
	if obj.ETag == "" && obj.ModTime.IsZero() {
		return Object{}, fmt.Errorf("objstore: stat %s: %w: the server sends neither ETag nor Last-Modified, so a change between reads could not be detected; serve it from a server that does (any static file server, object store or CDN)",
			uri, ErrUnsupported)
	}
	return obj, nil
}

// statOnce asks for uri's size and validators: by HEAD, or by a ranged GET
// of byte 0 when probe is set or HEAD does not tell (it then returns probe
// set, for the next attempt).
func (s *HTTPSStore) statOnce(ctx context.Context, uri string, probe bool) (Object, bool, error) {
	method := http.MethodHead
	if probe {
		method = http.MethodGet
	}
	req, err := s.request(ctx, method, uri)
	if err != nil {
		return Object{}, probe, err
	}
	if probe {
		req.Header.Set("Range", "bytes=0-0")
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return Object{}, probe, err
	}
	defer drain(resp)
	obj := Object{URI: uri, Size: -1, ETag: resp.Header.Get("ETag")}
	if lm, err := http.ParseTime(resp.Header.Get("Last-Modified")); err == nil {
		obj.ModTime = lm
	}
	switch {
	case !probe && (resp.StatusCode == http.StatusMethodNotAllowed || resp.StatusCode == http.StatusNotImplemented ||
		resp.StatusCode == http.StatusForbidden):
		// No HEAD here; or a redirect to a URL signed for GET only (an S3
		// presigned URL), which refuses HEAD with 403: ask with a GET.
		return s.statOnce(ctx, uri, true)
	case resp.StatusCode == http.StatusPartialContent:
		if _, _, total, ok := contentRange(resp.Header.Get("Content-Range")); ok && total >= 0 {
			obj.Size = total
		}
	case resp.StatusCode == http.StatusRequestedRangeNotSatisfiable && probe:
		obj.Size = 0 // an empty object has no byte 0
		if _, err := fmt.Sscanf(resp.Header.Get("Content-Range"), "bytes */%d", &obj.Size); err != nil {
			obj.Size = -1
		}
	case resp.StatusCode == http.StatusOK:
		obj.Size = resp.ContentLength
	default:
		return Object{}, probe, httpStatusErr{resp.StatusCode}
	}
	if obj.Size < 0 {
		if !probe {
			return s.statOnce(ctx, uri, true)
		}
		return Object{}, probe, fmt.Errorf("the server reports no size (neither Content-Length on HEAD nor Content-Range on a ranged GET): %w", ErrUnsupported)
	}
	return obj, probe, nil
}

// httpVersion is what a read is pinned to: the ETag, else Last-Modified.
type httpVersion struct {
	etag    string
	lastMod time.Time
}

func (v httpVersion) String() string {
	if v.etag != "" {
		return "ETag " + v.etag
	}
	return "Last-Modified " + v.lastMod.UTC().Format(http.TimeFormat)
}

func (v httpVersion) pinned() bool { return v.etag != "" || !v.lastMod.IsZero() }

// check returns errChanged when a response's validators are those of another
// version than v (validators the response lacks are not held against it).
func (v httpVersion) check(resp *http.Response) (httpVersion, error) {
	got := httpVersion{etag: resp.Header.Get("ETag")}
	if lm, err := http.ParseTime(resp.Header.Get("Last-Modified")); err == nil {
		got.lastMod = lm
	}
	switch {
	case !v.pinned():
		return got, nil
	case v.etag != "" && got.etag != "" && got.etag != v.etag,
		v.etag == "" && !got.lastMod.IsZero() && !got.lastMod.Equal(v.lastMod):
		return v, errChanged{was: v.String(), now: got.String()}
	}
	return v, nil
}

// ReadAt implements Store with ranged GETs pinned to obj's version. An Object
// with neither ETag nor ModTime is pinned to the version its first response
// came from.
func (s *HTTPSStore) ReadAt(ctx context.Context, obj Object, p []byte, off int64) error {
	if _, err := checkHTTPURL(obj.URI); err != nil {
		return err
	}
	end := off + int64(len(p))
	ver := httpVersion{etag: obj.ETag, lastMod: obj.ModTime}
	what := fmt.Sprintf("read %s [%d, %d)", obj.URI, off, end)
	if ver.pinned() {
		what = fmt.Sprintf("read %s (%v) [%d, %d)", obj.URI, ver, off, end)
	}
	switch {
	case off < 0:
		return fmt.Errorf("objstore: %s: negative offset", what)
	case len(p) == 0:
		return nil
	case ver.pinned() && end > obj.Size:
		return fmt.Errorf("objstore: %s: past the end, the object has %d bytes: %w", what, obj.Size, io.ErrUnexpectedEOF)
	}
	once := func(ctx context.Context, p []byte, off int64) (int, error) {
		var n int
		var err error
		ver, n, err = s.readOnce(ctx, obj.URI, ver, p, off)
		return n, err
	}
	t := newReadTracker(&s.cfg.retry, s.cfg.stats)
	defer t.stop()
	return t.read(ctx, what, p, off, once, func(err error) error {
		var pe errPastEnd
		var ce errChanged
		var se httpStatusErr
		isStatus := errors.As(err, &se)
		switch {
		case errors.As(err, &pe):
			return fmt.Errorf("objstore: %s: past the end, the object has %d bytes: %w", what, pe.size, io.ErrUnexpectedEOF)
		case isStatus && se.status == http.StatusRequestedRangeNotSatisfiable:
			return fmt.Errorf("objstore: %s: past the end of the object: %w", what, io.ErrUnexpectedEOF)
		case errors.As(err, &ce):
			return changedErr(what, ce)
		case isStatus && se.status == http.StatusPreconditionFailed:
			return changedErr(what, errChanged{was: ver.String()})
		case errors.Is(err, errNoRange):
			return fmt.Errorf("objstore: %s: %w; meshfeed reads parts of files and needs a server that honours Range requests (206 Partial Content): %w", what, err, ErrUnsupported)
		case isStatus && (se.status == http.StatusNotFound || se.status == http.StatusGone) && ver.pinned():
			return fmt.Errorf("objstore: %s: %w: the object was deleted after it was listed", what, ErrNotFound)
		case httpPermanent(err):
			return httpErr("read", obj.URI, err)
		}
		return nil
	})
}

// readOnce makes one ranged GET of len(p) bytes at off pinned to ver, and
// returns the version the response is of (ver, or the first one seen) and
// the bytes it placed in p.
func (s *HTTPSStore) readOnce(ctx context.Context, uri string, ver httpVersion, p []byte, off int64) (httpVersion, int, error) {
	req, err := s.request(ctx, http.MethodGet, uri)
	if err != nil {
		return ver, 0, err
	}
	req.Header.Set("Range", "bytes="+strconv.FormatInt(off, 10)+"-"+strconv.FormatInt(off+int64(len(p))-1, 10))
	if ver.etag != "" && !strings.HasPrefix(ver.etag, "W/") {
		req.Header.Set("If-Match", ver.etag) // weak ETags never match If-Match
	}
	if !ver.lastMod.IsZero() {
		req.Header.Set("If-Unmodified-Since", ver.lastMod.UTC().Format(http.TimeFormat))
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return ver, 0, err
	}
	defer drain(resp)
	if resp.StatusCode != http.StatusPartialContent && resp.StatusCode != http.StatusOK {
		return ver, 0, httpStatusErr{resp.StatusCode}
	}
	if ver, err = ver.check(resp); err != nil {
		return ver, 0, err
	}
	if enc := resp.Header.Get("Content-Encoding"); enc != "" && enc != "identity" {
		return ver, 0, fmt.Errorf("%w: it sent a %q-encoded body although none was asked for, and byte ranges are of the file itself", errNoRange, enc)
	}
	if resp.StatusCode == http.StatusOK {
		// The whole object: acceptable only when that is what was asked for.
		if off != 0 || resp.ContentLength != int64(len(p)) {
			return ver, 0, fmt.Errorf("%w: it ignored the Range header and sent the whole file (HTTP 200, %d bytes) for %d bytes at byte %d", errNoRange, resp.ContentLength, len(p), off)
		}
		n, err := rangedBody(resp.Body, p, off, 0, resp.ContentLength)
		return ver, n, err
	}
	first, _, total, ok := contentRange(resp.Header.Get("Content-Range"))
	if !ok {
		return ver, 0, fmt.Errorf("%w (HTTP 206 without a valid Content-Range: %q)", errNoRange, resp.Header.Get("Content-Range"))
	}
	n, err := rangedBody(resp.Body, p, off, first, total)
	return ver, n, err
}
