package transport

// The real Backend: loader (files -> Arrow row groups) + batching (epoch plan,
// stream cutters, shaping) behind the Flight server.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/meshfeed/meshfeed/batching"
	"github.com/meshfeed/meshfeed/loader"
	"github.com/meshfeed/meshfeed/shape"
)

// DefaultPipelineCacheTTL is how long a Pipeline keeps an opened dataset (the
// file list and parsed footers) for later requests over the same datasets and
// columns, so that GetFlightInfo followed by DoGet lists the files once.
const DefaultPipelineCacheTTL = 30 * time.Second

// pipelineCacheSize bounds the datasets a Pipeline keeps.
const pipelineCacheSize = 64

// pipelineConfig holds the settings of a Pipeline; each PipelineOption
// documents its own default.
type pipelineConfig struct {
	store     loader.Store
	mem       memory.Allocator
	storeOpts []loader.MuxOption
	loadOpts  []loader.Option
	cacheTTL  time.Duration
	readAhead int64
	workers   int
}

// DefaultStreamReadAhead is a stream's default read-ahead budget.
const DefaultStreamReadAhead = 256 << 20

// WithPipelineReadAhead sets each stream's read-ahead budget: compressed plus
// decoded bytes of row groups fetched ahead of the cutters, split evenly among
// the stream's slices (each slice reads its own rows). Default
// DefaultStreamReadAhead; 0 reads one row group per slice at a time. So a
// server's read-ahead memory is at most this times its concurrent streams.
func WithPipelineReadAhead(bytes int64) PipelineOption {
	return func(c *pipelineConfig) { c.readAhead = max(bytes, 0) }
}

// PipelineOption configures NewPipeline.
type PipelineOption func(*pipelineConfig)

// WithPipelineStore sets the store datasets are read from. Default: a
// loader.NewStore Mux (local paths and gs://), closed by Pipeline.Close. A
// store given here is not closed by the Pipeline.
func WithPipelineStore(s loader.Store) PipelineOption {
	return func(c *pipelineConfig) { c.store = s }
}

// WithPipelineStoreOptions configures the store NewPipeline creates when
// WithPipelineStore gives none (for example loader.WithLocalOptions with
// loader.WithMapCache, to keep local files mapped between streams).
func WithPipelineStoreOptions(opts ...loader.MuxOption) PipelineOption {
	return func(c *pipelineConfig) { c.storeOpts = append(c.storeOpts, opts...) }
}

// WithPipelineAllocator sets the allocator of decoded row groups, slices and
// step records. Default: a loader.PoolAllocator (recycled buffers; values
// buffers the decoder overwrites entirely are not zeroed). Memory returns to
// the pool only when the last reference is released, which for a step sent
// zero-copy is when gRPC has freed its buffers.
func WithPipelineAllocator(mem memory.Allocator) PipelineOption {
	return func(c *pipelineConfig) { c.mem = mem }
}

// WithPipelineLoaderOptions adds loader options (footer cache, coalescing,
// mmap, ...) to every dataset the Pipeline opens. Column projection and fill
// values come from each request and must not be set here; read-ahead and
// decode workers are per stream (WithPipelineReadAhead), so the loader's
// WithReadAhead and WithDecodeWorkers have no effect here. Default: the
// loader's defaults.
func WithPipelineLoaderOptions(opts ...loader.Option) PipelineOption {
	return func(c *pipelineConfig) { c.loadOpts = append(c.loadOpts, opts...) }
}

// WithPipelineCacheTTL sets how long an opened dataset is reused by later
// requests naming the same datasets, columns and fills. Default
// DefaultPipelineCacheTTL; 0 disables the cache (every request lists the
// files again; footers stay cached by the loader).
func WithPipelineCacheTTL(d time.Duration) PipelineOption {
	return func(c *pipelineConfig) { c.cacheTTL = d }
}

// Pipeline is the Backend that serves real datasets: it opens the request's
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
// Errors wrap this package's sentinels so that the server maps them to
// status codes (see pipelineError). A Pipeline is safe for concurrent use.
type Pipeline struct {
	cfg      pipelineConfig
	ownStore io.Closer // the store NewPipeline created, closed by Close

	mu    sync.Mutex
	cache map[string]cachedDataset
}

// cachedDataset is an opened dataset and when it stops being reused.
type cachedDataset struct {
	ds      *loader.Dataset
	expires time.Time
}

var _ Backend = (*Pipeline)(nil)

// NewPipeline returns a Pipeline. ctx is not retained.
func NewPipeline(ctx context.Context, opts ...PipelineOption) (*Pipeline, error) {
	cfg := pipelineConfig{mem: loader.NewPoolAllocator(), cacheTTL: DefaultPipelineCacheTTL, readAhead: DefaultStreamReadAhead}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.mem == nil {
		cfg.mem = memory.DefaultAllocator
	}
	if cfg.cacheTTL < 0 {
		return nil, fmt.Errorf("transport: pipeline: %w: cache TTL %v is negative", ErrConfig, cfg.cacheTTL)
	}
	p := &Pipeline{cfg: cfg, cache: make(map[string]cachedDataset)}
	if cfg.store == nil {
		m, err := loader.NewStore(ctx, cfg.storeOpts...)
		if err != nil {
			return nil, fmt.Errorf("transport: pipeline: %w", err)
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
	if p.ownStore != nil {
		return p.ownStore.Close()
	}
	return nil
}

var _ loader.StatsReporter = (*Pipeline)(nil)

// Stats implements loader.StatsReporter: the counters of the Pipeline's store
// (bytes read, reads, retries, resumes), which the server exports as
// meshfeed_storage_* metrics; nil when the store does not count its work (is
// not a loader.StatsReporter). A store shared with others counts their reads
// too.
func (p *Pipeline) Stats() *loader.StoreStats {
	if r, ok := p.cfg.store.(loader.StatsReporter); ok {
		return r.Stats()
	}
	return nil
}

// pipelinePlan is a request planned on its dataset.
type pipelinePlan struct {
	req    *Request
	ds     *loader.Dataset
	plan   *batching.Plan
	refs   []loader.RowGroupRef // the plan's row groups, same indices
	cutIn  *arrow.Schema        // schema of the decoded row groups
	cutOut *arrow.Schema        // schema of the cutters' slices (mask appended under pad)
	shaper *shape.Shaper        // nil: no column is shaped
	schema *arrow.Schema        // schema of every step record
	packed bool                 // a column is packed (slices have PackedRows rows)
}

// Info implements Backend: it plans from metadata alone.
func (p *Pipeline) Info(ctx context.Context, req *Request) (*PlanInfo, error) {
	pl, err := p.planFor(ctx, req)
	if err != nil {
		return nil, err
	}
	return &PlanInfo{
		Schema:        pl.schema,
		NumRows:       pl.plan.N(),
		StepsPerEpoch: int64(pl.plan.StepsPerEpoch()),
		DroppedRows:   pl.plan.DroppedRows(),
		PaddedRows:    pl.plan.PaddedRows(),
	}, nil
}

// Open implements Backend. Reading of the first step's row groups starts at
// once, in the background.
func (p *Pipeline) Open(ctx context.Context, req *Request) (Stream, error) {
	pl, err := p.planFor(ctx, req)
	if err != nil {
		return nil, err
	}
	if steps := pl.plan.StepsPerEpoch(); req.Start.Step >= steps {
		return nil, fmt.Errorf("transport: pipeline: %w: start step %d is past the %d steps of an epoch (steps run 0..%d)",
			ErrFailedPrecondition, req.Start.Step, steps, steps-1)
	}
	// The readers outlive Open: they stop when a Next's context is done or
	// at Close, not when Open's context ends.
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s := &pipelineStream{
		pl:     pl,
		cfg:    &p.cfg,
		mem:    p.cfg.mem,
		ctx:    sctx,
		cancel: cancel,
		pos:    batching.Position{Epoch: req.Start.Epoch, Step: req.Start.Step},
	}
	if err := s.openEpoch(); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// planFor opens the request's dataset and plans it.
func (p *Pipeline) planFor(ctx context.Context, req *Request) (*pipelinePlan, error) {
	cols, fills, err := shapingOf(req)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(req.Columns))
	for i, c := range req.Columns {
		names[i] = c.Name
	}
	ds, err := p.dataset(ctx, req.Datasets, names, fills)
	if err != nil {
		return nil, pipelineError(columnError(err, names))
	}
	policy, err := batching.ParsePolicy(string(req.LastBatch))
	if err != nil {
		return nil, pipelineError(err)
	}
	refs := ds.RowGroups()
	rgs := make([]batching.RowGroup, len(refs))
	for i, r := range refs {
		rgs[i] = batching.RowGroup{File: r.File, Index: r.Index, Rows: r.Rows, Bytes: r.Bytes}
	}
	plan, err := batching.NewPlan(rgs, batching.Config{
		GlobalBatch:      req.GlobalBatchSize,
		D:                req.NumSlices,
		Seed:             req.Seed,
		ShuffleRowGroups: req.Shuffle.Enabled,
		Window:           int64(req.Shuffle.Window),
		Policy:           policy,
	})
	if err != nil {
		return nil, pipelineError(fmt.Errorf("transport: pipeline: plan %s: %w", strings.Join(req.Datasets, ", "), err))
	}
	pl := &pipelinePlan{req: req, ds: ds, plan: plan, refs: refs, cutIn: ds.Schema, cutOut: ds.Schema}
	if policy == batching.Pad {
		mask := req.Mask()
		if len(ds.Schema.FieldIndices(mask)) > 0 {
			return nil, fmt.Errorf("transport: pipeline: %w: the dataset already has a column %q, the mask column's name: set mask_column to another name or leave the column out of columns",
				ErrBadRequest, mask)
		}
		// Exactly the schema a Cutter derives (batching.Cutter.setSchema).
		md := ds.Schema.Metadata()
		fields := append(ds.Schema.Fields(), arrow.Field{Name: mask, Type: arrow.FixedWidthTypes.Boolean})
		pl.cutOut = arrow.NewSchema(fields, &md)
	}
	pl.schema = pl.cutOut
	if len(cols) > 0 {
		sh, err := shape.NewShaper(pl.cutOut, cols)
		if err != nil {
			return nil, pipelineError(fmt.Errorf("transport: pipeline: %w", err))
		}
		pl.shaper, pl.schema = sh, sh.Schema()
		pl.packed = slices.ContainsFunc(cols, func(c shape.Column) bool { return c.PackRatio > 0 })
	}
	return pl, nil
}

// shapingOf converts the request's columns into batching's shaping (only the
// columns that are shaped) and the fill values for the loader's nulls.
func shapingOf(req *Request) ([]shape.Column, map[string]float64, error) {
	var p problems
	var cols []shape.Column
	fills := map[string]float64{}
	packed := ""
	for i, c := range req.Columns {
		bc := shape.Column{Name: c.Name, Length: c.Length, PackRatio: c.PackRatio}
		dt, err := shape.ParseDType(c.DType)
		if err != nil {
			p.add("columns[%d] %q: dtype %q is unknown: %v", i, c.Name, c.DType, err)
		}
		bc.DType = dt
		switch c.Overflow {
		case "", "reject":
			bc.Overflow = shape.Reject
		case "truncate":
			bc.Overflow = shape.Truncate
		default:
			p.add("columns[%d] %q: overflow %q is unknown (want \"reject\" or \"truncate\")", i, c.Name, c.Overflow)
		}
		if len(c.Fill) > 0 {
			f, v, err := parseFill(c.Fill)
			if err != nil {
				p.add("columns[%d] %q: %v", i, c.Name, err)
			}
			bc.Fill = f
			fills[c.Name] = v
		}
		if c.PackRatio > 0 && packed == "" {
			packed = c.Name
		}
		if bc.DType != shape.Keep || bc.Length != 0 || c.Overflow != "" || bc.Fill.IsSet() || bc.PackRatio != 0 {
			cols = append(cols, bc)
		}
	}
	if packed != "" && req.LastBatch == LastBatchPad {
		p.add("column %q has pack_ratio %v, which last_batch \"pad\" does not support (packing changes the row count, so no per-row mask can describe a packed slice): use \"drop\" or \"raise\"",
			packed, req.Columns[slices.IndexFunc(req.Columns, func(c Column) bool { return c.Name == packed })].PackRatio)
	}
	if err := p.err("transport: pipeline", ErrBadRequest); err != nil {
		return nil, nil, err
	}
	return cols, fills, nil
}

// parseFill turns a request's fill (a JSON number, "nan", "inf" or "-inf")
// into a shape.Fill (integer literals stay integers) and its float64 value.
func parseFill(raw json.RawMessage) (shape.Fill, float64, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		switch s {
		case "nan":
			return shape.FillFloat(math.NaN()), math.NaN(), nil
		case "inf":
			return shape.FillFloat(math.Inf(1)), math.Inf(1), nil
		case "-inf":
			return shape.FillFloat(math.Inf(-1)), math.Inf(-1), nil
		}
		return shape.Fill{}, 0, fmt.Errorf("fill %q: want a number, \"nan\", \"inf\" or \"-inf\"", s)
	}
	var n json.Number
	if err := json.Unmarshal(raw, &n); err != nil {
		return shape.Fill{}, 0, fmt.Errorf("fill %s: want a number, \"nan\", \"inf\" or \"-inf\"", raw)
	}
	if i, err := strconv.ParseInt(n.String(), 10, 64); err == nil {
		return shape.FillInt(i), float64(i), nil
	}
	if u, err := strconv.ParseUint(n.String(), 10, 64); err == nil {
		return shape.FillUint(u), float64(u), nil
	}
	f, err := n.Float64()
	if err != nil {
		return shape.Fill{}, 0, fmt.Errorf("fill %s: %v", raw, err)
	}
	return shape.FillFloat(f), f, nil
}

// dataset opens (or takes from the cache) the dataset of patterns projected
// to cols.
func (p *Pipeline) dataset(ctx context.Context, patterns, cols []string, fills map[string]float64) (*loader.Dataset, error) {
	key, _ := json.Marshal(struct {
		P []string
		C []string
		F map[string]string
	}{patterns, cols, fillKey(fills)})
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
	ds, err := loader.Open(ctx, p.cfg.store, patterns, opts...)
	if err != nil {
		return nil, err
	}
	if p.cfg.cacheTTL > 0 {
		p.mu.Lock()
		for k, e := range p.cache {
			if !now.Before(e.expires) || len(p.cache) >= pipelineCacheSize {
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

// columnError marks a loader error about a requested column that the dataset
// lacks as a bad request (InvalidArgument, as docs/PROTOCOL.md says) rather
// than a schema mismatch between files.
func columnError(err error, cols []string) error {
	if errors.Is(err, loader.ErrColumnNotFound) {
		return fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	return err
}

// pipelineError wraps err with the sentinel of this package that gives its
// status code: loader.ErrNotFound -> NotFound; loader.ErrUnavailable ->
// Unavailable; corrupt, mismatched or unsupported files, nulls without fill,
// impossible plans and data that does not fit the requested shaping ->
// FailedPrecondition; shaping or configuration that the request got wrong ->
// InvalidArgument. Context errors and errors that already carry one of this
// package's sentinels are returned as they are.
func pipelineError(err error) error {
	if err == nil {
		return nil
	}
	for _, s := range []error{context.Canceled, context.DeadlineExceeded, ErrBadRequest, ErrNotFound,
		ErrUnavailable, ErrFailedPrecondition, ErrPermissionDenied} {
		if errors.Is(err, s) {
			return err
		}
	}
	for _, r := range pipelineRules {
		if errors.Is(err, r.target) {
			return fmt.Errorf("%w: %w", r.sentinel, err)
		}
	}
	return err
}

// pipelineRules maps loader and batching sentinels to this package's, in
// order of precedence.
var pipelineRules = []struct{ target, sentinel error }{
	{loader.ErrNotFound, ErrNotFound},
	{loader.ErrCorrupt, ErrFailedPrecondition},
	{loader.ErrSchemaMismatch, ErrFailedPrecondition},
	{loader.ErrNull, ErrFailedPrecondition},
	{loader.ErrUnsupported, ErrFailedPrecondition},
	{loader.ErrUnavailable, ErrUnavailable},
	{batching.ErrIndivisible, ErrFailedPrecondition},
	{batching.ErrNoSteps, ErrFailedPrecondition},
	{batching.ErrEmptyDataset, ErrFailedPrecondition},
	{batching.ErrInvalidPosition, ErrFailedPrecondition},
	{batching.ErrInvalidRowGroup, ErrFailedPrecondition},
	{shape.ErrOverflow, ErrFailedPrecondition},
	{shape.ErrTooLong, ErrFailedPrecondition},
	{shape.ErrPackOverflow, ErrFailedPrecondition},
	{shape.ErrNullList, ErrFailedPrecondition},
	{shape.ErrShape, ErrBadRequest},
	{batching.ErrInvalidConfig, ErrBadRequest},
	{batching.ErrInvalidPolicy, ErrBadRequest},
	{batching.ErrMaskColumnExists, ErrBadRequest},
}

// pipelineStream is one DoGet over a Pipeline.
type pipelineStream struct {
	pl     *pipelinePlan
	cfg    *pipelineConfig
	mem    memory.Allocator
	ctx    context.Context // the readers' context
	cancel context.CancelFunc
	pos    batching.Position // position of the next step
	slices []*sliceCut       // per request slice, for epoch pos.Epoch; nil between epochs
	closed bool
}

// sliceCut cuts one slice (stream d) of one epoch.
type sliceCut struct {
	d    int
	cut  *batching.Cutter
	rd   *loader.RowGroupReader // nil when the stream reads nothing
	refs []loader.RowGroupRef   // what rd reads, in order (to check what it returns)
	got  int                    // row groups taken from rd
}

// Schema implements Stream.
func (s *pipelineStream) Schema() *arrow.Schema { return s.pl.schema }

// openEpoch sets up, for every requested slice, the cutter and the reader of
// epoch s.pos.Epoch starting at step s.pos.Step.
func (s *pipelineStream) openEpoch() error {
	pl := s.pl
	for _, d := range pl.req.Slices {
		cut, err := batching.NewCutter(pl.plan, s.pos.Epoch, d, s.pos.Step, s.mem,
			batching.WithMaskColumn(pl.req.Mask()), batching.WithSchema(pl.cutIn))
		if err != nil {
			return pipelineError(fmt.Errorf("transport: pipeline: epoch %d step %d slice %d: %w", s.pos.Epoch, s.pos.Step, d, err))
		}
		sc := &sliceCut{d: d, cut: cut, refs: s.readRefs(d)}
		if len(sc.refs) > 0 {
			n := int64(len(pl.req.Slices))
			sc.rd = pl.ds.NewReader(s.ctx, sc.refs, s.mem,
				loader.WithReaderReadAhead(s.cfg.readAhead/n),
				loader.WithReaderDecodeWorkers(max(runtime.GOMAXPROCS(0)/int(n), 1)))
		}
		s.slices = append(s.slices, sc)
	}
	return nil
}

// readRefs returns the row groups that stream d's cutter will ask for from
// s.pos on: the plan's segments from ReadStart up to ReadEnd, as a Cutter's
// Wants names them. Nothing earlier is read.
func (s *pipelineStream) readRefs(d int) []loader.RowGroupRef {
	plan := s.pl.plan
	segs := plan.Stream(s.pos.Epoch, d)
	first, _, _ := plan.ReadStart(s.pos, d)
	end := plan.ReadEnd(d)
	var at int64 // stream row where segs[i] starts
	var refs []loader.RowGroupRef
	for i, seg := range segs {
		if at >= end {
			break
		}
		if i >= first {
			refs = append(refs, s.pl.refs[seg.RowGroup])
		}
		at += seg.Len()
	}
	return refs
}

// closeEpoch releases the cutters and readers of the current epoch.
func (s *pipelineStream) closeEpoch() {
	for _, sc := range s.slices {
		sc.cut.Release()
		if sc.rd != nil {
			sc.rd.Close()
		}
	}
	s.slices = nil
}

// Next implements Stream.
func (s *pipelineStream) Next(ctx context.Context) (arrow.RecordBatch, StepMeta, error) {
	if s.closed {
		return nil, StepMeta{}, errors.New("transport: pipeline: Next after Close")
	}
	if err := ctx.Err(); err != nil {
		return nil, StepMeta{}, err
	}
	stop := context.AfterFunc(ctx, s.cancel)
	defer stop()
	rec, meta, err := s.next()
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return nil, StepMeta{}, cerr
		}
		return nil, StepMeta{}, err
	}
	return rec, meta, nil
}

func (s *pipelineStream) next() (arrow.RecordBatch, StepMeta, error) {
	pl := s.pl
	if s.pos.Step >= pl.plan.StepsPerEpoch() {
		s.closeEpoch()
		s.pos = batching.Position{Epoch: s.pos.Epoch + 1}
	}
	if pl.req.Epochs > 0 && s.pos.Epoch >= pl.req.Epochs {
		s.closeEpoch()
		return nil, StepMeta{}, io.EOF
	}
	if s.slices == nil {
		if err := s.openEpoch(); err != nil {
			return nil, StepMeta{}, err
		}
	}
	meta := StepMeta{Epoch: s.pos.Epoch, Step: s.pos.Step, Slices: slices.Clone(pl.req.Slices), RealRows: make([]int, len(s.slices))}
	recs := make([]arrow.RecordBatch, len(s.slices))
	defer func() {
		for _, r := range recs {
			if r != nil {
				r.Release()
			}
		}
	}()
	if err := s.cutStep(recs, meta.RealRows); err != nil {
		return nil, StepMeta{}, err
	}
	if m := newMultiRecord(pl.schema, recs, s.mem); m != nil {
		recs = nil // m holds them now
		s.pos.Step++
		return m, meta, nil
	}
	out, err := concatRecords(pl.schema, recs, s.mem)
	if err != nil {
		return nil, StepMeta{}, fmt.Errorf("transport: pipeline: epoch %d step %d: concatenate slices: %w", s.pos.Epoch, s.pos.Step, err)
	}
	s.pos.Step++
	return out, meta, nil
}

// cutStep cuts (and shapes) the slices of step s.pos into recs and their
// real rows into real, one slice after the other. (Cutting them on one
// goroutine each was measured on 2 cores with BenchmarkServePipeline and
// did not help: the readers already decode ahead in the background and
// cutting views of decoded row groups is cheap.) On error, the records cut
// so far are left in recs for the caller to release.
func (s *pipelineStream) cutStep(recs []arrow.RecordBatch, real []int) error {
	for i, sc := range s.slices {
		var err error
		if recs[i], real[i], err = s.cutShaped(sc); err != nil {
			return err
		}
	}
	return nil
}

// cutShaped returns the next slice of sc's stream, shaped, and its real
// rows. Errors are wrapped with the step and slice and mapped to this
// package's sentinels.
func (s *pipelineStream) cutShaped(sc *sliceCut) (arrow.RecordBatch, int, error) {
	pl := s.pl
	rec, real, err := s.cutSlice(sc)
	if err != nil {
		return nil, 0, pipelineError(fmt.Errorf("transport: pipeline: epoch %d step %d slice %d: %w", s.pos.Epoch, s.pos.Step, sc.d, err))
	}
	if pl.shaper != nil {
		shaped, err := pl.shaper.Apply(rec, s.mem)
		rec.Release()
		if err != nil {
			b := pl.plan.SliceRows()
			return nil, 0, pipelineError(fmt.Errorf("transport: pipeline: epoch %d step %d slice %d (rows %d..%d of stream %d; the row named below counts from the slice's first row): %w",
				s.pos.Epoch, s.pos.Step, sc.d, s.pos.Step*b, (s.pos.Step+1)*b-1, sc.d, err))
		}
		rec = shaped
		if pl.packed {
			real = int(rec.NumRows()) // packed rows; drop and raise deliver full slices
		}
	}
	return rec, real, nil
}

// cutSlice returns the next slice of sc's stream, pushing the row groups its
// cutter asks for.
func (s *pipelineStream) cutSlice(sc *sliceCut) (arrow.RecordBatch, int, error) {
	for {
		rec, real, ok, err := sc.cut.Next()
		if err != nil {
			return nil, 0, err
		}
		if ok {
			return rec, real, nil
		}
		seg, want := sc.cut.Wants()
		if !want {
			return nil, 0, fmt.Errorf("stream %d: the cutter has no slice for step %d and wants no row group (done=%v)", sc.d, sc.cut.Step(), sc.cut.Done())
		}
		if sc.rd == nil || sc.got >= len(sc.refs) {
			return nil, 0, fmt.Errorf("stream %d: the cutter wants row group %d past the %d row groups read", sc.d, seg.RowGroup, len(sc.refs))
		}
		if err := s.ctx.Err(); err != nil {
			return nil, 0, err
		}
		rg, ref, err := sc.rd.Next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = fmt.Errorf("stream %d: reader ended after %d of %d row groups", sc.d, sc.got, len(sc.refs))
			}
			return nil, 0, err
		}
		sc.got++
		if exp := s.pl.refs[seg.RowGroup]; ref.File != exp.File || ref.Index != exp.Index {
			rg.Release()
			return nil, 0, fmt.Errorf("stream %d: read file %d row group %d, but the cutter wants file %d row group %d",
				sc.d, ref.File, ref.Index, exp.File, exp.Index)
		}
		err = sc.cut.Push(rg, seg)
		rg.Release()
		if err != nil {
			return nil, 0, fmt.Errorf("%s row group %d: %w", s.pl.ds.Files[ref.File].Object.URI, ref.Index, err)
		}
	}
}

// concatRecords returns the records as one record of schema: the record
// itself when there is one (no copy), else one concatenation per column.
func concatRecords(schema *arrow.Schema, recs []arrow.RecordBatch, mem memory.Allocator) (arrow.RecordBatch, error) {
	if len(recs) == 1 {
		r := recs[0]
		if !r.Schema().Equal(schema) {
			return nil, fmt.Errorf("slice schema %v differs from the stream's %v", r.Schema(), schema)
		}
		r.Retain()
		return r, nil
	}
	var rows int64
	for _, r := range recs {
		rows += r.NumRows()
	}
	cols := make([]arrow.Array, schema.NumFields())
	defer func() {
		for _, c := range cols {
			if c != nil {
				c.Release()
			}
		}
	}()
	arrs := make([]arrow.Array, len(recs))
	for j := range cols {
		for i, r := range recs {
			arrs[i] = r.Column(j)
		}
		c, err := array.Concatenate(arrs, mem)
		if err != nil {
			return nil, fmt.Errorf("column %q: %w", schema.Field(j).Name, err)
		}
		cols[j] = c
	}
	return array.NewRecordBatch(schema, cols, rows), nil
}

// Close implements Stream: it stops the readers and releases the cutters and
// everything they hold.
func (s *pipelineStream) Close() error {
	if s.closed {
		return nil
	}
	s.closed = true
	s.cancel()
	s.closeEpoch()
	return nil
}
