package feed

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/meshfeed/meshfeed/loader"
	"github.com/meshfeed/meshfeed/tokcount"
	"github.com/meshfeed/meshfeed/tokenize"
	"github.com/meshfeed/meshfeed/transport"
)

// The token-count index (package tokcount) that concatenated packing plans
// from: each file's counts come from the manifest the dataset was planned
// from (a fact `meshfeed index` stored), else from the Pipeline's
// tokcount.Store (by file identity and key), else they are counted here,
// tokenizing the column once on every core, and kept in the store.

// TokenCountStats counts where the token counts of the files planned came
// from.
type TokenCountStats struct {
	Stored  atomic.Int64 // files whose counts the manifest held
	Cached  atomic.Int64 // files whose counts the Pipeline's store held
	Counted atomic.Int64 // files tokenized to count them
}

// TokenCountStats returns the Pipeline's counters of token-count lookups.
func (p *Pipeline) TokenCountStats() *TokenCountStats { return &p.tokenStats }

// countsFit reports whether c has f's row groups, each with its rows.
func countsFit(c *tokcount.Counts, f *loader.File) bool {
	if len(c.RowGroups) != len(f.RowGroups) {
		return false
	}
	for i, rg := range c.RowGroups {
		if int64(len(rg)) != f.RowGroups[i].Rows {
			return false
		}
	}
	return true
}

// tokenCounts returns the counts of every file of ds (projected to at least
// key.Column), in ds.Files order.
func (p *Pipeline) tokenCounts(ctx context.Context, ds *loader.Dataset, tok *tokenize.Tokenizer, key tokcount.Key) ([]*tokcount.Counts, error) {
	ks := key.String()
	out := make([]*tokcount.Counts, len(ds.Files))
	var missing []int
	for fi, f := range ds.Files {
		if b, ok := ds.Fact(fi, tokcount.FactKind, ks); ok {
			if c, err := tokcount.Decode(b); err == nil && countsFit(c, f) {
				out[fi] = c
				p.tokenStats.Stored.Add(1)
				continue
			}
		}
		if c, ok := p.cfg.tokenCounts.Get(f.Object.CacheKey(), ks); ok && countsFit(c, f) {
			out[fi] = c
			p.tokenStats.Cached.Add(1)
			continue
		}
		missing = append(missing, fi)
	}
	if len(missing) == 0 {
		return out, nil
	}
	if err := countFiles(ctx, ds, tok, key, missing, out); err != nil {
		return nil, err
	}
	for _, fi := range missing {
		p.cfg.tokenCounts.Put(ds.Files[fi].Object.CacheKey(), ks, out[fi])
		p.tokenStats.Counted.Add(1)
	}
	return out, nil
}

// TokenCounts counts the tokens of every row of column in every file of ds
// (projected to at least that column), tokenizing it once on every core:
// one Counts per file, in ds.Files order. For `meshfeed index`.
func TokenCounts(ctx context.Context, ds *loader.Dataset, tok *tokenize.Tokenizer, column string, addSpecial bool) ([]*tokcount.Counts, error) {
	key := tokcount.Key{Tokenizer: tok.Hash(), Column: column, AddSpecial: addSpecial}
	files := make([]int, len(ds.Files))
	for i := range files {
		files[i] = i
	}
	out := make([]*tokcount.Counts, len(ds.Files))
	if err := countFiles(ctx, ds, tok, key, files, out); err != nil {
		return nil, err
	}
	return out, nil
}

// textColumn returns the index of column in ds's schema, refusing a column
// that is missing or not string or large_string.
func textColumn(ds *loader.Dataset, column string) (int, error) {
	idx := ds.Schema.FieldIndices(column)
	if len(idx) == 0 {
		return 0, fmt.Errorf("feed: %w: column %q is not in %s", transport.ErrBadRequest, column, ds.Files[0].Object.URI)
	}
	if id := ds.Schema.Field(idx[0]).Type.ID(); id != arrow.STRING && id != arrow.LARGE_STRING {
		return 0, fmt.Errorf("feed: %w: column %q of %s is %s: a tokenizer reads a string or large_string column",
			transport.ErrBadRequest, column, ds.Files[0].Object.URI, ds.Schema.Field(idx[0]).Type)
	}
	return idx[0], nil
}

// countFiles tokenizes key.Column of the files of ds listed in files and
// sets out[fi] to each one's counts.
func countFiles(ctx context.Context, ds *loader.Dataset, tok *tokenize.Tokenizer, key tokcount.Key, files []int, out []*tokcount.Counts) error {
	col, err := textColumn(ds, key.Column)
	if err != nil {
		return err
	}
	want := make(map[int]bool, len(files))
	for _, fi := range files {
		want[fi] = true
		out[fi] = &tokcount.Counts{RowGroups: make([][]int32, len(ds.Files[fi].RowGroups))}
	}
	var refs []loader.RowGroupRef
	for _, r := range ds.RowGroups() {
		if want[r.File] {
			refs = append(refs, r)
		}
	}
	rd := ds.NewReader(ctx, refs, memory.DefaultAllocator)
	defer rd.Close()
	var values []int32
	var offsets []int64
	for {
		rec, ref, err := rd.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		values, offsets, err = EncodeStrings(tok, rec.Column(col), key.AddSpecial, 0, values[:0], append(offsets[:0], 0))
		rec.Release()
		if err != nil {
			return textErrorAt(ds, ref, key.Column, err)
		}
		counts := make([]int32, len(offsets)-1)
		for i := range counts {
			counts[i] = int32(offsets[i+1] - offsets[i])
		}
		out[ref.File].RowGroups[ref.Index] = counts
	}
}

// textErrorAt names the file, row group, column and row of a tokenizing
// error of row group ref's rows [ref.Start, ...).
func textErrorAt(ds *loader.Dataset, ref loader.RowGroupRef, column string, err error) error {
	var te *TextError
	if errors.As(err, &te) {
		return fmt.Errorf("feed: %s row group %d column %q row %d byte %d: %w; fix or drop the row (pyarrow's to_pylist and the tokenizers library refuse it too)",
			ds.Files[ref.File].Object.URI, ref.Index, column, ref.Start+int64(te.Row), te.Byte, te.Err)
	}
	return fmt.Errorf("feed: %s row group %d column %q: %w", ds.Files[ref.File].Object.URI, ref.Index, column, err)
}
