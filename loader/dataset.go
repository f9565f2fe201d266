package loader

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"sync"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/meshfeed/meshfeed/format"
	"github.com/meshfeed/meshfeed/objstore"
)

// Format is a file format the loader decodes.
type Format int

const (
	// Parquet files (.parquet and anything else that is not Arrow IPC).
	Parquet Format = iota
	// ArrowIPC files: the Arrow IPC file format (Feather v2, .arrow, .feather).
	ArrowIPC
)

// String returns "parquet" or "arrow".
func (f Format) String() string {
	switch f {
	case Parquet:
		return "parquet"
	case ArrowIPC:
		return "arrow"
	default:
		return fmt.Sprintf("Format(%d)", int(f))
	}
}

// formatOf picks the format from the object name.
func formatOf(uri string) Format {
	switch strings.ToLower(path.Ext(uri)) {
	case ".arrow", ".feather", ".ipc", ".arrows":
		return ArrowIPC
	default:
		return Parquet
	}
}

// Chunk is the byte range of one projected column chunk of a row group.
type Chunk = format.Chunk

// RowGroupMeta describes one row group from the footer alone.
type RowGroupMeta = format.RowGroupMeta

// File is one planned file: its object, full schema and row groups.
type File struct {
	Object objstore.Object
	Format Format
	// Schema is the file's full Arrow schema (before projection).
	Schema *arrow.Schema
	// RowGroups in file order. For Arrow IPC files a row group is one record
	// batch.
	RowGroups []RowGroupMeta
	// NumRows is the sum of the row groups' rows.
	NumRows int64

	footer format.Footer
}

// RowGroupRef names one row group of a Dataset, in dataset order, or a row
// range of it.
type RowGroupRef struct {
	File  int   // index into Dataset.Files
	Index int   // row group index within the file
	Rows  int64 // rows in the row group
	Bytes int64 // projected compressed bytes
	// Start and End are the rows [Start, End) of the row group to read; both
	// 0 (the zero value) means the whole row group. A RowGroupReader reads
	// a range that is not the whole row group as a piece: only the pages of
	// those rows where it can (see the package's caveats).
	Start, End int64
}

// Dataset is the planned set of files: sorted by URI, footers read, schemas
// checked. It is immutable (but for the pages its readers share, pageShares)
// and safe for concurrent use.
type Dataset struct {
	Files []*File
	// Schema is the projected output schema, the same for every file.
	Schema *arrow.Schema

	store    objstore.Store
	cfg      config
	decoders []format.Decoder
	plan     PlanInfo
	facts    factSource // the manifest planned from (Fact); nil: footers
	shares   pageShares // the pages its readers keep decompressed, per row group
}

// Open matches patterns on store, reads every footer (concurrently, bounded,
// cached), projects and checks the schemas, and returns the plan-ready
// dataset. No data page is read.
//
// With WithManifest, the files and their facts come from the dataset's
// manifest instead, when it serves (see WithManifest); PlanInfo says which
// way planning went and how many store requests it made.
func Open(ctx context.Context, store objstore.Store, patterns []string, opts ...Option) (*Dataset, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	cs := objstore.NewCountingStore(store)
	reason := ""
	if cfg.manifest != "" {
		ds, why, err := openManifest(ctx, store, cs, patterns, cfg)
		if err != nil {
			return nil, err
		}
		if ds != nil {
			ds.plan = PlanInfo{Manifest: manifestURIOf(cfg, patterns), Requests: cs.Requests()}
			return ds, nil
		}
		reason = why
	}
	objs, err := objstore.Match(ctx, cs, patterns)
	if err != nil {
		return nil, err
	}
	ds, err := openObjects(ctx, cs, store, objs, cfg)
	if err != nil {
		return nil, err
	}
	ds.plan = PlanInfo{Reason: reason, Requests: cs.Requests()}
	return ds, nil
}

// manifestURIOf is the manifest planning used under cfg.
func manifestURIOf(cfg config, patterns []string) string {
	if cfg.manifest == ManifestAuto {
		u, _ := defaultManifestURI(patterns)
		return u
	}
	return cfg.manifest
}

// OpenObjects is Open over an explicit object list (sorted here by URI).
// It reads the footers (WithManifest does not apply).
func OpenObjects(ctx context.Context, store objstore.Store, objs []objstore.Object, opts ...Option) (*Dataset, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	cs := objstore.NewCountingStore(store)
	ds, err := openObjects(ctx, cs, store, objs, cfg)
	if err != nil {
		return nil, err
	}
	ds.plan = PlanInfo{Requests: cs.Requests()}
	return ds, nil
}

// openObjects reads the footers of objs through plan (which may count the
// requests) and returns the dataset reading from store.
func openObjects(ctx context.Context, plan, store objstore.Store, objs []objstore.Object, cfg config) (*Dataset, error) {
	if len(objs) == 0 {
		return nil, fmt.Errorf("loader: no files to open: %w", ErrNotFound)
	}
	objs = append([]objstore.Object(nil), objs...)
	sortObjects(objs)

	files := make([]*File, len(objs))
	errs := make([]error, len(objs))
	sem := make(chan struct{}, cfg.footerWorkers)
	var wg sync.WaitGroup
	for i := range objs {
		wg.Add(1)
		sem <- struct{}{}
		go func(i int) {
			defer wg.Done()
			defer func() { <-sem }()
			files[i], errs[i] = readFooter(ctx, plan, objs[i], &cfg)
		}(i)
	}
	wg.Wait()
	if err := joinFileErrors(errs); err != nil {
		return nil, err
	}

	ds := &Dataset{Files: files, store: store, cfg: cfg}
	if err := ds.project(); err != nil {
		return nil, err
	}
	return ds, nil
}

// maxFileErrors is how many files' errors an error of OpenObjects names.
const maxFileErrors = 3

// joinFileErrors joins the errors of the files that failed to open (nil
// entries are files that opened): errors.Join of them when there are at
// most maxFileErrors, else one error naming the count and the first few,
// so that its message stays short however many files fail. errors.Is and
// errors.As see every one.
func joinFileErrors(errs []error) error {
	var failed []error
	for _, e := range errs {
		if e != nil {
			failed = append(failed, e)
		}
	}
	if len(failed) <= maxFileErrors {
		return errors.Join(failed...)
	}
	return &fileErrors{errs: failed, total: len(errs)}
}

// fileErrors is the error of many files that failed to open.
type fileErrors struct {
	errs  []error
	total int
}

func (e *fileErrors) Error() string {
	first := make([]string, maxFileErrors)
	for i := range first {
		first[i] = e.errs[i].Error()
	}
	return fmt.Sprintf("loader: %d of %d files failed to open, the first %d: %s", len(e.errs), e.total, maxFileErrors, strings.Join(first, "; "))
}

func (e *fileErrors) Unwrap() []error { return e.errs }

func sortObjects(objs []objstore.Object) {
	slices.SortFunc(objs, func(a, b objstore.Object) int { return strings.Compare(a.URI, b.URI) })
}

// readFooter reads (or takes from the cache) the footer of one object.
func readFooter(ctx context.Context, store objstore.Store, obj objstore.Object, cfg *config) (*File, error) {
	if obj.Size == 0 {
		return nil, fmt.Errorf("loader: %s: empty object (0 bytes): %w; remove it or regenerate the file", obj.URI, ErrCorrupt)
	}
	if ft, ok := cfg.footerCache.Get(obj); ok {
		return newFile(obj, ft)
	}
	var ft format.Footer
	var err error
	src := objSource{store: store, obj: obj}
	switch formatOf(obj.URI) {
	case ArrowIPC:
		ft, err = format.ReadIPCFooter(ctx, src, cfg.formatOptions())
	default:
		ft, err = format.ReadParquetFooter(ctx, src, cfg.formatOptions())
	}
	if err != nil {
		return nil, err
	}
	cfg.footerCache.Put(obj, ft)
	return newFile(obj, ft)
}

func newFile(obj objstore.Object, ft format.Footer) (*File, error) {
	f := &File{Object: obj, Format: formatOf(obj.URI), Schema: ft.Schema(), footer: ft}
	rgs, err := ft.RowGroups(nil)
	if err != nil {
		return nil, err
	}
	for _, rg := range rgs {
		f.NumRows += rg.Rows
	}
	f.RowGroups = rgs
	return f, nil
}

// project resolves the projected columns in every file, checks that their
// output fields agree, and prepares the decoders.
func (ds *Dataset) project() error {
	first := ds.Files[0]
	cols := ds.cfg.columns
	if len(cols) == 0 {
		for _, f := range first.Schema.Fields() {
			cols = append(cols, f.Name)
		}
	}
	var fields []arrow.Field
	var projs [][]int
	ds.decoders = make([]format.Decoder, len(ds.Files))
	for fi, f := range ds.Files {
		proj := make([]int, len(cols))
		for i, name := range cols {
			idx := f.Schema.FieldIndices(name)
			if len(idx) == 0 && fi == 0 {
				return fmt.Errorf("loader: %s: column %q not found (columns: %s); drop it from the projection: %w",
					f.Object.URI, name, fieldNames(f.Schema), ErrColumnNotFound)
			}
			if len(idx) == 0 {
				return fmt.Errorf("loader: %s: column %q not found (columns: %s), but %s has it; drop it from the projection or fix the file: %w",
					f.Object.URI, name, fieldNames(f.Schema), first.Object.URI, ErrSchemaMismatch)
			}
			proj[i] = idx[0]
		}
		out := make([]arrow.Field, len(cols))
		for i, j := range proj {
			fld, err := f.footer.OutputField(j)
			if err != nil {
				return fmt.Errorf("loader: %s column %q: %w", f.Object.URI, cols[i], err)
			}
			out[i] = fld
		}
		if fi == 0 {
			fields = out
		} else {
			for i := range out {
				if !arrow.TypeEqual(out[i].Type, fields[i].Type) {
					return fmt.Errorf("loader: column %q is %s in %s but %s in %s; rewrite one of them or leave the column out: %w",
						cols[i], fields[i].Type, first.Object.URI, out[i].Type, f.Object.URI, ErrSchemaMismatch)
				}
			}
		}
		projs = append(projs, proj)
	}
	if ds.cfg.validity {
		markNullable(ds.Files, cols, fields, ds.cfg.fill)
	}
	for fi, f := range ds.Files {
		rgs, err := f.footer.RowGroups(projs[fi])
		if err != nil {
			return err
		}
		f.RowGroups = rgs
		dec, err := f.footer.Decoder(objSource{store: ds.store, obj: f.Object}, projs[fi], fields, ds.cfg.formatOptions())
		if err != nil {
			return err
		}
		ds.decoders[fi] = dec
	}
	ds.Schema = arrow.NewSchema(fields, nil)
	return nil
}

// markNullable makes the output fields of Parquet columns without a fill
// value nullable where some file's footers leave room for a null, with
// metadata meshfeed.null_count: the total over the files, or "unknown".
func markNullable(files []*File, cols []string, fields []arrow.Field, fill map[string]float64) {
	for i, name := range cols {
		if _, ok := fill[name]; ok {
			continue
		}
		anyMay, total, allKnown := false, int64(0), true
		for _, f := range files {
			may, n, known := f.footer.MayHoldNulls(name)
			anyMay = anyMay || may
			total += n
			allKnown = allKnown && known
		}
		if !anyMay {
			continue
		}
		fields[i] = format.NullableField(fields[i], total, allKnown)
	}
}

func fieldNames(s *arrow.Schema) string {
	names := make([]string, len(s.Fields()))
	for i, f := range s.Fields() {
		names[i] = f.Name
	}
	return strings.Join(names, ", ")
}

// NumRows is the total number of rows in the dataset.
func (ds *Dataset) NumRows() int64 {
	var n int64
	for _, f := range ds.Files {
		n += f.NumRows
	}
	return n
}

// RowGroups lists every row group in dataset order: files by URI, row groups
// in file order.
func (ds *Dataset) RowGroups() []RowGroupRef {
	var refs []RowGroupRef
	for fi, f := range ds.Files {
		for ri, rg := range f.RowGroups {
			refs = append(refs, RowGroupRef{File: fi, Index: ri, Rows: rg.Rows, Bytes: rg.Bytes})
		}
	}
	return refs
}

// Store returns the store the dataset reads from.
func (ds *Dataset) Store() objstore.Store { return ds.store }
