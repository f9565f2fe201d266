package feed

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/meshfeed/meshfeed/filter"
	"github.com/meshfeed/meshfeed/loader"
)

// Selections stored in the dataset's manifest.
//
// `meshfeed manifest --filters` evaluates filters once per file and stores
// each file's selection as a fact of the manifest (kind
// filter.SelectionFactKind, key the predicate's canonical form). When a
// request is planned from that manifest, its selections are looked up there
// first (manifestSelections, chained before the Pipeline's store), so
// planning reads no filter column; a file without the fact, or whose fact
// was computed from another version of it, is evaluated as without a
// manifest. loader.Dataset.Fact states what the identity check guarantees.

// fileSelections returns the selection of every file of ds by pred: from
// the manifest's facts, the Pipeline's store, or computed (and then kept in
// the store).
func (p *Pipeline) fileSelections(ctx context.Context, pred *filter.Predicate, ds *loader.Dataset, keep *loader.Keeper) ([]*filter.FileSelection, error) {
	canon := pred.Canonical()
	store := newManifestSelections(ds, p.cfg.selections, &p.filterStats.Stored)
	fsels := make([]*filter.FileSelection, len(ds.Files))
	var missing []int
	for fi, f := range ds.Files {
		if fs, ok := store.Get(f.Object.CacheKey(), canon); ok && fits(fs, f) {
			fsels[fi] = fs
			p.filterStats.Cached.Add(1)
		} else {
			missing = append(missing, fi)
		}
	}
	if len(missing) > 0 {
		if err := p.planSelections(ctx, pred, ds, missing, fsels, keep); err != nil {
			return nil, err
		}
	}
	return fsels, nil
}

// fits reports whether fs has f's row groups, each with its rows.
func fits(fs *filter.FileSelection, f *loader.File) bool {
	if len(fs.RowGroups) != len(f.RowGroups) {
		return false
	}
	for i, s := range fs.RowGroups {
		if s.Rows() != f.RowGroups[i].Rows {
			return false
		}
	}
	return true
}

// manifestSelections is a filter.Store that answers from the facts of the
// manifest ds was planned from, then from next; Put goes to next (the
// manifest is read-only while serving).
type manifestSelections struct {
	ds    *loader.Dataset
	files map[string]int // Object.CacheKey -> index in ds.Files
	next  filter.Store
	hits  *atomic.Int64
}

// newManifestSelections chains ds's manifest before next (next alone when
// ds was not planned from a manifest).
func newManifestSelections(ds *loader.Dataset, next filter.Store, hits *atomic.Int64) filter.Store {
	if ds.PlanInfo().Manifest == "" {
		return next
	}
	files := make(map[string]int, len(ds.Files))
	for i, f := range ds.Files {
		files[f.Object.CacheKey()] = i
	}
	return &manifestSelections{ds: ds, files: files, next: next, hits: hits}
}

// Get implements filter.Store. A fact that does not decode, or does not fit
// the file's row groups, is passed over (the selection is then computed).
func (m *manifestSelections) Get(fileKey, predicate string) (*filter.FileSelection, bool) {
	if fi, ok := m.files[fileKey]; ok {
		if b, ok := m.ds.Fact(fi, filter.SelectionFactKind, predicate); ok {
			if fs, err := filter.DecodeFileSelection(b); err == nil && fits(fs, m.ds.Files[fi]) {
				m.hits.Add(1)
				return fs, true
			}
		}
	}
	return m.next.Get(fileKey, predicate)
}

// Put implements filter.Store.
func (m *manifestSelections) Put(fileKey, predicate string, fs *filter.FileSelection) {
	m.next.Put(fileKey, predicate, fs)
}

// FileSelections evaluates the filters (the ticket's JSON form) on every
// file of ds as a Pipeline plans them (statistics, dictionary pages and
// bloom filters first, then the filter columns of the row groups they leave
// undecided), with the loader's defaults: one selection per file, in
// ds.Files order, the predicate's canonical form (the key its selections
// are stored under), and how the row groups were decided. For `meshfeed
// manifest --filters`; a filter that keeps no row is not an error here.
func FileSelections(ctx context.Context, ds *loader.Dataset, filters []byte) ([]*filter.FileSelection, string, FilterCounts, error) {
	pred, err := filter.Parse(filters)
	if err != nil {
		return nil, "", FilterCounts{}, err
	}
	if err := checkFilterColumns(pred, ds); err != nil {
		return nil, "", FilterCounts{}, err
	}
	p, err := NewPipeline(ctx, WithStore(ds.Store()), WithCacheTTL(0))
	if err != nil {
		return nil, "", FilterCounts{}, err
	}
	defer p.Close()
	fsels, err := p.fileSelections(ctx, pred, ds, nil)
	if err != nil {
		return nil, "", FilterCounts{}, fmt.Errorf("feed: filters %s: %w", pred.Canonical(), err)
	}
	return fsels, pred.Canonical(), p.filterStats.counts(), nil
}

// counts is the row-group counters as FilterCounts.
func (fs *FilterStats) counts() FilterCounts {
	return FilterCounts{Pruned: fs.Pruned.Load(), DictPruned: fs.DictPruned.Load(), BloomPruned: fs.BloomPruned.Load(), Whole: fs.Whole.Load(), Evaluated: fs.Evaluated.Load(), Stored: fs.Stored.Load()}
}
