package loader

import (
	"context"
	"errors"
	"fmt"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/meshfeed/meshfeed/format"
	"github.com/meshfeed/meshfeed/manifest"
	"github.com/meshfeed/meshfeed/objstore"
)

// ManifestAuto is the WithManifest value that plans from the manifest at
// the dataset's default location when there is one (see WithManifest).
const ManifestAuto = "auto"

// WithManifest sets where Open finds the dataset's manifest (package
// manifest): "" (the default) plans from the footers; ManifestAuto looks
// for _meshfeed_manifest.parquet in the directory the patterns name (one
// Stat; all patterns must name the same directory) and uses it when it
// exists and names files matching every pattern, else plans from the
// footers and says why (PlanInfo.Reason); any other value is the
// manifest's URI, which must exist and name files matching every pattern.
// A manifest that is truncated, foreign or of another version is refused
// either way (ErrManifest). Planning from a manifest makes at most two
// store requests (a Stat and a read) and reads no footer: each file's
// identity is checked (a Stat), and its footer read, when it is first
// decoded; a file changed since is refused (ErrStale).
func WithManifest(uri string) Option { return func(c *config) { c.manifest = uri } }

// PlanInfo says how a Dataset was planned.
type PlanInfo struct {
	// Manifest is the URI of the manifest planning used; "" when planning
	// read the footers.
	Manifest string
	// Reason says why no manifest served when one was asked for (auto):
	// none at the default location, or it does not name the files.
	Reason string
	// Requests is the number of store requests planning made: lists,
	// stats and reads (a listing of many pages counts once).
	Requests int64
}

// PlanInfo says how the dataset was planned.
func (ds *Dataset) PlanInfo() PlanInfo { return ds.plan }

// manifestView is the files a manifest names as a store to match patterns
// on (objstore.Match): listing and stat answer from the manifest, nothing
// is read.
type manifestView struct{ m *manifest.Manifest }

func (v manifestView) List(_ context.Context, prefix string) ([]objstore.Object, error) {
	i, _ := slices.BinarySearchFunc(v.m.Files, prefix, func(f manifest.File, p string) int { return strings.Compare(f.URI, p) })
	var out []objstore.Object
	for ; i < len(v.m.Files) && strings.HasPrefix(v.m.Files[i].URI, prefix); i++ {
		out = append(out, v.m.Files[i].Object())
	}
	return out, nil
}

func (v manifestView) Stat(_ context.Context, uri string) (objstore.Object, error) {
	if f := v.m.Lookup(uri); f != nil {
		return f.Object(), nil
	}
	return objstore.Object{}, fmt.Errorf("%s: not in the manifest: %w", uri, objstore.ErrNotFound)
}

func (v manifestView) ReadAt(context.Context, objstore.Object, []byte, int64) error {
	return errors.New("loader: a manifest view reads nothing")
}

func (v manifestView) Close() error { return nil }

// dataExts are the extensions that make a pattern without a wildcard or a
// trailing slash a file (its directory holds the manifest) rather than a
// directory.
var dataExts = []string{".parquet", ".pq", ".arrow", ".feather", ".ipc", ".arrows"}

// DefaultManifestURI is where ManifestAuto looks for the manifest of
// patterns (see defaultManifestURI), or an error saying why there is no
// one place.
func DefaultManifestURI(patterns []string) (string, error) {
	u, reason := defaultManifestURI(patterns)
	if u == "" {
		return "", errors.New("loader: no default manifest location: " + reason)
	}
	return u, nil
}

// defaultManifestURI is where ManifestAuto looks for the manifest of
// patterns: the directory each names (a glob's literal directory, a file's
// directory, a directory itself), when they all name the same one.
func defaultManifestURI(patterns []string) (string, string) {
	dir := ""
	for i, p := range patterns {
		if !strings.Contains(p, "://") && !strings.HasPrefix(p, "/") {
			abs, err := filepath.Abs(strings.TrimPrefix(p, "file://"))
			if err != nil {
				return "", err.Error()
			}
			if strings.HasSuffix(p, "/") {
				abs += "/"
			}
			p = abs
		}
		var d string
		switch {
		case strings.ContainsAny(p, "*?[\\"):
			d = manifest.Dir(p[:strings.IndexAny(p, "*?[\\")])
		case strings.HasSuffix(p, "/"):
			d = p
		case slices.Contains(dataExts, strings.ToLower(path.Ext(p))):
			d = manifest.Dir(p)
		default:
			d = p + "/"
		}
		if i > 0 && d != dir {
			return "", fmt.Sprintf("the patterns name two directories (%s, %s): name the manifest", dir, d)
		}
		dir = d
	}
	if dir == "" {
		return "", "no directory to look in"
	}
	return manifest.DefaultURI(dir), ""
}

// openManifest plans patterns from a manifest (cfg.manifest): the dataset,
// or nil and why no manifest served (auto only), or an error.
func openManifest(ctx context.Context, store objstore.Store, cs *objstore.CountingStore, patterns []string, cfg config) (*Dataset, string, error) {
	auto := cfg.manifest == ManifestAuto
	muri := cfg.manifest
	var m *manifest.Manifest
	if auto {
		u, reason := defaultManifestURI(patterns)
		if u == "" {
			return nil, reason, nil
		}
		muri = u
		obj, err := cs.Stat(ctx, muri)
		if errors.Is(err, objstore.ErrNotFound) {
			return nil, "no manifest at " + muri, nil
		}
		if err != nil {
			// Planning from the footers says what is wrong with the files.
			return nil, fmt.Sprintf("manifest %s: %v", muri, err), nil
		}
		m, err = manifest.ReadObject(ctx, cs, obj)
		if err != nil {
			return nil, "", err
		}
	} else {
		var err error
		if m, err = manifest.Read(ctx, cs, muri); err != nil {
			return nil, "", fmt.Errorf("loader: the manifest named (%s): %w", muri, err)
		}
	}
	if m.Part != nil {
		return nil, "", fmt.Errorf("loader: %s is shard %d/%d of a manifest, not a whole one: %w; merge the parts (meshfeed manifest merge)", muri, m.Part.Shard, m.Part.Of, ErrManifest)
	}
	objs, err := objstore.Match(ctx, manifestView{m}, patterns)
	if err != nil {
		if auto {
			return nil, fmt.Sprintf("manifest %s does not name the files: %v", muri, err), nil
		}
		return nil, "", fmt.Errorf("loader: manifest %s does not name the files of the request: %v: %w; rebuild it for these patterns, or leave it out", muri, err, ErrManifest)
	}
	ds, err := datasetFromManifest(store, m, muri, objs, cfg)
	return ds, "", err
}

// plannedSchema is a manifest schema parsed once for every file that has
// it.
type plannedSchema struct {
	full *arrow.Schema
	out  []arrow.Field
	errs []manifest.Error
}

// datasetFromManifest is the dataset of the files objs that m names,
// planned from m alone.
func datasetFromManifest(store objstore.Store, m *manifest.Manifest, muri string, objs []objstore.Object, cfg config) (*Dataset, error) {
	schemas := make([]*plannedSchema, len(m.Schemas))
	files := make([]*File, len(objs))
	for i, o := range objs {
		e := m.Lookup(o.URI)
		ps := schemas[e.Schema]
		if ps == nil {
			s := m.Schemas[e.Schema]
			full, err := schemaFrom(s.Full)
			if err != nil {
				return nil, fmt.Errorf("loader: manifest %s schema %d: %v: %w", muri, e.Schema, err, ErrManifest)
			}
			out, err := schemaFrom(s.Output)
			if err != nil || out.NumFields() != full.NumFields() || len(s.Errors) != full.NumFields() {
				return nil, fmt.Errorf("loader: manifest %s schema %d: output fields do not match the schema (%v): %w", muri, e.Schema, err, ErrManifest)
			}
			ps = &plannedSchema{full: full, out: out.Fields(), errs: s.Errors}
			schemas[e.Schema] = ps
		}
		lf := &lazyFile{store: store, obj: e.Object(), entry: e, muri: muri, cfg: &cfg}
		ft := &manifestFooter{e: e, s: ps, lf: lf}
		f, err := newFile(e.Object(), ft)
		if err != nil {
			return nil, err
		}
		f.Format = formatOf(e.URI)
		if f.Format.String() != e.Format {
			return nil, fmt.Errorf("loader: manifest %s: %s is %s by its name but %s in the manifest: %w", muri, e.URI, f.Format, e.Format, ErrManifest)
		}
		files[i] = f
	}
	ds := &Dataset{Files: files, store: store, cfg: cfg, facts: m}
	if err := ds.project(); err != nil {
		return nil, err
	}
	return ds, nil
}

// manifestFooter is a file's footer as its manifest entry tells it
// (format.Footer): planning reads nothing; the file's own footer is read,
// after its identity is checked, when it is first decoded.
type manifestFooter struct {
	e  *manifest.File
	s  *plannedSchema
	lf *lazyFile
}

func (f *manifestFooter) Schema() *arrow.Schema { return f.s.full }

func (f *manifestFooter) RowGroups(proj []int) ([]format.RowGroupMeta, error) {
	out := make([]format.RowGroupMeta, len(f.e.RowGroups))
	for ri := range f.e.RowGroups {
		rg := &f.e.RowGroups[ri]
		out[ri].Rows = rg.Rows
		if f.e.Format == "arrow" {
			for _, b := range rg.Batch {
				out[ri].Chunks = append(out[ri].Chunks, format.Chunk{Offset: b.Offset, Length: b.Length})
				out[ri].Bytes += b.Length
			}
			out[ri].DecodedBytes = rg.Decoded
			continue
		}
		for _, j := range proj {
			cc := &rg.Columns[j]
			for _, c := range cc.Chunks {
				out[ri].Chunks = append(out[ri].Chunks, format.Chunk{Column: f.s.full.Field(j).Name, Offset: c.Offset, Length: c.Length})
				out[ri].Bytes += c.Length
			}
			out[ri].DecodedBytes += cc.Decoded
		}
	}
	return out, nil
}

func (f *manifestFooter) OutputField(j int) (arrow.Field, error) {
	return f.s.out[j], loadError(f.s.errs[j], f.e.URI)
}

func (f *manifestFooter) MayHoldNulls(name string) (bool, int64, bool) {
	for _, c := range f.e.Columns {
		if c.Name == name {
			return c.MayNull, c.Nulls, c.NullsKnown
		}
	}
	return false, 0, true
}

// Decoder refuses what the file's own Decoder would refuse (the errors the
// manifest recorded for each column under the options' fill values and
// nulls setting, in the same order), and returns a decoder that reads the
// file's footer when it first decodes.
func (f *manifestFooter) Decoder(src format.Source, proj []int, out []arrow.Field, o format.Options) (format.Decoder, error) {
	for _, j := range proj {
		c := &f.e.Columns[j]
		e := c.DecodeErr
		if _, ok := o.Fill[c.Name]; ok {
			e = c.FillErr
		}
		if err := loadError(e, f.e.URI); err != nil {
			return nil, err
		}
	}
	for _, j := range proj {
		c := &f.e.Columns[j]
		if _, ok := o.Fill[c.Name]; !ok && !o.NullsAsValidity {
			if err := loadError(c.NullErr, f.e.URI); err != nil {
				return nil, err
			}
		}
	}
	d := &lazyDecoder{f: f, src: src, proj: proj, out: out, o: o}
	if f.e.Format == "arrow" {
		return d, nil
	}
	return &lazyRanged{d}, nil
}

// lazyFile reads a manifest's file's footer once, when first needed,
// after checking that the file is still the one the manifest describes.
type lazyFile struct {
	store objstore.Store
	obj   objstore.Object
	entry *manifest.File
	muri  string
	cfg   *config

	mu sync.Mutex
	ft format.Footer
}

// footer checks the file's identity (a Stat) and reads its footer (through
// the footer cache); an error is not kept, so a later call tries again.
func (l *lazyFile) footer(ctx context.Context) (format.Footer, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ft != nil {
		return l.ft, nil
	}
	now, err := l.store.Stat(ctx, l.obj.URI)
	if err != nil {
		return nil, fmt.Errorf("loader: %s (named by manifest %s): %w", l.obj.URI, l.muri, err)
	}
	if d := l.entry.Identity().Diff(manifest.IdentityOf(now)); d != "" {
		return nil, fmt.Errorf("loader: %s changed since manifest %s was written (%s): %w; rebuild the manifest (meshfeed manifest) or plan without it",
			l.obj.URI, l.muri, d, ErrStale)
	}
	f, err := readFooter(ctx, l.store, l.obj, l.cfg)
	if err != nil {
		return nil, err
	}
	l.ft = f.footer
	return l.ft, nil
}

// lazyDecoder is the decoder of a file planned from a manifest: it
// prepares the file's own decoder on first use, after checking that the
// footer agrees with the manifest on the row groups' rows and ranges.
type lazyDecoder struct {
	f    *manifestFooter
	src  format.Source
	proj []int
	out  []arrow.Field
	o    format.Options

	mu  sync.Mutex
	dec format.Decoder
}

func (d *lazyDecoder) get(ctx context.Context) (format.Decoder, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.dec != nil {
		return d.dec, nil
	}
	ft, err := d.f.lf.footer(ctx)
	if err != nil {
		return nil, err
	}
	got, err := ft.RowGroups(d.proj)
	if err != nil {
		return nil, err
	}
	want, _ := d.f.RowGroups(d.proj)
	if i := firstDiff(got, want); i >= 0 {
		return nil, fmt.Errorf("loader: %s row group %d: the footer disagrees with manifest %s (rows or byte ranges): %w; rebuild the manifest",
			d.f.e.URI, i, d.f.lf.muri, ErrStale)
	}
	dec, err := ft.Decoder(d.src, d.proj, d.out, d.o)
	if err != nil {
		return nil, err
	}
	d.dec = dec
	return dec, nil
}

// prepare checks the file and prepares its decoder (before its bytes are
// fetched).
func (d *lazyDecoder) prepare(ctx context.Context) error {
	_, err := d.get(ctx)
	return err
}

// firstDiff is the first row group where a and b differ, or -1.
func firstDiff(a, b []format.RowGroupMeta) int {
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	for i := range a {
		if a[i].Rows != b[i].Rows || a[i].Bytes != b[i].Bytes || a[i].DecodedBytes != b[i].DecodedBytes || !slices.Equal(a[i].Chunks, b[i].Chunks) {
			return i
		}
	}
	return -1
}

func (d *lazyDecoder) DecodeRowGroup(ctx context.Context, rg int, ra format.Fetched, mem memory.Allocator) (arrow.RecordBatch, error) {
	dec, err := d.get(ctx)
	if err != nil {
		return nil, err
	}
	return dec.DecodeRowGroup(ctx, rg, ra, mem)
}

// lazyRanged is a lazyDecoder of a Parquet file: it decodes pieces, and
// answers the plan-time costs from the manifest.
type lazyRanged struct{ *lazyDecoder }

func (d *lazyRanged) ranged(ctx context.Context) (format.Ranged, error) {
	dec, err := d.get(ctx)
	if err != nil {
		return nil, err
	}
	r, ok := dec.(format.Ranged)
	if !ok {
		return nil, fmt.Errorf("loader: %s: the decoder reads no pieces: %w", d.f.e.URI, ErrStale)
	}
	return r, nil
}

func (d *lazyRanged) DecodeRange(ctx context.Context, p format.Piece) (arrow.RecordBatch, error) {
	r, err := d.ranged(ctx)
	if err != nil {
		return nil, err
	}
	return r.DecodeRange(ctx, p)
}

func (d *lazyRanged) Charge(ctx context.Context, p format.Piece) (int64, int64, error) {
	r, err := d.ranged(ctx)
	if err != nil {
		return 0, 0, err
	}
	return r.Charge(ctx, p)
}

func (d *lazyRanged) PageBreaks(ctx context.Context, p format.Piece) ([]int64, error) {
	r, err := d.ranged(ctx)
	if err != nil {
		return nil, err
	}
	return r.PageBreaks(ctx, p)
}

// cost is column i's (projection index) cost in row group rg: the
// nullable variant when the output field was made nullable.
func (d *lazyRanged) cost(i, rg int) manifest.Cost {
	j := d.proj[i]
	cc := &d.f.e.RowGroups[rg].Columns[j]
	if d.out[i].Nullable && !d.f.s.out[j].Nullable {
		return cc.NullableCost
	}
	return cc.Cost
}

func (d *lazyRanged) StreamedCost(rg int) (streamed, whole int64) {
	for i := range d.proj {
		c := d.cost(i, rg)
		streamed += c.Streamed
		whole += c.Whole
	}
	return streamed, whole
}

func (d *lazyRanged) RowBytes(rg int) float64 {
	var row float64
	for i := range d.proj {
		row += d.cost(i, rg).RowBytes
	}
	return row
}
