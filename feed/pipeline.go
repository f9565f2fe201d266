package feed

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/meshfeed/meshfeed/filter"
	"github.com/meshfeed/meshfeed/internal/arrowmem"
	"github.com/meshfeed/meshfeed/loader"
	"github.com/meshfeed/meshfeed/objstore"
	"github.com/meshfeed/meshfeed/tokcount"
	"github.com/meshfeed/meshfeed/transport"
)

// DefaultCacheTTL is how long a Pipeline keeps an opened dataset (the
// file list and parsed footers) for later requests over the same datasets and
// columns, so that GetFlightInfo followed by DoGet lists the files once.
const DefaultCacheTTL = 30 * time.Second

// cacheSize bounds the datasets a Pipeline keeps.
const cacheSize = 64

// pipelineConfig holds the settings of a Pipeline; each Option
// documents its own default.
type pipelineConfig struct {
	store     objstore.Store
	mem       memory.Allocator
	storeOpts []objstore.MuxOption
	loadOpts  []loader.Option
	cacheTTL  time.Duration
	readAhead int64
	// noEdgeShare: each slice fetches its own pages (tests compare with it)
	noEdgeShare bool
	// noSnap: readers keep their pieces' ends where they were cut, inside
	// pages (tests compare with it)
	noSnap bool
	// noGate: a mixture's readers start each piece as soon as their budget
	// allows (tests compare with it)
	noGate bool
	// noPlace: a mixture's slices are its cursors' parts, joined by the
	// transport, where they could be placed (tests compare with it)
	noPlace bool
	// selections caches the rows filters keep (filter.go).
	selections filter.Store
	// tokenizers caches parsed tokenizers by content (tokenizer.go).
	tokenizers *TokenizerCache
	// tokenCounts caches files' token counts (tokcount.go).
	tokenCounts tokcount.Store
	// heldBytes and heldTTL bound the filter columns a plan keeps for
	// its stream (WithHeldChunks); held is them, made by NewPipeline.
	heldBytes int64
	heldTTL   time.Duration
	held      *loader.HeldChunks
}

// validate reports every problem of the configuration at once.
func (c *pipelineConfig) validate() error {
	var errs []error
	if c.cacheTTL < 0 {
		errs = append(errs, fmt.Errorf("feed: %w: cache TTL %v is negative (0 disables the cache)", transport.ErrConfig, c.cacheTTL))
	}
	if c.heldBytes < 0 || c.heldTTL < 0 {
		errs = append(errs, fmt.Errorf("feed: %w: held filter columns: %d bytes, %v: negative (0 keeps none)", transport.ErrConfig, c.heldBytes, c.heldTTL))
	}
	if c.readAhead < 0 {
		errs = append(errs, fmt.Errorf("feed: %w: read-ahead %d bytes is negative (0 reads one row group per slice at a time)", transport.ErrConfig, c.readAhead))
	}
	return errors.Join(errs...)
}

// WithReadAhead sets each stream's read-ahead budget: compressed plus
// decoded bytes of row groups fetched ahead of the cutters, split evenly among
// the stream's slices (each slice reads its own rows). A row group larger
// than a slice's share is read in pieces (budget.go); a request whose slices
// cannot fit their share (one slice, plus columns decoded whole) is refused
// when it is planned; the shuffle window's rows are held beside the budget,
// and with a window that costs more than a share, a slice's reader reads one
// window of rows ahead instead of its share (budget.go). Default
// loader.DefaultReadAhead; 0 reads one whole row group per slice at a time,
// without that check; a negative value is an error of NewPipeline. So a
// server's read-ahead memory is at most this times its concurrent streams.
func WithReadAhead(bytes int64) Option {
	return func(c *pipelineConfig) { c.readAhead = bytes }
}

// WithTokenizerCache sets the cache of parsed tokenizers (tokenizer.go), for
// example one shared by several Pipelines. Default: a cache of
// DefaultTokenizerCacheEntries of the Pipeline's own.
func WithTokenizerCache(c *TokenizerCache) Option {
	return func(cfg *pipelineConfig) { cfg.tokenizers = c }
}

// Option configures NewPipeline.
type Option func(*pipelineConfig)

// WithStore sets the store datasets are read from. Default: a
// objstore.NewStore Mux (local paths and gs://), closed by Pipeline.Close. A
// store given here is not closed by the Pipeline.
func WithStore(s objstore.Store) Option {
	return func(c *pipelineConfig) { c.store = s }
}

// WithStoreOptions configures the store NewPipeline creates when
// WithStore gives none (for example objstore.WithLocalOptions with
// objstore.WithMapCache, to keep local files mapped between streams).
func WithStoreOptions(opts ...objstore.MuxOption) Option {
	return func(c *pipelineConfig) { c.storeOpts = append(c.storeOpts, opts...) }
}

// WithAllocator sets the allocator of decoded row groups, slices and
// step records. Default: an arrowmem.PoolAllocator (recycled buffers; values
// buffers the decoder overwrites entirely are not zeroed). Memory returns to
// the pool only when the last reference is released, which for a step sent
// zero-copy is when gRPC has freed its buffers.
func WithAllocator(mem memory.Allocator) Option {
	return func(c *pipelineConfig) { c.mem = mem }
}

// WithLoaderOptions adds loader options (footer cache, coalescing,
// mmap, ...) to every dataset the Pipeline opens. Column projection and fill
// values come from each request and must not be set here; read-ahead and
// decode workers are per stream (WithReadAhead), so the loader's
// WithDecodeWorkers has no effect here. Default: the loader's defaults.
func WithLoaderOptions(opts ...loader.Option) Option {
	return func(c *pipelineConfig) { c.loadOpts = append(c.loadOpts, opts...) }
}

// WithCacheTTL sets how long an opened dataset is reused by later
// requests naming the same datasets, columns and fills. Default
// DefaultCacheTTL; 0 disables the cache (every request lists the
// files again; footers stay cached by the loader).
func WithCacheTTL(d time.Duration) Option {
	return func(c *pipelineConfig) { c.cacheTTL = d }
}

// WithHeldChunks bounds what a filter's plan keeps of the filter columns it
// read, for the stream that delivers those columns (filter.go): at most
// maxBytes in all, each row group at most ttl, in the server's memory
// account while held (loader.HeldChunks). Default loader.DefaultHeldBytes
// and loader.DefaultHeldTTL; 0 keeps none (the stream reads them again);
// negative is an error of NewPipeline.
func WithHeldChunks(maxBytes int64, ttl time.Duration) Option {
	return func(c *pipelineConfig) { c.heldBytes, c.heldTTL = maxBytes, ttl }
}

// Pipeline is the transport.Backend that serves real datasets: it opens the request's
// datasets with package loader (projected to the requested columns), plans
// the epochs with package batching, and streams each step as this client's
// slices, each cut from its own stream by its own batching.Cutter, fed by its
// own loader.RowGroupReader over exactly the row groups that the cutter asks
// for, shaped by a shape.Shaper and concatenated in slice order.
//
// Requests are interpreted as docs/PROTOCOL.md says, with these choices:
//
//   - Column fill values also replace nulls of numeric columns when the files
//     are decoded (loader.WithFill); columns without one deliver their nulls
//     as Arrow nulls (loader.WithNullsAsValidity). Padding rows added by last_batch=pad hold
//     zeros (list columns: empty lists, then Length fill values when shaped).
//   - pack_ratio together with last_batch=pad is refused (InvalidArgument):
//     packing changes the row count, so a per-row mask cannot describe a packed
//     slice. With packing, each slice has PackedRows(b, pack_ratio) rows and
//     real_rows counts those rows (padding inside packed rows is marked by
//     segment ids equal to 0).
//   - A Next whose context is cancelled ends the stream: its readers stop.
//
// Errors wrap the sentinels of the packages that found them (loader,
// batching, shape, or transport's for requests it refuses); ErrorCodes maps
// them to status codes, which the server applies once, at its edge. A
// Pipeline is safe for concurrent use.
type Pipeline struct {
	cfg      pipelineConfig
	ownStore io.Closer // the store NewPipeline created, closed by Close

	mu     sync.Mutex
	cache  map[string]cachedDataset
	roots  []string         // set by UseRoots (pipeline_roots.go)
	limits transport.Limits // set by UseLimits (limits.go)

	filterStats FilterStats     // filter.go
	tokenStats  TokenCountStats // tokcount.go
}

// cachedDataset is an opened dataset and when it stops being reused.
type cachedDataset struct {
	ds      *loader.Dataset
	expires time.Time
}

var _ transport.Backend = (*Pipeline)(nil)

// NewPipeline returns a Pipeline. ctx is not retained.
func NewPipeline(ctx context.Context, opts ...Option) (*Pipeline, error) {
	cfg := pipelineConfig{mem: arrowmem.NewPoolAllocator(), cacheTTL: DefaultCacheTTL, readAhead: loader.DefaultReadAhead,
		heldBytes: loader.DefaultHeldBytes, heldTTL: loader.DefaultHeldTTL}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.mem == nil {
		cfg.mem = memory.DefaultAllocator
	}
	if cfg.selections == nil {
		cfg.selections = filter.NewMemoryStore(0)
	}
	if cfg.tokenizers == nil {
		cfg.tokenizers = NewTokenizerCache(DefaultTokenizerCacheEntries)
	}
	if cfg.tokenCounts == nil {
		cfg.tokenCounts = tokcount.NewMemoryStore(0)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	p := &Pipeline{cfg: cfg, cache: make(map[string]cachedDataset)}
	p.cfg.held = loader.NewHeldChunks(cfg.heldBytes, cfg.heldTTL, func() loader.Account {
		if m := p.serverLimits().Memory; m != nil {
			return m
		}
		return nil
	})
	if cfg.store == nil {
		m, err := objstore.NewStore(ctx, cfg.storeOpts...)
		if err != nil {
			return nil, fmt.Errorf("feed: %w", err)
		}
		p.cfg.store, p.ownStore = m, m
	}
	return p, nil
}

// Close closes the store that NewPipeline created (if any) and drops the
// dataset cache. Streams still open must be closed first.
func (p *Pipeline) Close() error {
	p.mu.Lock()
	p.cache = make(map[string]cachedDataset)
	p.mu.Unlock()
	p.cfg.held.Close()
	if p.ownStore != nil {
		return p.ownStore.Close()
	}
	return nil
}

var _ transport.StatsReporter = (*Pipeline)(nil)

// StorageStats implements transport.StatsReporter: the counters of the
// Pipeline's store (bytes read, reads, retries, resumes), which the server
// exports as meshfeed_storage_* metrics; false when the store does not count
// its work (is not an objstore.StatsReporter). A store shared with others counts
// their reads too.
func (p *Pipeline) StorageStats() (transport.StorageStats, bool) {
	r, ok := p.cfg.store.(objstore.StatsReporter)
	if !ok {
		return transport.StorageStats{}, false
	}
	st := r.Stats()
	return transport.StorageStats{
		BytesRead: st.BytesRead.Load(),
		Reads:     st.Reads.Load(),
		Retries:   st.Retries.Load(),
		Resumes:   st.Resumes.Load(),

		CacheHits:        st.CacheHits.Load(),
		CacheMisses:      st.CacheMisses.Load(),
		CacheBytesSaved:  st.CacheBytesSaved.Load(),
		CacheEvictions:   st.CacheEvictions.Load(),
		CacheCorrupt:     st.CacheCorrupt.Load(),
		CacheWriteErrors: st.CacheWriteErrors.Load(),
	}, true
}

// Allocator returns the allocator of the Pipeline's records; a server over
// it should join a step's slices from the same one (transport.WithAllocator).
func (p *Pipeline) Allocator() memory.Allocator { return p.cfg.mem }

// Info implements transport.Backend: it plans from metadata alone.
func (p *Pipeline) Info(ctx context.Context, req *transport.Request) (*transport.PlanInfo, error) {
	if req.Mixture != nil {
		return p.mixtureInfo(ctx, req) // mixture.go
	}
	pl, err := p.planFor(ctx, req)
	if err != nil {
		return nil, err
	}
	return &transport.PlanInfo{
		Schema:        pl.schema,
		NumRows:       pl.plan.N(),
		StepsPerEpoch: int64(pl.plan.StepsPerEpoch()),
		DroppedRows:   pl.plan.DroppedRows(),
		PaddedRows:    pl.plan.PaddedRows(),
		// How the dataset was planned (a cached dataset: when it was).
		Manifest:       pl.ds.PlanInfo().Manifest,
		ManifestReason: pl.ds.PlanInfo().Reason,
		PlanRequests:   pl.ds.PlanInfo().Requests,
		Tokenizers:     tokenizerSums(pl.toks),
	}, nil
}

// Open implements transport.Backend. Reading of the first step's row groups starts at
// once, in the background.
func (p *Pipeline) Open(ctx context.Context, req *transport.Request) (transport.Stream, error) {
	return p.open(ctx, req, p.cfg.mem, false)
}

// OpenWith implements transport.AllocatingBackend: Open, with the stream's
// decoded row groups, slices and step records allocated from mem (the
// shared-memory wire's arena). Nothing the Pipeline keeps beyond the stream
// (its dataset and footer caches) comes from mem. A mixture's slices are
// placed where they can be (mixture_place.go): each then travels as one
// buffer of mem, where Open's stream hands them over as parts, which
// Flight sends without joining them.
func (p *Pipeline) OpenWith(ctx context.Context, req *transport.Request, mem memory.Allocator) (transport.Stream, error) {
	return p.open(ctx, req, mem, true)
}

func (p *Pipeline) open(ctx context.Context, req *transport.Request, mem memory.Allocator, place bool) (transport.Stream, error) {
	if req.Mixture != nil {
		return p.openMixture(ctx, req, mem, place) // mixture_stream.go
	}
	pl, err := p.planFor(ctx, req)
	if err != nil {
		return nil, err
	}
	if steps := pl.plan.StepsPerEpoch(); pl.cfg.start.Step >= steps {
		return nil, fmt.Errorf("feed: %w: start step %d is past the %d steps of an epoch (steps run 0..%d)",
			transport.ErrFailedPrecondition, pl.cfg.start.Step, steps, steps-1)
	}
	reserved, err := p.reserve(ctx, pl)
	if err != nil {
		return nil, err
	}
	if pl.concat != nil {
		return p.openConcat(ctx, pl, mem, func() { p.serverLimits().Memory.Unreserve(reserved) })
	}
	// The readers outlive Open: they stop when a Next's context is done or
	// at Close, not when Open's context ends.
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s := &pipelineStream{
		pl:        pl,
		cfg:       &p.cfg,
		mem:       mem,
		ctx:       sctx,
		cancel:    cancel,
		pos:       pl.cfg.start,
		unreserve: func() { p.serverLimits().Memory.Unreserve(reserved) },
	}
	if err := s.openEpoch(); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// dataset opens (or takes from the cache) the dataset of patterns projected
// to cols.
func (p *Pipeline) dataset(ctx context.Context, patterns, cols []string, fills map[string]float64, manifest string) (*loader.Dataset, error) {
	key, _ := json.Marshal(struct {
		P []string
		C []string
		F map[string]string
		M string
	}{patterns, cols, fillKey(fills), manifest})
	now := time.Now()
	if p.cfg.cacheTTL > 0 {
		p.mu.Lock()
		e, ok := p.cache[string(key)]
		p.mu.Unlock()
		if ok && now.Before(e.expires) {
			return e.ds, nil
		}
	}
	opts := append([]loader.Option(nil), p.cfg.loadOpts...)
	if len(cols) > 0 {
		opts = append(opts, loader.WithColumns(cols...))
	}
	if len(fills) > 0 {
		opts = append(opts, loader.WithFill(fills))
	}
	// Over Flight, a column without a fill delivers its nulls as Arrow nulls.
	opts = append(opts, loader.WithNullsAsValidity())
	// The ticket's manifest: absent means auto, "off" the footers.
	switch manifest {
	case "", loader.ManifestAuto:
		opts = append(opts, loader.WithManifest(loader.ManifestAuto))
	case "off":
	default:
		opts = append(opts, loader.WithManifest(manifest))
	}
	ds, err := loader.Open(ctx, p.cfg.store, patterns, opts...)
	if err != nil {
		return nil, err
	}
	if p.cfg.cacheTTL > 0 {
		p.mu.Lock()
		for k, e := range p.cache {
			if !now.Before(e.expires) || len(p.cache) >= cacheSize {
				delete(p.cache, k)
			}
		}
		p.cache[string(key)] = cachedDataset{ds: ds, expires: now.Add(p.cfg.cacheTTL)}
		p.mu.Unlock()
	}
	return ds, nil
}

// fillKey renders fills exactly (NaN included) for the cache key.
func fillKey(fills map[string]float64) map[string]string {
	out := make(map[string]string, len(fills))
	for k, v := range fills {
		out[k] = strconv.FormatFloat(v, 'g', -1, 64)
	}
	return out
}
