package objstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// S3Option configures an [S3Store].
type S3Option func(*s3Config)

// PathStyle says how an [S3Store] addresses buckets.
type PathStyle int

const (
	// PathStyleAuto addresses buckets by path ("http://host/bucket/key")
	// when the store has a custom endpoint (WithS3Endpoint,
	// AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL: MinIO, Ceph, R2, an emulator),
	// and by virtual host ("https://bucket.s3.region.amazonaws.com/key") on
	// AWS itself.
	PathStyleAuto PathStyle = iota
	// PathStyleOn always addresses buckets by path.
	PathStyleOn
	// PathStyleOff always addresses buckets by virtual host.
	PathStyleOff
)

// ParsePathStyle parses "auto", "path" or "virtual" (the serve flag's
// spellings).
func ParsePathStyle(s string) (PathStyle, error) {
	switch s {
	case "auto", "":
		return PathStyleAuto, nil
	case "path":
		return PathStyleOn, nil
	case "virtual":
		return PathStyleOff, nil
	}
	return 0, fmt.Errorf("objstore: S3 addressing %q: want auto, path or virtual", s)
}

type s3Config struct {
	endpoint  string
	pathStyle PathStyle
	region    string
	creds     aws.CredentialsProvider
	retry     retryConfig
	policy    RetryPolicy
	stats     *Stats
}

// WithS3Endpoint points the store at an S3-compatible endpoint (MinIO, R2,
// CoreWeave, an emulator), e.g. "http://127.0.0.1:9000". Default: the
// AWS_ENDPOINT_URL_S3 environment variable, else AWS_ENDPOINT_URL, else AWS
// itself.
func WithS3Endpoint(url string) S3Option { return func(c *s3Config) { c.endpoint = url } }

// WithS3PathStyle sets how buckets are addressed. Default PathStyleAuto.
func WithS3PathStyle(p PathStyle) S3Option { return func(c *s3Config) { c.pathStyle = p } }

// WithS3Region sets the region. Default: the standard chain (AWS_REGION,
// the shared config file's profile), else "us-east-1".
func WithS3Region(region string) S3Option { return func(c *s3Config) { c.region = region } }

// WithS3Credentials sets the credentials (for instance
// credentials.NewStaticCredentialsProvider, or aws.AnonymousCredentials{}
// for public buckets). Default: the standard chain (environment, shared
// files, SSO, web identity, container and instance roles).
func WithS3Credentials(p aws.CredentialsProvider) S3Option {
	return func(c *s3Config) { c.creds = p }
}

// WithS3Retry sets the retry budget, backoff and stall timeout of reads,
// List and Stat; Create uses the same attempt limit and backoff through the
// SDK's retryer. Default: RetryPolicy{} (the package defaults).
func WithS3Retry(p RetryPolicy) S3Option { return func(c *s3Config) { c.policy = p } }

// WithS3Options passes options to the S3 store a [Mux] creates on the first
// s3:// URI. Default: none (the standard chain and environment).
func WithS3Options(opts ...S3Option) MuxOption {
	return func(c *muxConfig) { addSchemeOptions(c, "s3", opts) }
}

func withS3Stats(s *Stats) S3Option { return func(c *s3Config) { c.stats = s } }

func init() {
	registerScheme(scheme{name: "s3", open: func(ctx context.Context, c *muxConfig, stats *Stats) (Store, error) {
		return NewS3Store(ctx, append(schemeOptions[S3Option](c, "s3"), withS3Stats(stats))...)
	}})
}

// S3Store is a [Store] and [Creator] on Amazon S3 or an S3-compatible
// service, with URIs "s3://bucket/key".
//
// An object's version is its ETag: reads send If-Match with the ETag the
// listing or Stat reported and check the ETag of every response, so an
// object replaced mid-epoch is an error (wrapping ErrNotFound) rather than
// a mix of versions. Reads are ranged GETs retried under the store's
// RetryPolicy; a read that breaks off resumes at the first missing byte.
type S3Store struct {
	cfg       *s3Config
	client    *s3.Client // Create: the SDK's retryer
	reader    *s3.Client // List, Stat, ReadAt: no SDK retries, the readTracker's instead
	transport *trackingTransport
}

var (
	_ Store         = (*S3Store)(nil)
	_ Creator       = (*S3Store)(nil)
	_ StatsReporter = (*S3Store)(nil)
)

// NewS3Store returns a store on S3 with credentials and region from the
// standard chain (see WithS3Credentials, WithS3Region, WithS3Endpoint).
// Credentials are resolved on the first request, not here.
func NewS3Store(ctx context.Context, opts ...S3Option) (*S3Store, error) {
	c := &s3Config{}
	for _, o := range opts {
		o(c)
	}
	if c.endpoint == "" {
		c.endpoint = cmp.Or(os.Getenv("AWS_ENDPOINT_URL_S3"), os.Getenv("AWS_ENDPOINT_URL"))
	}
	if c.endpoint != "" {
		if u, err := url.Parse(c.endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("objstore: S3 endpoint %q: want http(s)://host[:port]", c.endpoint)
		}
	}
	c.retry = c.policy.config()
	if c.stats == nil {
		c.stats = new(Stats)
	}
	// The SDK's buildable client, so that the config loader can add the
	// roots of AWS_CA_BUNDLE to its transport; requests then go through a
	// trackingTransport over that transport.
	bc := awshttp.NewBuildableClient().WithTransportOptions(func(tr *http.Transport) {
		tr.MaxIdleConns, tr.MaxIdleConnsPerHost = 256, 256
	})
	loadOpts := []func(*config.LoadOptions) error{config.WithHTTPClient(bc)}
	if c.region != "" {
		loadOpts = append(loadOpts, config.WithRegion(c.region))
	}
	if c.creds != nil {
		loadOpts = append(loadOpts, config.WithCredentialsProvider(c.creds))
	}
	awsCfg, err := config.LoadDefaultConfig(ctx, loadOpts...)
	if err != nil {
		return nil, fmt.Errorf("objstore: S3 configuration: %w", err)
	}
	base := bc.GetTransport()
	if b, ok := awsCfg.HTTPClient.(*awshttp.BuildableClient); ok {
		base = b.GetTransport()
	}
	tt := &trackingTransport{base: base}
	awsCfg.HTTPClient = &http.Client{Transport: tt}
	if awsCfg.Region == "" {
		awsCfg.Region = "us-east-1"
	}
	pathStyle := c.pathStyle == PathStyleOn || (c.pathStyle == PathStyleAuto && c.endpoint != "")
	common := func(o *s3.Options) {
		if c.endpoint != "" {
			o.BaseEndpoint = aws.String(c.endpoint)
		}
		o.UsePathStyle = pathStyle
		// Checksums only where S3 requires them: S3-compatible services
		// (older MinIO, Ceph) refuse the trailing checksums the SDK sends by
		// default, and ranged GETs cannot be validated anyway.
		o.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
		o.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
	}
	client := s3.NewFromConfig(awsCfg, common, func(o *s3.Options) {
		o.Retryer = retry.NewStandard(func(so *retry.StandardOptions) {
			so.MaxAttempts = c.retry.maxAttempts
			so.MaxBackoff = c.retry.maxWait
			so.BaseDelay = c.retry.initialWait
			so.RateLimiter = ratelimit.None
		})
	})
	reader := s3.NewFromConfig(awsCfg, common, func(o *s3.Options) { o.Retryer = aws.NopRetryer{} })
	return &S3Store{cfg: c, client: client, reader: reader, transport: tt}, nil
}

// Client returns the underlying S3 client (for tests and benchmarks).
func (s *S3Store) Client() *s3.Client { return s.client }

// Stats returns the store's counters.
func (s *S3Store) Stats() *Stats { return s.cfg.stats }

// Close closes idle connections.
func (s *S3Store) Close() error {
	s.transport.CloseIdleConnections()
	return nil
}

// ParseS3URI splits "s3://bucket/key" into bucket and key; key may be empty
// ("s3://bucket" or "s3://bucket/").
func ParseS3URI(uri string) (bucket, key string, err error) {
	if err := checkPath(uri); err != nil {
		return "", "", err
	}
	rest, ok := strings.CutPrefix(uri, "s3://")
	if !ok {
		return "", "", fmt.Errorf("objstore: %q is not an s3:// URI", uri)
	}
	bucket, key, _ = strings.Cut(rest, "/")
	if bucket == "" {
		return "", "", fmt.Errorf("objstore: %q has no bucket name", uri)
	}
	return bucket, key, nil
}

// s3Status returns the HTTP status of a failed S3 call (0 if none arrived)
// and its S3 error code ("NoSuchKey", "SlowDown"; "" if none).
func s3Status(err error) (int, string) {
	status, code := 0, ""
	var re *smithyhttp.ResponseError
	if errors.As(err, &re) {
		status = re.HTTPStatusCode()
	}
	var ae smithy.APIError
	if errors.As(err, &ae) {
		code = ae.ErrorCode()
	}
	return status, code
}

// s3Err maps an S3 error for op on uri to the package's sentinels.
func s3Err(op, uri string, err error) error {
	status, code := s3Status(err)
	switch {
	case code == "NoSuchBucket":
		return fmt.Errorf("objstore: %s %s: bucket does not exist: %w", op, uri, ErrNotFound)
	case status == http.StatusNotFound || code == "NoSuchKey" || code == "NotFound":
		return fmt.Errorf("objstore: %s %s: %w", op, uri, ErrNotFound)
	case status == http.StatusForbidden || status == http.StatusUnauthorized:
		return fmt.Errorf("objstore: %s %s: %w (HTTP %d %s; check the credentials (AWS_ACCESS_KEY_ID, AWS_PROFILE) and their s3:GetObject and s3:ListBucket permissions): %w",
			op, uri, ErrPermission, status, code, fs.ErrPermission)
	case status/100 == 5 || status == http.StatusTooManyRequests:
		return fmt.Errorf("objstore: %s %s: %w: the SDK's retries ran out: %w", op, uri, ErrUnavailable, err)
	case status == http.StatusMovedPermanently:
		return fmt.Errorf("objstore: %s %s: the bucket is in another region than the store's (set AWS_REGION to the bucket's region): %w", op, uri, err)
	}
	return fmt.Errorf("objstore: %s %s: %w", op, uri, err)
}

// s3Permanent reports whether retrying err cannot help: any 4xx but 408
// and 429.
func s3Permanent(err error) bool {
	status, _ := s3Status(err)
	return status/100 == 4 && status != http.StatusRequestTimeout && status != http.StatusTooManyRequests
}

// List implements Store with ListObjectsV2 over the prefix, each page a
// request under the store's retry budget and stall timeout. Keys ending in
// "/" (folder placeholders) are returned like any other object.
func (s *S3Store) List(ctx context.Context, prefix string) ([]Object, error) {
	bucket, key, err := ParseS3URI(prefix)
	if err != nil {
		return nil, err
	}
	p := s3.NewListObjectsV2Paginator(s.reader, &s3.ListObjectsV2Input{Bucket: aws.String(bucket), Prefix: aws.String(key)})
	var out []Object
	for p.HasMorePages() {
		var page *s3.ListObjectsV2Output
		err := metaCall(ctx, &s.cfg.retry, "list "+prefix, func(ctx context.Context) (err error) {
			page, err = p.NextPage(ctx)
			return err
		}, s.metaFailure("list", prefix))
		if err != nil {
			return nil, err
		}
		for _, o := range page.Contents {
			out = append(out, Object{URI: "s3://" + bucket + "/" + aws.ToString(o.Key), Size: aws.ToInt64(o.Size),
				ETag: aws.ToString(o.ETag), ModTime: aws.ToTime(o.LastModified)})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].URI < out[j].URI })
	return out, nil
}

// metaFailure classifies a failed metadata request for op on uri: the error
// ending the call, or nil to retry it.
func (s *S3Store) metaFailure(op, uri string) func(error) error {
	return func(err error) error {
		if s3Permanent(err) {
			return s3Err(op, uri, err)
		}
		return nil
	}
}

// Stat implements Store with HeadObject, under the store's retry budget and
// stall timeout.
func (s *S3Store) Stat(ctx context.Context, uri string) (Object, error) {
	bucket, key, err := ParseS3URI(uri)
	if err != nil {
		return Object{}, err
	}
	if key == "" {
		return Object{}, fmt.Errorf("objstore: stat %s: a bucket is not an object: %w", uri, ErrNotFound)
	}
	var out *s3.HeadObjectOutput
	err = metaCall(ctx, &s.cfg.retry, "stat "+uri, func(ctx context.Context) (err error) {
		out, err = s.reader.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
		return err
	}, s.metaFailure("stat", uri))
	if err != nil {
		return Object{}, err
	}
	return Object{URI: uri, Size: aws.ToInt64(out.ContentLength), ETag: aws.ToString(out.ETag), ModTime: aws.ToTime(out.LastModified)}, nil
}

// ReadAt implements Store with ranged GETs pinned to obj.ETag (If-Match, and
// a check of each response's ETag). An Object without an ETag is pinned to
// the version its first response came from.
func (s *S3Store) ReadAt(ctx context.Context, obj Object, p []byte, off int64) error {
	bucket, key, err := ParseS3URI(obj.URI)
	if err != nil {
		return err
	}
	end := off + int64(len(p))
	what := fmt.Sprintf("read %s [%d, %d)", obj.URI, off, end)
	if obj.ETag != "" {
		what = fmt.Sprintf("read %s (ETag %s) [%d, %d)", obj.URI, obj.ETag, off, end)
	}
	switch {
	case key == "":
		return fmt.Errorf("objstore: %s: a bucket is not an object: %w", what, ErrNotFound)
	case off < 0:
		return fmt.Errorf("objstore: %s: negative offset", what)
	case len(p) == 0:
		return nil
	case obj.ETag != "" && end > obj.Size:
		// A pinned version cannot grow: no request needed.
		return fmt.Errorf("objstore: %s: past the end, the object has %d bytes: %w", what, obj.Size, io.ErrUnexpectedEOF)
	}
	etag := obj.ETag
	once := func(ctx context.Context, p []byte, off int64) (int, error) {
		in := &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key),
			Range: aws.String("bytes=" + strconv.FormatInt(off, 10) + "-" + strconv.FormatInt(off+int64(len(p))-1, 10))}
		if etag != "" {
			in.IfMatch = aws.String(etag)
		}
		out, err := s.reader.GetObject(ctx, in)
		if err != nil {
			return 0, err
		}
		defer out.Body.Close()
		got := aws.ToString(out.ETag)
		if etag != "" && got != etag {
			return 0, errChanged{was: "ETag " + etag, now: "ETag " + got}
		}
		etag = got // resumptions stay on this version
		first, _, total, ok := contentRange(aws.ToString(out.ContentRange))
		if !ok {
			return 0, errNoRange
		}
		return rangedBody(out.Body, p, off, first, total)
	}
	t := newReadTracker(&s.cfg.retry, s.cfg.stats)
	defer t.stop()
	return t.read(ctx, what, p, off, once, func(err error) error {
		return s.readFailure(what, obj, etag, err)
	})
}

// readFailure classifies a failed read attempt: the error ending the read,
// or nil to retry it.
func (s *S3Store) readFailure(what string, obj Object, etag string, err error) error {
	var pe errPastEnd
	var ce errChanged
	status, code := s3Status(err)
	switch {
	case errors.As(err, &pe):
		return fmt.Errorf("objstore: %s: past the end, the object has %d bytes: %w", what, pe.size, io.ErrUnexpectedEOF)
	case status == http.StatusRequestedRangeNotSatisfiable || code == "InvalidRange":
		return fmt.Errorf("objstore: %s: past the end of the object: %w", what, io.ErrUnexpectedEOF)
	case errors.As(err, &ce):
		return changedErr(what, ce)
	case status == http.StatusPreconditionFailed:
		return changedErr(what, errChanged{was: "ETag " + etag})
	case errors.Is(err, errNoRange):
		return fmt.Errorf("objstore: %s: %w (want 206 Partial Content with Content-Range; is the endpoint an S3 service?): %w", what, err, ErrUnsupported)
	case (status == http.StatusNotFound || code == "NoSuchKey") && obj.ETag != "":
		return fmt.Errorf("objstore: %s: %w: the object was deleted after it was listed", what, ErrNotFound)
	case s3Permanent(err):
		return s3Err("read", obj.URI, err)
	}
	return nil
}

// Create implements Creator. The object is spooled to a temporary file and
// uploaded by one PutObject on Close (objects up to 5 GiB, S3's limit for
// one upload; larger ones fail with S3's error).
func (s *S3Store) Create(ctx context.Context, uri string) (io.WriteCloser, error) {
	bucket, key, err := ParseS3URI(uri)
	if err != nil {
		return nil, err
	}
	if key == "" {
		return nil, fmt.Errorf("objstore: create %s: no object name", uri)
	}
	f, err := os.CreateTemp("", "meshfeed-s3-put-*")
	if err != nil {
		return nil, fmt.Errorf("objstore: create %s: spool file: %w", uri, err)
	}
	return &s3Writer{ctx: ctx, s: s, bucket: bucket, key: key, uri: uri, f: f}, nil
}

type s3Writer struct {
	ctx              context.Context
	s                *S3Store
	bucket, key, uri string
	f                *os.File
	n                int64
}

func (w *s3Writer) Write(p []byte) (int, error) {
	n, err := w.f.Write(p)
	w.n += int64(n)
	if err != nil {
		return n, fmt.Errorf("objstore: write %s: spool file: %w", w.uri, err)
	}
	return n, nil
}

func (w *s3Writer) Close() error {
	defer os.Remove(w.f.Name())
	defer w.f.Close()
	if _, err := w.f.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("objstore: commit %s: spool file: %w", w.uri, err)
	}
	_, err := w.s.client.PutObject(w.ctx, &s3.PutObjectInput{Bucket: aws.String(w.bucket), Key: aws.String(w.key),
		Body: w.f, ContentLength: aws.Int64(w.n)})
	if err != nil {
		return s3Err("commit", w.uri, err)
	}
	return nil
}

// isLoopbackHost reports whether host (no port) is a loopback name or
// address: "localhost", 127.0.0.0/8, ::1.
func isLoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}
