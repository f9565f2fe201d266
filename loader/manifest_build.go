package loader

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/ipc"

	"github.com/meshfeed/meshfeed/format"
	"github.com/meshfeed/meshfeed/manifest"
	"github.com/meshfeed/meshfeed/objstore"
)

// BuildManifest matches patterns on store, reads the footers of the
// matched files (concurrently, bounded, cached, as Open does) and returns
// their manifest. With of > 0 it reads only shard shard of of (the files
// whose index in the sorted match is shard modulo of) and returns a part
// for manifest.Merge. Of opts it uses the footer settings (concurrency,
// cache, read length, decode cap); projection and fill values do not
// matter: the manifest holds every column.
func BuildManifest(ctx context.Context, store objstore.Store, patterns []string, shard, of int, opts ...Option) (*manifest.Manifest, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	if of < 0 || (of > 0 && (shard < 0 || shard >= of)) {
		return nil, fmt.Errorf("loader: shard %d of %d: want 0 <= shard < of", shard, of)
	}
	objs, err := objstore.Match(ctx, store, patterns)
	if err != nil {
		return nil, err
	}
	sortObjects(objs)
	m := &manifest.Manifest{}
	if of > 0 {
		m.Part = &manifest.Part{Shard: shard, Of: of, Patterns: append([]string(nil), patterns...)}
		var mine []objstore.Object
		for i, o := range objs {
			if i%of == shard {
				mine = append(mine, o)
			}
		}
		objs = mine
	}
	files := make([]manifest.File, len(objs))
	schemas := make([]manifest.Schema, len(objs))
	errs := make([]error, len(objs))
	sem := make(chan struct{}, cfg.footerWorkers)
	var wg sync.WaitGroup
	for i := range objs {
		wg.Add(1)
		sem <- struct{}{}
		go func(i int) {
			defer wg.Done()
			defer func() { <-sem }()
			f, err := readFooter(ctx, store, objs[i], &cfg)
			if err == nil {
				files[i], schemas[i], err = manifestEntry(f, &cfg)
			}
			errs[i] = err
		}(i)
	}
	wg.Wait()
	if err := joinFileErrors(errs); err != nil {
		return nil, err
	}
	for i := range files {
		m.AddFile(files[i], schemas[i])
	}
	if err := m.Finish(); err != nil {
		return nil, err
	}
	return m, nil
}

// manifestEntry is the manifest entry of the opened file f and its schema.
func manifestEntry(f *File, cfg *config) (manifest.File, manifest.Schema, error) {
	uri := f.Object.URI
	id := manifest.IdentityOf(f.Object)
	e := manifest.File{URI: uri, Size: id.Size, ModTimeNs: id.ModTimeNs, Generation: id.Generation, ETag: id.ETag,
		Format: f.Format.String(), Rows: f.NumRows}
	sch := f.Schema
	var s manifest.Schema
	outs := make([]arrow.Field, sch.NumFields())
	for j := range outs {
		out, err := f.footer.OutputField(j)
		if err != nil {
			out = arrow.Field{Name: sch.Field(j).Name, Type: arrow.Null, Nullable: true}
		}
		outs[j] = out
		s.Errors = append(s.Errors, storeError(err, uri))
	}
	var err error
	if s.Full, err = schemaBytes(sch); err != nil {
		return e, s, fmt.Errorf("loader: %s: manifest schema: %w", uri, err)
	}
	if s.Output, err = schemaBytes(arrow.NewSchema(outs, nil)); err != nil {
		return e, s, fmt.Errorf("loader: %s: manifest schema: %w", uri, err)
	}
	all, err := f.footer.RowGroups(nil)
	if err != nil {
		return e, s, err
	}
	e.RowGroups = make([]manifest.RowGroup, len(all))
	for ri, rg := range all {
		e.RowGroups[ri].Rows = rg.Rows
	}
	if f.Format == ArrowIPC {
		batches, err := f.footer.RowGroups([]int{})
		if err != nil {
			return e, s, err
		}
		for ri, rg := range batches {
			for _, c := range rg.Chunks {
				e.RowGroups[ri].Batch = append(e.RowGroups[ri].Batch, manifest.Chunk{Offset: c.Offset, Length: c.Length, NullCount: -1})
			}
			e.RowGroups[ri].Decoded = rg.DecodedBytes
		}
	}
	for j := range outs {
		col, err := columnEntry(f, j, outs[j], s.Errors[j].Kind != "", cfg)
		if err != nil {
			return e, s, err
		}
		e.Columns = append(e.Columns, col.Column)
		if f.Format == Parquet {
			for ri := range e.RowGroups {
				e.RowGroups[ri].Columns = append(e.RowGroups[ri].Columns, col.chunks[ri])
			}
		}
	}
	return e, s, nil
}

// columnFacts are one field's entries: its file-level facts and its chunk
// in each row group.
type columnFacts struct {
	manifest.Column
	chunks []manifest.ColumnChunk
}

// columnEntry computes field j's facts in file f (out: its output field;
// outErr: OutputField refused it, so no decoder is prepared).
//
// Length: the decoders of the three option variants, then per row group
// the ranges, statistics and costs, in one pass.
func columnEntry(f *File, j int, out arrow.Field, outErr bool, cfg *config) (columnFacts, error) {
	uri := f.Object.URI
	name := f.Schema.Field(j).Name
	c := columnFacts{Column: manifest.Column{Name: name}}
	c.MayNull, c.Nulls, c.NullsKnown = f.footer.MayHoldNulls(name)
	src := objSource{obj: f.Object}
	base := cfg.formatOptions()
	base.Fill, base.NullsAsValidity = nil, false
	variant := func(fill, keep bool, fld arrow.Field) (format.Decoder, error) {
		o := base
		if fill {
			o.Fill = map[string]float64{name: 0}
		}
		o.NullsAsValidity = keep
		return f.footer.Decoder(src, []int{j}, []arrow.Field{fld}, o)
	}
	var dec, decN format.Decoder
	if !outErr {
		var err error
		dec, err = variant(false, true, out)
		c.DecodeErr = storeError(err, uri)
		_, err = variant(true, false, out)
		c.FillErr = storeError(err, uri)
		if dec != nil {
			_, err = variant(false, false, out)
			c.NullErr = storeError(err, uri)
			decN = dec
			if c.MayNull {
				decN, _ = variant(false, true, format.NullableField(out, c.Nulls, c.NullsKnown))
			}
		}
	}
	if f.Format != Parquet {
		return c, nil
	}
	rgs, err := f.footer.RowGroups([]int{j})
	if err != nil {
		return c, err
	}
	c.chunks = make([]manifest.ColumnChunk, len(rgs))
	for ri, rg := range rgs {
		cc := &c.chunks[ri]
		cc.Decoded = rg.DecodedBytes
		stats := format.FieldStats(f.footer, ri, j)
		for k, ch := range rg.Chunks {
			mc := manifest.Chunk{Offset: ch.Offset, Length: ch.Length, NullCount: -1}
			if k < len(stats) {
				mc.NullCount, mc.Min, mc.Max = stats[k].NullCount, stats[k].Min, stats[k].Max
			}
			cc.Chunks = append(cc.Chunks, mc)
		}
		cc.Cost = costOf(dec, ri)
		cc.NullableCost = costOf(decN, ri)
	}
	return c, nil
}

func costOf(d format.Decoder, rg int) manifest.Cost {
	r, ok := d.(format.Ranged)
	if !ok {
		return manifest.Cost{}
	}
	s, w := r.StreamedCost(rg)
	return manifest.Cost{Streamed: s, Whole: w, RowBytes: r.RowBytes(rg)}
}

// schemaBytes serializes s as an Arrow IPC stream holding only the schema.
func schemaBytes(s *arrow.Schema) ([]byte, error) {
	var buf bytes.Buffer
	w := ipc.NewWriter(&buf, ipc.WithSchema(s))
	if err := w.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// schemaFrom reads what schemaBytes wrote.
func schemaFrom(b []byte) (*arrow.Schema, error) {
	r, err := ipc.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	defer r.Release()
	return r.Schema(), nil
}

// errorKinds are the sentinels a stored error keeps, by name.
var errorKinds = []struct {
	name string
	err  error
}{
	{"unsupported", ErrUnsupported},
	{"corrupt", ErrCorrupt},
	{"null", ErrNull},
	{"schema", ErrSchemaMismatch},
	{"column", ErrColumnNotFound},
}

// storeError is err as a manifest stores it: its kind and its message with
// the file's URI replaced by a placeholder.
func storeError(err error, uri string) manifest.Error {
	if err == nil {
		return manifest.Error{}
	}
	kind := "other"
	for _, k := range errorKinds {
		if errors.Is(err, k.err) {
			kind = k.name
			break
		}
	}
	return manifest.Error{Kind: kind, Message: strings.ReplaceAll(err.Error(), uri, manifest.FilePlaceholder)}
}

// storedError is an error a manifest recorded, raised again: the same
// message (for the file's current URI) and sentinel.
type storedError struct {
	msg  string
	kind error
}

func (e *storedError) Error() string { return e.msg }
func (e *storedError) Unwrap() error { return e.kind }

// loadError is e for the file at uri, or nil when e records none.
func loadError(e manifest.Error, uri string) error {
	if e.Kind == "" {
		return nil
	}
	se := &storedError{msg: strings.ReplaceAll(e.Message, manifest.FilePlaceholder, uri), kind: ErrCorrupt}
	for _, k := range errorKinds {
		if k.name == e.Kind {
			se.kind = k.err
		}
	}
	if e.Kind == "other" {
		se.kind = errOther
	}
	return se
}

// errOther is the sentinel of a stored error of no known kind.
var errOther = errors.New("error recorded by the manifest")
