package format

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/parquet-go/parquet-go"
	pqformat "github.com/parquet-go/parquet-go/format"
)

// route is the decoder a Parquet column chunk takes.
type route int

const (
	// routeFastValues: the fast path (fastpath.go) for a fixed-width
	// primitive column (not bool), 8- and 16-bit integers stored as INT32
	// included (narrowed, checked, page by page).
	routeFastValues route = iota
	// routeFastFixedList: the fast path for a fixed_size_list of such
	// values (pieces copy their own rows out of the pages at their edges).
	routeFastFixedList
	// routeFastList: the fast path for a list of such values (offsets from
	// the repetition levels; lists of 8- and 16-bit integers are decoded as
	// INT32, then narrowed).
	routeFastList
	// routeEngine: parquet-go's page engine (decodeChunk, parquet_pages.go)
	// for every other column that colDecoder plans (dictionaries, nulls,
	// booleans, strings), and for a fast-path chunk whose pages turn out
	// not to qualify (a dictionary page, an encoding other than PLAIN, a
	// null or an empty list: errFallback).
	routeEngine
	// routeArrow: arrow-go's pqarrow (decodeFallback, parquet_fallback.go)
	// for the types colDecoder leaves to it (kindArrow: decimals, INT96,
	// times, structs, maps, nested lists), the codecs and encodings
	// parquet-go decodes wrongly (needsFallback: LZ4, LZ4_RAW, RLE
	// booleans), a chunk holding a v2 data page of no value, and (a retry)
	// a chunk whose nulls the other routes do not keep as validity
	// (ErrNull under WithNullsAsValidity: nulls inside lists).
	routeArrow
)

func (r route) String() string {
	switch r {
	case routeFastValues:
		return "fast values"
	case routeFastFixedList:
		return "fast fixed_size_list"
	case routeFastList:
		return "fast list"
	case routeEngine:
		return "parquet-go engine"
	case routeArrow:
		return "arrow-go"
	}
	return fmt.Sprintf("route(%d)", int(r))
}

// fast reports whether r is one of the fast path's routes.
func (r route) fast() bool { return r <= routeFastList }

// route returns the route column c's chunk with metadata md takes, by the
// column's layout and the chunk's codec (the fast routes' pages decide in
// the end: routeEngine takes those that do not qualify).
//
// parquet-go's engine stays beside arrow-go because it is faster on the
// columns it serves. BenchmarkPageEngine, one row group of 262,144 rows,
// snappy, v1 pages, medians of 5 (go test -run '^$' -bench
// BenchmarkPageEngine -benchtime 20x -count 5 ./format, 2 shared cores):
//
//	column                  engine    arrow-go  arrow-go/engine
//	dictionary int64        1.46 ms   1.84 ms   1.26x
//	dictionary string       5.60 ms  11.50 ms   2.05x
//	nullable int32, fill    2.38 ms   2.92 ms   1.23x
//	nullable int32, kept    2.89 ms   2.54 ms   0.88x
//	bool (PLAIN)            0.03 ms   0.05 ms   1.49x
//	plain string           11.45 ms  21.65 ms   1.89x
//
// and allocates less (a third of arrow-go's bytes for the nullable ints).
func (c *colDecoder) route(md *pqformat.ColumnMetaData) route {
	switch {
	case c.kind == kindArrow || needsFallback(md, c.phys == parquet.Boolean):
		return routeArrow
	case !c.streamEligible() || !fastCodec(md.Codec):
		return routeEngine
	case c.kind == kindList:
		return routeFastList
	case c.kind == kindFixedList:
		return routeFastFixedList
	}
	return routeFastValues
}

// chunkView is fetched bytes of a column chunk's pages, from a page header
// on: the whole chunk, or a run of its pages (a piece).
type chunkView struct {
	b     []byte
	codec pqformat.CompressionCodec
	first int64 // the row group's slot (c.slot) where the pages start: 0 for a whole chunk
	n     int64 // slots the pages hold: rows, or a fixed_size_list's values
	cut   bool  // list pages that may begin inside a row and end past their last (decodeFastListRows)
	// pages: b's pages as fastPages reads them, where a piece of the
	// row group read their headers before (Shared.fastPagesOf); nil: read
	// them from b.
	pages []fastPage
}

// fastPages returns v's pages as c reads them (colDecoder.fastPages), or
// those read before for v.
func (v chunkView) fastPages(c *colDecoder) ([]fastPage, error) {
	if v.pages != nil {
		return v.pages, nil
	}
	return c.fastPages(v.b, v.codec)
}

// rowRange is rows [lo, hi).
type rowRange struct{ lo, hi int64 }

// outSpec is where decoded values go and what they may cost.
type outSpec struct {
	mem      memory.Allocator
	maxBytes int64 // decoded bytes of one column chunk
	ed       edges // pages shared with the pieces beside this one; zero for a whole chunk
}

// decoded is what decodeRows made: a, rows [first, first+a.Len()) of the
// row group, holding the rows asked for (the caller slices when it holds
// more: the whole run of a primitive column's pages, kept for the next
// piece to slice, or the rows of list pages that could not be cut).
type decoded struct {
	a     arrow.Array
	first int64
}

// decodeRows decodes rows r (of the row group) of column c on the fast path
// from the pages of v, which hold them: a whole chunk is v.first 0, v.n
// its slots, r [0, rows); a piece is a run of the chunk's pages and a sub
// range. errFallback when the pages do not qualify (nothing is allocated;
// route says where the chunk goes then); ErrCorrupt when they qualify but
// do not add up.
func (c *colDecoder) decodeRows(v chunkView, r rowRange, o outSpec) (decoded, error) {
	switch c.kind {
	case kindPrimitive:
		if v.codec == pqformat.Uncompressed {
			// The piece's own rows: copying them out of the pages costs
			// what slicing pages decoded whole would, without holding the
			// pages' other rows for the next pieces.
			a, err := c.decodeFastRows(v, rowRange{r.lo - v.first, r.hi - v.first}, o)
			return decoded{a, r.lo}, err
		}
		// Every row of the pages, decompressed once: the next pieces slice
		// them.
		a, err := c.decodeFastRows(v, rowRange{0, v.n}, o)
		return decoded{a, v.first}, err
	case kindFixedList:
		if v.first == 0 && v.n == c.slot(r.hi-r.lo) && r.lo == 0 {
			a, err := c.decodeFastRows(chunkView{b: v.b, codec: v.codec, n: r.hi}, r, o)
			return decoded{a, 0}, err
		}
		a, err := c.decodeFixedListSlots(v, r, o)
		return decoded{a, r.lo}, err
	case kindList:
		fc := c
		if c.narrowed() { // lists are narrowed after decoding
			fc = c.wide()
		}
		var d decoded
		var err error
		if v.first == 0 && !v.cut && r.lo == 0 && r.hi == v.n { // a whole chunk
			d.a, err = fc.decodeFastListRows(v, o)
		} else {
			d, err = fc.decodeListPiece(v, rowRange{r.lo - v.first, r.hi - v.first}, o)
			d.first += v.first
		}
		if err == nil && fc != c {
			d.a, err = c.narrow(d.a, o.mem)
		}
		return d, err
	}
	return decoded{}, errFallback
}

// decodeColumn decodes the whole chunk of column c in row group rg from ra
// (which holds at least the chunk's fetched bytes) by its route. Errors
// name the file, row group and column.
func (d *parquetDecoder) decodeColumn(ctx context.Context, c *colDecoder, rg int, ra io.ReaderAt, mem memory.Allocator) (arrow.Array, error) {
	a, err := d.routeColumn(ctx, c, rg, ra, mem)
	if err != nil {
		return nil, fmt.Errorf("format: %s row group %d column %q: %w", d.uri, rg, c.name, err)
	}
	return a, nil
}

// routeColumn is decodeColumn without the error's context.
func (d *parquetDecoder) routeColumn(ctx context.Context, c *colDecoder, rg int, ra io.ReaderAt, mem memory.Allocator) (arrow.Array, error) {
	rows := d.rows(rg)
	cm := &d.pf.Metadata().RowGroups[rg].Columns[c.leaf].MetaData
	// Nulls the fast path and the engine do not keep (inside lists):
	// arrow-go keeps them as validity.
	keepNulls := func(a arrow.Array, err error) (arrow.Array, error) {
		if err != nil && c.keep && errors.Is(err, ErrNull) {
			return d.decodeFallback(ctx, c, rg, ra, mem)
		}
		return a, err
	}
	rt := c.route(cm)
	if rt != routeArrow {
		// The fast path and the engine both decode fetched bytes whose page
		// headers the one walk has checked; a chunk not fetched into memory
		// goes to the engine, which reads it through ra.
		b, ok := chunkBytes(ra, cm)
		var emptyV2 bool
		var err error
		if ok {
			emptyV2, err = walkPages(b, cm, d.maxBytes)
		}
		switch {
		case !ok:
			rt = routeEngine
		case err != nil:
			return nil, err
		case emptyV2: // parquet-go cannot decode a v2 page of 0 values: arrow-go does
			rt = routeArrow
		case rt.fast():
			v := chunkView{b: b, codec: cm.Codec, n: c.slot(rows)}
			out, err := c.decodeRows(v, rowRange{0, rows}, outSpec{mem: mem, maxBytes: d.maxBytes})
			if err != errFallback {
				return keepNulls(out.a, err)
			}
			rt = routeEngine
		}
	}
	switch rt {
	case routeEngine:
		fcc, ok := d.pf.RowGroups()[rg].ColumnChunks()[c.leaf].(*parquet.FileColumnChunk)
		if !ok {
			return nil, fmt.Errorf("unexpected chunk type %T", d.pf.RowGroups()[rg].ColumnChunks()[c.leaf])
		}
		return keepNulls(c.decodeChunk(fcc, ra, rows, mem, d.maxBytes))
	case routeArrow:
		return d.decodeFallback(ctx, c, rg, ra, mem)
	case routeFastValues, routeFastFixedList, routeFastList:
		panic("format: fast route left undecided") // the fast routes return or become routeEngine above
	}
	panic(fmt.Sprintf("format: unknown %v", rt))
}

// chunkBytes returns the fetched bytes of the chunk with metadata cm, when
// ra holds them in memory.
func chunkBytes(ra io.ReaderAt, cm *pqformat.ColumnMetaData) ([]byte, bool) {
	sr, ok := ra.(Fetched)
	if !ok {
		return nil, false
	}
	off, n := chunkRange(cm)
	return sr.BytesAt(off, n)
}
