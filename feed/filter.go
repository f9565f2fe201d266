package feed

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"sync/atomic"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/meshfeed/meshfeed/batching"
	"github.com/meshfeed/meshfeed/filter"
	"github.com/meshfeed/meshfeed/loader"
	"github.com/meshfeed/meshfeed/objstore"
	"github.com/meshfeed/meshfeed/transport"
)

// Filters: which rows of the dataset the plan numbers.
//
// A request's filters (package filter) are applied when the request is
// planned: row groups whose footer statistics rule every row out are dropped
// (never read), row groups whose statistics say every row matches are kept
// whole, and the rest have their filter columns (and only those) decoded
// once, the predicate evaluated, and the kept rows recorded as a
// filter.Selection. Selections are kept in the Pipeline's filter.Store by
// file identity and predicate, so that a later request (DoGet after
// GetFlightInfo, every process of a job, a resume) plans without reading.
// The plan (batching) then sees each kept row group with Rows = its kept
// rows: N, steps per epoch and every slice's rows are known before the
// epoch, on every process, as without filters. Streams read their row
// groups (or pieces: the physical rows spanning the piece's kept rows) as
// before and take the kept rows right after decoding (selectRows), before
// cutting; a row group whose rows are one run is sliced without a copy.
// Where a filter column is also delivered, a single dataset's plan keeps
// what it fetched of it in the Pipeline's loader.HeldChunks, and the
// stream's readers take it from there (selectRowGroupsKeeping, claimHeld):
// the column is read once per row group (DESIGN.md, "Filters", step 5).

// FilterStats counts the planning work of filters since the Pipeline was
// made. Fields are updated atomically.
type FilterStats struct {
	// Files whose selection came from the store (Cached) or was computed
	// (Planned); Stored of Cached: from the facts of the dataset's manifest.
	Cached, Planned, Stored atomic.Int64
	// RowGroups ruled out by the footers (Pruned; DictPruned of them by a
	// dictionary page, BloomPruned by a bloom filter), kept whole by them
	// (Whole), or whose filter columns were decoded and evaluated
	// (Evaluated).
	Pruned, DictPruned, BloomPruned, Whole, Evaluated atomic.Int64
	// DecodedBytes is the filter columns' bytes fetched to evaluate them.
	DecodedBytes atomic.Int64
}

// FilterStats returns the Pipeline's filter planning counters.
func (p *Pipeline) FilterStats() *FilterStats { return &p.filterStats }

// WithSelectionStore sets where the rows kept by filters are cached, by
// file identity and predicate. Default: a filter.MemoryStore of
// filter.DefaultStoreBytes (least recently used selections evicted).
func WithSelectionStore(s filter.Store) Option {
	return func(c *pipelineConfig) { c.selections = s }
}

// selectRowGroups returns the row groups of ds that pred keeps, with their
// selections (same indices; nil: every row), reading filter columns where
// statistics do not decide.
func (p *Pipeline) selectRowGroups(ctx context.Context, pred *filter.Predicate, ds *loader.Dataset) ([]loader.RowGroupRef, []*filter.Selection, error) {
	return p.selectRowGroupsWith(ctx, pred, ds, nil)
}

// selectRowGroupsKeeping is selectRowGroups for a stream of ds that follows
// (a single dataset's plan): the filter columns it reads that ds delivers
// are kept in the Pipeline's HeldChunks for that stream's readers, which
// then take them from memory instead of storage (heldClaims).
func (p *Pipeline) selectRowGroupsKeeping(ctx context.Context, pred *filter.Predicate, ds *loader.Dataset) ([]loader.RowGroupRef, []*filter.Selection, error) {
	var cols []string
	for _, c := range pred.Columns() {
		if len(ds.Schema.FieldIndices(c)) > 0 {
			cols = append(cols, c)
		}
	}
	return p.selectRowGroupsWith(ctx, pred, ds, p.cfg.held.NewKeeper(cols...))
}

// selectRowGroupsWith is selectRowGroups keeping with keep (nil: nothing).
func (p *Pipeline) selectRowGroupsWith(ctx context.Context, pred *filter.Predicate, ds *loader.Dataset, keep *loader.Keeper) ([]loader.RowGroupRef, []*filter.Selection, error) {
	if err := checkFilterColumns(pred, ds); err != nil {
		return nil, nil, err
	}
	canon := pred.Canonical()
	fsels, err := p.fileSelections(ctx, pred, ds, keep)
	if err != nil {
		return nil, nil, err
	}
	var refs []loader.RowGroupRef
	var sels []*filter.Selection
	for _, r := range ds.RowGroups() {
		sel := fsels[r.File].RowGroups[r.Index]
		if sel.Count() == 0 && r.Rows > 0 {
			continue
		}
		refs = append(refs, r)
		if sel.All() {
			sel = nil
		}
		sels = append(sels, sel)
	}
	if len(refs) == 0 {
		return nil, nil, fmt.Errorf("feed: %w: the filters %s keep no rows of the %d files of %s: nothing to plan; loosen the filters",
			batching.ErrEmptyDataset, canon, len(ds.Files), ds.Files[0].Object.URI)
	}
	return refs, sels, nil
}

// checkFilterColumns refuses a filter on a column some file of ds lacks.
func checkFilterColumns(pred *filter.Predicate, ds *loader.Dataset) error {
	for _, f := range ds.Files {
		for _, col := range pred.Columns() {
			if len(f.Schema.FieldIndices(col)) == 0 {
				return fmt.Errorf("feed: %w: filters: column %q not found in %s (columns: %s); fix the filter's column name",
					transport.ErrBadRequest, col, f.Object.URI, schemaNames(f.Schema))
			}
		}
	}
	return nil
}

func schemaNames(s *arrow.Schema) string {
	names := make([]string, s.NumFields())
	for i, f := range s.Fields() {
		names[i] = f.Name
	}
	return strings.Join(names, ", ")
}

// planSelections computes the selections of the files ds.Files[missing],
// stores them in the Pipeline's store and in fsels. The filter columns are
// opened as a dataset of their own (footers from the cache, nulls kept as
// nulls, no fill), so that they need not be among the delivered columns.
func (p *Pipeline) planSelections(ctx context.Context, pred *filter.Predicate, ds *loader.Dataset, missing []int, fsels []*filter.FileSelection, keep *loader.Keeper) error {
	objs := make([]objstore.Object, len(missing))
	for i, fi := range missing {
		objs[i] = ds.Files[fi].Object
	}
	opts := append(append([]loader.Option(nil), p.cfg.loadOpts...), loader.WithColumns(pred.Columns()...), loader.WithNullsAsValidity())
	fds, err := loader.OpenObjects(ctx, ds.Store(), objs, opts...)
	if err != nil {
		return fmt.Errorf("feed: filters: %w", err)
	}
	// The files share the filter columns' types (OpenObjects checks it):
	// bound once, an error names the first file.
	bound, err := filter.Bind(pred, fds.Schema)
	if err != nil {
		return fmt.Errorf("feed: filters on %s: %w: %w", fds.Files[0].Object.URI, transport.ErrBadRequest, err)
	}
	for i, f := range fds.Files {
		fs, err := p.fileSelection(ctx, fds, i, bound, keep)
		if err != nil {
			return err
		}
		p.cfg.selections.Put(f.Object.CacheKey(), pred.Canonical(), fs)
		fsels[missing[i]] = fs
		p.filterStats.Planned.Add(1)
	}
	return nil
}

// fileSelection computes the selection of file fi of fds (the filter
// columns' dataset): statistics first, then the filter columns of the row
// groups they leave undecided, read with a reader of their own, which
// keeps their bytes with keep (nil: none) for the stream, except those of
// the row groups the filter keeps no row of (never read again).
func (p *Pipeline) fileSelection(ctx context.Context, fds *loader.Dataset, fi int, bound *filter.Bound, keep *loader.Keeper) (*filter.FileSelection, error) {
	f := fds.Files[fi]
	fs := &filter.FileSelection{RowGroups: make([]*filter.Selection, len(f.RowGroups))}
	var undecided []loader.RowGroupRef
	for ri, rg := range f.RowGroups {
		v, err := p.pruneRowGroup(ctx, fds, fi, ri, bound)
		if err != nil {
			return nil, fmt.Errorf("feed: filters: %w", err)
		}
		switch v {
		case filter.None:
			fs.RowGroups[ri], _ = filter.NewSelection(rg.Rows, nil)
			p.filterStats.Pruned.Add(1)
		case filter.All:
			fs.RowGroups[ri] = filter.AllRows(rg.Rows)
			p.filterStats.Whole.Add(1)
		default:
			undecided = append(undecided, loader.RowGroupRef{File: fi, Index: ri, Rows: rg.Rows, Bytes: rg.Bytes})
		}
	}
	if len(undecided) == 0 {
		return fs, nil
	}
	readAhead, unreserve, err := p.reserveFilterRead(ctx, fds, fi, undecided)
	if err != nil {
		return nil, err
	}
	defer unreserve()
	rd := fds.NewReader(ctx, undecided, p.cfg.mem,
		loader.WithReaderReadAhead(readAhead),
		loader.WithReaderDecodeWorkers(runtime.GOMAXPROCS(0)),
		loader.WithReaderKeep(keep))
	defer rd.Close() // before unreserve: the reader's memory is returned first
	for range undecided {
		rec, ref, err := rd.Next()
		if errors.Is(err, io.EOF) {
			err = fmt.Errorf("feed: filters: %s: reader ended early", f.Object.URI)
		}
		if err != nil {
			return nil, fmt.Errorf("feed: filters: %w", err)
		}
		sel, err := bound.Eval(rec)
		rec.Release()
		if err != nil {
			return nil, fmt.Errorf("feed: filters on %s row group %d: %w", f.Object.URI, ref.Index, err)
		}
		fs.RowGroups[ref.Index] = sel
		if sel.Count() == 0 {
			p.cfg.held.Drop(f.Object, ref.Index)
		}
		p.filterStats.Evaluated.Add(1)
	}
	p.filterStats.DecodedBytes.Add(rd.Stats().FetchedBytes.Load())
	return fs, nil
}

// reserveFilterRead takes from the server's memory account (--memory-budget)
// what reading the filter columns of the row groups undecided of file fi
// holds: the reader's read-ahead (the server's, at most what those row
// groups cost; one row group even when larger), plus the row group being
// evaluated and its masks (a byte per row, three times). Where that does not
// fit now, it waits for the least that evaluates them (no read-ahead: one
// row group fetched while the one before is evaluated), for at most the
// server's idle timeout, as a stream's reservation does (reserveBytes). It
// returns the reader's read-ahead and the function that returns the bytes.
func (p *Pipeline) reserveFilterRead(ctx context.Context, fds *loader.Dataset, fi int, undecided []loader.RowGroupRef) (int64, func(), error) {
	var sum, most, rows int64
	for _, r := range undecided {
		m := fds.Files[fi].RowGroups[r.Index]
		c := m.Bytes + m.DecodedBytes
		sum += c
		most, rows = max(most, c), max(rows, m.Rows)
	}
	readAhead := min(max(p.cfg.readAhead, loader.DefaultReadAhead), sum)
	held := most + 3*rows // the record evaluated, and Eval's masks
	mem := p.serverLimits().Memory
	if mem == nil {
		return readAhead, func() {}, nil
	}
	if n := max(readAhead, most) + held; mem.TryReserve(n) {
		return readAhead, func() { mem.Unreserve(n) }, nil
	}
	n := most + held
	what := fmt.Sprintf("filters: evaluating the filter columns of %s (%d row groups, the largest %d bytes compressed plus decoded)",
		fds.Files[fi].Object.URI, len(undecided), most)
	if err := p.reserveBytes(ctx, n, what); err != nil {
		return 0, nil, err
	}
	return 0, func() { mem.Unreserve(n) }, nil
}

// pruneRowGroup is the footer's verdict on row group ri of file fi: its
// statistics, then, where they leave it undecided, the dictionary pages of
// the columns of ==, !=, in and not in terms (one ranged read each; a chunk
// with a data page not dictionary-encoded has none usable), then their bloom
// filters (for == and in).
//
// Length: the three steps in order, each a short loop.
func (p *Pipeline) pruneRowGroup(ctx context.Context, fds *loader.Dataset, fi, ri int, bound *filter.Bound) (filter.Verdict, error) {
	stats := map[string]filter.ColumnStats{}
	defer func() {
		for _, st := range stats {
			for _, a := range []arrow.Array{st.MinMax, st.Dict} {
				if a != nil {
					a.Release()
				}
			}
		}
	}()
	of := func(col string) filter.ColumnStats {
		if st, ok := stats[col]; ok {
			return st
		}
		st := filter.ColumnStats{Rows: fds.Files[fi].RowGroups[ri].Rows}
		if cs, ok := fds.ColumnStats(fi, ri, col, memory.DefaultAllocator); ok {
			st.Nulls, st.NullsKnown, st.MinMax = cs.Nulls, cs.NullsKnown, cs.MinMax
		}
		stats[col] = st
		return st
	}
	v := bound.Prune(of)
	cols := bound.DictColumns()
	if v != filter.Some || len(cols) == 0 {
		return v, nil
	}
	for _, col := range cols {
		dict, ok, err := fds.ColumnDictionary(ctx, fi, ri, col, memory.DefaultAllocator)
		if err != nil {
			return filter.Some, err
		}
		if ok {
			st := of(col)
			st.Dict = dict
			stats[col] = st
		}
	}
	if v = bound.Prune(of); v == filter.None {
		p.filterStats.DictPruned.Add(1)
	}
	if v != filter.Some {
		return v, nil
	}
	for _, col := range cols {
		bloom, err := fds.ColumnBloom(ctx, fi, ri, col)
		if err != nil {
			return filter.Some, err
		}
		if bloom != nil {
			st := of(col)
			st.Bloom = bloom
			stats[col] = st
		}
	}
	if v = bound.Prune(of); v == filter.None {
		p.filterStats.BloomPruned.Add(1)
	}
	return v, nil
}

// FilterCounts says how the row groups of a dataset were decided: ruled
// out by their statistics (Pruned), kept whole by them (Whole), or read and
// evaluated (Evaluated).
type FilterCounts struct {
	Pruned      int64 `json:"pruned"`
	DictPruned  int64 `json:"dictionary_pruned"` // of Pruned, by a dictionary page
	BloomPruned int64 `json:"bloom_pruned"`      // of Pruned, by a bloom filter
	Whole       int64 `json:"whole"`
	Evaluated   int64 `json:"evaluated"`
	// Stored is the files whose selection the dataset's manifest held
	// (meshfeed manifest --filters): their row groups are not counted above.
	Stored int64 `json:"stored_files,omitempty"`
}

// FilterRowGroups returns the row groups of ds that the filters (the
// ticket's JSON form) keep, each with Rows set to its kept rows: what a
// Pipeline plans with (for `meshfeed plan --filters`), and how they were
// decided. Selections are computed as a Pipeline does, with the loader's
// defaults, and not kept.
func FilterRowGroups(ctx context.Context, ds *loader.Dataset, filters []byte) ([]loader.RowGroupRef, FilterCounts, error) {
	pred, err := filter.Parse(filters)
	if err != nil {
		return nil, FilterCounts{}, err
	}
	p, err := NewPipeline(ctx, WithStore(ds.Store()), WithCacheTTL(0))
	if err != nil {
		return nil, FilterCounts{}, err
	}
	defer p.Close()
	refs, sels, err := p.selectRowGroups(ctx, pred, ds)
	if err != nil {
		return nil, FilterCounts{}, err
	}
	for i, s := range sels {
		if s != nil {
			refs[i].Rows = s.Count()
		}
	}
	return refs, p.filterStats.counts(), nil
}
