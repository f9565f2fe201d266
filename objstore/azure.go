package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/service"
)

// AzureSchemes are the URI schemes of Azure Blob Storage, as fsspec/adlfs
// and Spark users write them: "az://container/path", and
// "abfs://container@account.dfs.core.windows.net/path" (or "abfss://").
var AzureSchemes = []string{"az", "abfs", "abfss"}

// AzureOption configures an [AzureStore].
type AzureOption func(*azureConfig)

type azureConfig struct {
	endpoint string // blob service URL, "" for https://ACCOUNT.blob.core.windows.net
	creds    azureCreds
	retry    retryConfig
	stats    *Stats
}

func newAzureConfig(opts []AzureOption, getenv func(string) string) (*azureConfig, error) {
	c := &azureConfig{}
	env, err := azureCredsFromEnv(getenv)
	if err != nil {
		return nil, err
	}
	c.creds = env
	for _, o := range opts {
		o(c)
	}
	if c.endpoint == "" {
		c.endpoint = c.creds.blobEndpoint
	}
	c.retry.setDefaults()
	if c.stats == nil {
		c.stats = new(Stats)
	}
	return c, nil
}

// WithAzureEndpoint sets the blob service URL of the store's account, for
// Azurite ("http://127.0.0.1:10000/devstoreaccount1") or a sovereign cloud
// ("https://ACCOUNT.blob.core.chinacloudapi.cn"). Default: the connection
// string's BlobEndpoint if it has one, otherwise
// "https://ACCOUNT.blob.core.windows.net" (or the suffix of the URI's host).
func WithAzureEndpoint(url string) AzureOption {
	return func(c *azureConfig) { c.endpoint = strings.TrimSuffix(url, "/") }
}

// WithAzureConnectionString authenticates with a storage connection string
// (AccountName, AccountKey or SharedAccessSignature, optionally BlobEndpoint).
// Default: the AZURE_STORAGE_CONNECTION_STRING environment variable.
// A malformed string makes NewAzureStore fail.
func WithAzureConnectionString(s string) AzureOption {
	return func(c *azureConfig) {
		cr, err := parseAzureConnectionString(s)
		if err != nil {
			c.creds = azureCreds{err: err}
			return
		}
		c.creds = cr
	}
}

// WithAzureSharedKey authenticates as account with its shared key. Default:
// AZURE_STORAGE_ACCOUNT_NAME and AZURE_STORAGE_ACCOUNT_KEY.
func WithAzureSharedKey(account, key string) AzureOption {
	return func(c *azureConfig) { c.creds = azureCreds{account: account, key: key} }
}

// WithAzureStallTimeout is [WithStallTimeout] for the Azure store.
func WithAzureStallTimeout(d time.Duration) AzureOption {
	return func(c *azureConfig) { c.retry.stallTimeout = d }
}

// WithAzureRetryBudget is [WithRetryBudget] for the Azure store: reads give
// up after maxAttempts requests without progress or maxDuration; List, Stat
// and Create make at most maxAttempts tries each (throttling, 5xx).
func WithAzureRetryBudget(maxAttempts int, maxDuration time.Duration) AzureOption {
	return func(c *azureConfig) { c.retry.maxAttempts, c.retry.maxDuration = maxAttempts, maxDuration }
}

// WithAzureRetryBackoff is [WithRetryBackoff] for the Azure store.
func WithAzureRetryBackoff(initial, maxWait time.Duration) AzureOption {
	return func(c *azureConfig) { c.retry.initialWait, c.retry.maxWait = initial, maxWait }
}

// WithAzureOptions passes options to the Azure store a [Mux] creates on the
// first az://, abfs:// or abfss:// URI. Default: none (credentials from the
// environment, see [NewAzureStore]).
func WithAzureOptions(opts ...AzureOption) MuxOption {
	return func(c *muxConfig) { addSchemeOptions(c, "az", opts) }
}

func withAzureStats(s *Stats) AzureOption {
	return func(c *azureConfig) { c.stats = s }
}

func init() {
	// Each spelling gets a store of its own from the Mux, with the same
	// options and the Mux's counters.
	for _, name := range AzureSchemes {
		registerScheme(scheme{name: name, open: func(ctx context.Context, c *muxConfig, stats *Stats) (Store, error) {
			return NewAzureStore(ctx, append(schemeOptions[AzureOption](c, "az"), withAzureStats(stats))...)
		}})
	}
}

// AzureStore is a [Store] and [Creator] on Azure Blob Storage, with URIs
// "az://container/name", "abfs://container/name" or
// "abfs://container@account.dfs.core.windows.net/name" (the account from the
// host; "abfss" alike). Listed objects keep the spelling of the prefix.
//
// Credentials, in order: the options; AZURE_STORAGE_CONNECTION_STRING;
// AZURE_STORAGE_ACCOUNT_NAME with AZURE_STORAGE_ACCOUNT_KEY or
// AZURE_STORAGE_SAS_TOKEN; else the default Azure credential chain
// (azidentity.DefaultAzureCredential: environment, workload identity,
// managed identity, Azure CLI) for the account named by
// AZURE_STORAGE_ACCOUNT_NAME or by the URI.
//
// Reads are ranged, pin the object's ETag (If-Match) when the Object has one
// (or, for a bare Object, the ETag of the first response), and are retried
// under the store's retry budget; a read that breaks off resumes at the first
// missing byte.
type AzureStore struct {
	cfg       *azureConfig
	transport *trackingTransport
	http      *http.Client

	mu      sync.Mutex
	clients map[string]*service.Client // by service URL
	token   azcore.TokenCredential
}

var (
	_ Store         = (*AzureStore)(nil)
	_ Creator       = (*AzureStore)(nil)
	_ StatsReporter = (*AzureStore)(nil)
)

// NewAzureStore returns a store on Azure Blob Storage (or the endpoint of
// WithAzureEndpoint). Clients are made on first use, per account.
func NewAzureStore(ctx context.Context, opts ...AzureOption) (*AzureStore, error) {
	cfg, err := newAzureConfig(opts, osGetenv)
	if err != nil {
		return nil, err
	}
	if cfg.creds.err != nil {
		return nil, cfg.creds.err
	}
	base := http.DefaultTransport.(*http.Transport).Clone()
	base.MaxIdleConns = 256
	base.MaxIdleConnsPerHost = 256
	// Byte ranges of the stored bytes: no Accept-Encoding, and a blob stored
	// with Content-Encoding gzip is not inflated on the way.
	base.DisableCompression = true
	tt := &trackingTransport{base: base}
	return &AzureStore{cfg: cfg, transport: tt, http: &http.Client{Transport: tt}, clients: make(map[string]*service.Client)}, nil
}

// Stats returns the store's counters.
func (s *AzureStore) Stats() *Stats { return s.cfg.stats }

// Close closes idle connections.
func (s *AzureStore) Close() error {
	s.transport.CloseIdleConnections()
	return nil
}

// AzureURI is a parsed Azure Blob Storage URI.
type AzureURI struct {
	// Scheme is "az", "abfs" or "abfss".
	Scheme string
	// Container is the container name.
	Container string
	// Account is the storage account named by the URI's host ("" when the
	// URI names none: the store's account).
	Account string
	// Host is the URI's host after '@', lowercased ("" when none).
	Host string
	// Name is the blob name ("" for the container itself).
	Name string

	authority string // as written: "container" or "container@host"
}

// String returns the URI with the spelling it was parsed from.
func (u AzureURI) String() string { return u.Scheme + "://" + u.authority + "/" + u.Name }

// ParseAzureURI parses "az://container/name",
// "abfs://container@account.dfs.core.windows.net/name" and the other
// spellings of AzureSchemes; name may be empty.
func ParseAzureURI(uri string) (AzureURI, error) {
	if err := checkPath(uri); err != nil {
		return AzureURI{}, err
	}
	sch, rest, ok := strings.Cut(uri, "://")
	if !ok || !isAzureScheme(sch) {
		return AzureURI{}, fmt.Errorf("objstore: %q is not an az://, abfs:// or abfss:// URI", uri)
	}
	auth, name, _ := strings.Cut(rest, "/")
	u := AzureURI{Scheme: sch, Name: name, authority: auth}
	u.Container, u.Host, _ = strings.Cut(auth, "@")
	u.Host = strings.ToLower(u.Host)
	if u.Host != "" {
		u.Account, _, _ = strings.Cut(u.Host, ".")
		if u.Account == "" {
			return AzureURI{}, fmt.Errorf("objstore: %q: no storage account before the host's first dot (want container@ACCOUNT.dfs.core.windows.net)", uri)
		}
	}
	if u.Container == "" {
		return AzureURI{}, fmt.Errorf("objstore: %q has no container name", uri)
	}
	return u, nil
}

func isAzureScheme(s string) bool {
	for _, a := range AzureSchemes {
		if s == a {
			return true
		}
	}
	return false
}

// noRetry is ctx with the SDK's own retries off: the readTracker retries.
func noRetry(ctx context.Context) context.Context {
	return policy.WithRetryOptions(ctx, policy.RetryOptions{MaxRetries: -1})
}

// List implements Store with a flat prefix listing. Directory markers of
// accounts with a hierarchical namespace (metadata hdi_isfolder=true) are
// left out: they are not files.
func (s *AzureStore) List(ctx context.Context, prefix string) ([]Object, error) {
	u, err := ParseAzureURI(prefix)
	if err != nil {
		return nil, err
	}
	cc, err := s.containerClient(ctx, u)
	if err != nil {
		return nil, fmt.Errorf("objstore: list %s: %w", prefix, err)
	}
	pager := cc.NewListBlobsFlatPager(&container.ListBlobsFlatOptions{
		Prefix:  &u.Name,
		Include: container.ListBlobsInclude{Metadata: true},
	})
	var out []Object
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("objstore: list %s: %w", prefix, context.Cause(ctx))
			}
			return nil, azureErr("list", prefix, err)
		}
		for _, it := range page.Segment.BlobItems {
			if it.Name == nil || it.Properties == nil || isFolderMarker(it.Metadata) {
				continue
			}
			v := u
			v.Name = *it.Name
			out = append(out, Object{URI: v.String(), Size: deref(it.Properties.ContentLength),
				ModTime: deref(it.Properties.LastModified), ETag: string(deref(it.Properties.ETag))})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].URI < out[j].URI })
	return out, nil
}

func isFolderMarker(md map[string]*string) bool {
	for k, v := range md {
		if strings.EqualFold(k, "hdi_isfolder") && v != nil && strings.EqualFold(*v, "true") {
			return true
		}
	}
	return false
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// Stat implements Store. A directory marker (see List) is not found.
func (s *AzureStore) Stat(ctx context.Context, uri string) (Object, error) {
	u, err := ParseAzureURI(uri)
	if err != nil {
		return Object{}, err
	}
	if u.Name == "" {
		return Object{}, fmt.Errorf("objstore: stat %s: a container is not an object: %w", uri, ErrNotFound)
	}
	cc, err := s.containerClient(ctx, u)
	if err != nil {
		return Object{}, fmt.Errorf("objstore: stat %s: %w", uri, err)
	}
	p, err := cc.NewBlobClient(u.Name).GetProperties(ctx, nil)
	if err != nil {
		return Object{}, azureErr("stat", uri, err)
	}
	if isFolderMarker(p.Metadata) {
		return Object{}, fmt.Errorf("objstore: stat %s: a directory (hdi_isfolder), not a file: %w", uri, ErrNotFound)
	}
	return Object{URI: uri, Size: deref(p.ContentLength), ModTime: deref(p.LastModified), ETag: string(deref(p.ETag))}, nil
}

// ReadAt implements Store.
func (s *AzureStore) ReadAt(ctx context.Context, obj Object, p []byte, off int64) error {
	u, err := ParseAzureURI(obj.URI)
	if err != nil {
		return err
	}
	end := off + int64(len(p))
	what := fmt.Sprintf("read %s [%d, %d)", obj.URI, off, end)
	if obj.ETag != "" {
		what = fmt.Sprintf("read %s (ETag %s) [%d, %d)", obj.URI, obj.ETag, off, end)
	}
	switch {
	case u.Name == "":
		return fmt.Errorf("objstore: %s: a container is not an object: %w", what, ErrNotFound)
	case off < 0:
		return fmt.Errorf("objstore: %s: negative offset", what)
	case len(p) == 0:
		return nil
	case obj.ETag != "" && end > obj.Size:
		// A pinned version cannot grow: no request needed.
		return fmt.Errorf("objstore: %s: past the end, the object has %d bytes: %w", what, obj.Size, io.ErrUnexpectedEOF)
	}
	cc, err := s.containerClient(ctx, u)
	if err != nil {
		return fmt.Errorf("objstore: %s: %w", what, err)
	}
	bc := cc.NewBlobClient(u.Name)
	etag, pinned := obj.ETag, obj.ETag != ""
	t := newReadTracker(&s.cfg.retry, s.cfg.stats)
	defer t.stop()
	return t.read(ctx, what, p, off,
		func(ctx context.Context, p []byte, off int64) (int, error) {
			n, seen, err := azureReadOnce(noRetry(ctx), bc, etag, p, off)
			if etag == "" && seen != "" {
				etag = seen // a resumed read must not mix versions
			}
			return n, err
		},
		func(err error) error {
			var pe errPastEnd
			var re *azcore.ResponseError
			switch {
			case errors.As(err, &pe):
				return fmt.Errorf("objstore: %s: past the end, the object has %d bytes: %w", what, pe.size, io.ErrUnexpectedEOF)
			case errors.As(err, &re) && re.StatusCode == http.StatusRequestedRangeNotSatisfiable:
				return fmt.Errorf("objstore: %s: past the end of the object: %w", what, io.ErrUnexpectedEOF)
			case errors.As(err, &re) && re.StatusCode == http.StatusPreconditionFailed:
				return s.versionGone(ctx, what, obj.URI, bc, etag, pinned)
			case azurePermanent(err):
				return azureErr("read", obj.URI, err)
			}
			return nil
		})
}

// versionGone explains a 412 on a pinned ETag: the object was replaced.
func (s *AzureStore) versionGone(ctx context.Context, what, uri string, bc *blob.Client, etag string, listed bool) error {
	when := "after it was listed"
	if !listed {
		when = "while it was read"
	}
	now := "now deleted"
	if p, err := bc.GetProperties(ctx, nil); err == nil {
		now = "now ETag " + string(deref(p.ETag))
	}
	return fmt.Errorf("objstore: %s: the object was replaced %s (ETag %s, %s); list the dataset again: %w",
		what, when, etag, now, ErrNotFound)
}

// azureReadOnce makes one ranged download of len(p) bytes at off, pinned to
// etag when it is set, and returns how many bytes it placed in p and the
// ETag of the response.
func azureReadOnce(ctx context.Context, bc *blob.Client, etag string, p []byte, off int64) (int, string, error) {
	opts := &blob.DownloadStreamOptions{Range: blob.HTTPRange{Offset: off, Count: int64(len(p))}}
	if etag != "" {
		e := azcore.ETag(etag)
		opts.AccessConditions = &blob.AccessConditions{ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfMatch: &e}}
	}
	resp, err := bc.DownloadStream(ctx, opts)
	if err != nil {
		return 0, "", err
	}
	if resp.Body == nil {
		return 0, "", errors.New("response without a body")
	}
	defer resp.Body.Close()
	seen := string(deref(resp.ETag))
	n, err := io.ReadFull(resp.Body, p)
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		// A clean end of body before the range was filled.
		if size, ok := contentRangeSize(deref(resp.ContentRange)); ok && off+int64(len(p)) > size {
			return n, seen, errPastEnd{size: size}
		}
		return n, seen, fmt.Errorf("body ended after %d of %d bytes: %w", n, len(p), err)
	}
	return n, seen, err
}

// contentRangeSize returns the complete length of "bytes a-b/size".
func contentRangeSize(cr string) (int64, bool) {
	_, total, ok := strings.Cut(cr, "/")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(total, 10, 64)
	return n, err == nil
}

// azureCode returns the HTTP status and the storage error code of err ("",
// 0 when it carries no response).
func azureCode(err error) (int, string) {
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		return re.StatusCode, re.ErrorCode
	}
	return 0, ""
}

// azurePermanent reports whether retrying err cannot help: 4xx other than
// 408 and 429, and credentials that cannot be had.
func azurePermanent(err error) bool {
	var af *azidentity.AuthenticationFailedError
	if errors.As(err, &af) {
		return true
	}
	code, _ := azureCode(err)
	return code/100 == 4 && code != http.StatusRequestTimeout && code != http.StatusTooManyRequests
}

// azureErr maps an SDK error for op on uri to the package's sentinels, in
// one line (the SDK's own message spans many).
func azureErr(op, uri string, err error) error {
	code, ecode := azureCode(err)
	var af *azidentity.AuthenticationFailedError
	switch {
	case code == http.StatusNotFound && ecode == "ContainerNotFound":
		return fmt.Errorf("objstore: %s %s: container does not exist: %w", op, uri, ErrNotFound)
	case code == http.StatusNotFound:
		return fmt.Errorf("objstore: %s %s: %w", op, uri, ErrNotFound)
	case code == http.StatusForbidden || code == http.StatusUnauthorized:
		return fmt.Errorf("objstore: %s %s: %w (HTTP %d %s; check the account key, SAS token or role assignment): %w",
			op, uri, ErrPermission, code, ecode, fs.ErrPermission)
	case errors.As(err, &af):
		return fmt.Errorf("objstore: %s %s: %w: Azure credentials: %v: %w", op, uri, ErrPermission, af, fs.ErrPermission)
	case code != 0:
		return fmt.Errorf("objstore: %s %s: HTTP %d %s", op, uri, code, ecode)
	}
	return fmt.Errorf("objstore: %s %s: %w", op, uri, err)
}

// Create implements Creator with a streamed block blob upload; Close commits
// the block list.
func (s *AzureStore) Create(ctx context.Context, uri string) (io.WriteCloser, error) {
	u, err := ParseAzureURI(uri)
	if err != nil {
		return nil, err
	}
	if u.Name == "" {
		return nil, fmt.Errorf("objstore: create %s: no object name", uri)
	}
	cc, err := s.containerClient(ctx, u)
	if err != nil {
		return nil, fmt.Errorf("objstore: create %s: %w", uri, err)
	}
	bb := cc.NewBlockBlobClient(u.Name)
	pr, pw := io.Pipe()
	w := &azureWriter{pw: pw, uri: uri, done: make(chan error, 1)}
	go func() {
		_, err := bb.UploadStream(ctx, pr, &blockblob.UploadStreamOptions{BlockSize: 8 << 20, Concurrency: 4})
		pr.CloseWithError(err)
		w.done <- err
	}()
	return w, nil
}

type azureWriter struct {
	pw   *io.PipeWriter
	uri  string
	done chan error
}

func (w *azureWriter) Write(p []byte) (int, error) {
	n, err := w.pw.Write(p)
	if err != nil {
		return n, azureErr("write", w.uri, err)
	}
	return n, nil
}

func (w *azureWriter) Close() error {
	w.pw.Close()
	if err := <-w.done; err != nil {
		return azureErr("commit", w.uri, err)
	}
	return nil
}
