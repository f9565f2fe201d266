package loader

import (
	"fmt"
	"runtime"
	"strings"

	"github.com/meshfeed/meshfeed/format"
	"github.com/meshfeed/meshfeed/objstore"
)

// DefaultReadAhead is the default in-flight budget of a RowGroupReader
// (WithReaderReadAhead), and of a feed stream (feed.WithReadAhead, `meshfeed
// serve --read-ahead`): compressed plus decoded bytes of row groups read
// ahead.
const DefaultReadAhead = 256 << 20

// config holds every setting of a Dataset. newConfig sets the defaults; each
// Option documents its own.

type config struct {
	columns          []string
	fill             map[string]float64
	footerWorkers    int
	coalesceGap      int64
	maxCoalesced     int64
	decodeWorkers    int
	readsInFlight    int
	footerCache      *FooterCache
	readBufferSize   int
	footerReadLength int
	maxRowGroupBytes int64
	mmap             bool
	validity         bool
	manifest         string // WithManifest
}

// formatOptions are the settings package format reads footers and decodes
// with.
func (c *config) formatOptions() format.Options {
	return format.Options{
		Fill:             c.fill,
		NullsAsValidity:  c.validity,
		MaxBytes:         c.maxRowGroupBytes,
		FooterReadLength: c.footerReadLength,
		Missing:          ErrNotFound,
		Kept:             []error{objstore.ErrUnavailable, ErrNotFound},
	}
}

// Option configures Open.
type Option func(*config)

func newConfig(opts []Option) (config, error) {
	c := config{
		footerWorkers:    16,
		coalesceGap:      1 << 20,
		maxCoalesced:     64 << 20,
		decodeWorkers:    runtime.GOMAXPROCS(0),
		readsInFlight:    DefaultReadsInFlight,
		footerCache:      defaultFooterCache,
		readBufferSize:   64 << 10,
		footerReadLength: 64 << 10,
		maxRowGroupBytes: 4 << 30,
		mmap:             true,
	}
	for _, o := range opts {
		o(&c)
	}
	return c, c.validate()
}

func (c *config) validate() error {
	var errs []string
	if c.footerWorkers <= 0 {
		errs = append(errs, fmt.Sprintf("footer concurrency %d must be positive", c.footerWorkers))
	}
	if c.coalesceGap < 0 {
		errs = append(errs, fmt.Sprintf("coalesce gap %d must be >= 0", c.coalesceGap))
	}
	if c.maxCoalesced <= 0 {
		errs = append(errs, fmt.Sprintf("max coalesced read %d must be positive", c.maxCoalesced))
	}
	if c.maxRowGroupBytes <= 0 {
		errs = append(errs, fmt.Sprintf("max row group bytes %d must be positive", c.maxRowGroupBytes))
	}
	if c.decodeWorkers <= 0 {
		errs = append(errs, fmt.Sprintf("decode workers %d must be positive", c.decodeWorkers))
	}
	seen := map[string]bool{}
	for _, col := range c.columns {
		if seen[col] {
			errs = append(errs, fmt.Sprintf("column %q listed twice", col))
		}
		seen[col] = true
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("loader: invalid options: %s", strings.Join(errs, "; "))
}

// WithColumns projects the dataset onto the named top-level columns, in that
// order. Default (nil or empty): every column of the first file, in file order.
func WithColumns(cols ...string) Option {
	return func(c *config) { c.columns = append([]string(nil), cols...) }
}

// WithFill gives numeric columns a value that replaces nulls. Without one, a
// null in a numeric column is an error naming file, row group and column.
// Default: no fill values.
func WithFill(fill map[string]float64) Option {
	return func(c *config) {
		c.fill = make(map[string]float64, len(fill))
		for k, v := range fill {
			c.fill[k] = v
		}
	}
}

// WithNullsAsValidity keeps the nulls of columns without a fill value as
// Arrow nulls (validity bitmaps) instead of refusing them: what a Flight
// client that has no fill to give receives. Such columns are nullable in the
// dataset's schema, with field metadata meshfeed.null_count: the footers'
// total, or "unknown" where a writer recorded none. Null lists and null
// elements inside lists of numbers stay errors (give a fill: null lists
// become empty). Default: off (such nulls are ErrNull, at plan time where the
// footers record them).
func WithNullsAsValidity() Option { return func(c *config) { c.validity = true } }

// WithFooterConcurrency bounds how many footers are read at once while
// planning. Default 16; zero or negative is an error.
func WithFooterConcurrency(n int) Option { return func(c *config) { c.footerWorkers = n } }

// WithCoalesceGap merges the ranged reads of two projected column chunks of a
// row group into one read when at most gap bytes separate them. Default 1 MiB;
// 0 merges only touching ranges.
func WithCoalesceGap(gap int64) Option { return func(c *config) { c.coalesceGap = gap } }

// WithMaxCoalescedRead caps the size of one merged ranged read. Default 64 MiB.
func WithMaxCoalescedRead(n int64) Option { return func(c *config) { c.maxCoalesced = n } }

// WithDecodeWorkers sets how many row groups a RowGroupReader decodes at once.
// Default GOMAXPROCS.
func WithDecodeWorkers(n int) Option { return func(c *config) { c.decodeWorkers = n } }

// DefaultReadsInFlight is the default of WithReadsInFlight: enough ranged
// reads to keep a link busy when each request waits tens of milliseconds for
// its first byte. The bytes in flight must be about bandwidth x latency:
// 50 MB for 1 GB/s at 50 ms, 64 row groups of 1 MiB (BENCHMARKS.md, "Remote
// stores: throughput against latency": 16 kept 55% of a 200 MiB/s link busy,
// 64 kept 74%). The read-ahead budget bounds the bytes either way.
const DefaultReadsInFlight = 64

// WithReadsInFlight sets how many row groups (or pieces) a RowGroupReader
// has in flight at once: fetching (their coalesced ranged reads) or
// decoding. Decoding holds one of WithDecodeWorkers' slots, waiting for
// bytes does not, so a reader keeps fetching ahead while its workers decode:
// what object stores with tens of milliseconds of latency per request need.
// The read-ahead budget still bounds the bytes in flight. Default
// DefaultReadsInFlight; values below the decode workers are taken as that
// number (one read per worker, as decoding needs its bytes first).
func WithReadsInFlight(n int) Option { return func(c *config) { c.readsInFlight = n } }

// FooterCache keeps the footers Open parsed, keyed by object version
// (objstore.FooterCache): re-planning the same files reads no footer twice.
// A nil *FooterCache caches nothing.
type FooterCache = objstore.FooterCache[format.Footer]

// NewFooterCache returns a cache holding at most maxEntries footers (least
// recently used evicted first). maxEntries <= 0 returns nil: no caching.
func NewFooterCache(maxEntries int) *FooterCache {
	return objstore.NewFooterCache[format.Footer](maxEntries)
}

var defaultFooterCache = NewFooterCache(4096)

// WithFooterCache sets the cache of parsed footers. Default: a process-wide
// cache of 4096 footers keyed by Object.CacheKey. nil disables caching.
func WithFooterCache(fc *FooterCache) Option { return func(c *config) { c.footerCache = fc } }

// WithFooterReadLength sets how many bytes at the end of each file the first
// planning read fetches, hoping the footer lies inside (one round trip per
// file instead of two). Default 64 KiB; 8 reads exactly the trailer and then
// exactly the footer, so planning fetches no byte of any data page. Values
// below 8 are raised to 8.
func WithFooterReadLength(n int) Option {
	return func(c *config) { c.footerReadLength = max(n, 8) }
}

// WithMaxRowGroupBytes caps what one column chunk of a row group may decode
// to (bytes, and values). A footer or page header claiming more is an error
// rather than an allocation of that size: it protects against corrupt files.
// Default 4 GiB; zero or negative is an error.
func WithMaxRowGroupBytes(n int64) Option { return func(c *config) { c.maxRowGroupBytes = n } }

// WithMmap lets the loader map the column chunks it decodes with mmap instead
// of reading them, when the store implements objstore.Mapper (local files on Linux;
// not GCS): the decoders then read the page cache directly, which saves one
// copy of every byte. A range that cannot be mapped is read. Default true.
//
// A file truncated while mapped raises SIGBUS when its lost pages are
// touched: the loader reports that as an error of the row group being
// decoded, but a file must not be truncated and rewritten in place while a
// dataset reads it (replace it by renaming a new file into place).
func WithMmap(on bool) Option { return func(c *config) { c.mmap = on } }
