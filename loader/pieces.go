package loader

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/parquet-go/parquet-go/format"

	"github.com/meshfeed/meshfeed/internal/arrowmem"
)

// Pieces: a row range of a row group read and decoded by itself, so that a
// reader never holds more than a bounded part of a large row group.
//
// A column is streamed (only the pages holding the range are fetched and
// decoded) when the fast path (fastpath.go) decodes it: fixed-width values
// and lists of them, PLAIN pages, no dictionary, no nulls, codec none,
// snappy, zstd or gzip. Its pages are located with the column chunk's
// offset index when the file has one (one small read; the page locations
// and first rows), else by walking the page headers in bounded windows
// (pageWindow bytes at a time), which finds the rows of every page of a
// primitive or fixed_size_list column and of v2 pages; a list column's v1
// pages, whose headers count values, not rows, are placed by their
// repetition levels, read one page at a time (for SNAPPY from the start of
// the page alone; ZSTD and GZIP pages are decompressed into a pooled
// buffer). A piece fetches at most one page more per column at each end,
// and for a list whose v1 pages are cut inside rows (as arrow-go writes
// them) also the pages that end its last row. Of the pages cutting the
// range's edges, a piece of a fixed-size list column copies its own rows'
// values alone, and a compressed page it ends inside is kept decompressed
// for the row group's next piece, which starts there (edges); a primitive
// column's pages are decoded whole, and kept for the next piece to slice
// where its rows lie inside them (decodedPages: it then fetches nothing;
// an int64 id of 65,536 rows is one page). A piece of a list column holds
// its rows' values alone where the levels can be read apart from the values
// (uncompressed and SNAPPY v1 pages, v2 pages), not its pages'.
//
// Every other column (dictionary-encoded, nullable, booleans, strings,
// arrow-go's fallback types, and Arrow IPC batches) is decoded whole, once
// per row group and reader, and the reader's pieces of that row group are
// slices of it; its whole size is charged to the read-ahead budget with the
// first piece of its row group (cost), and it stays in memory until the last
// piece of the row group has been decoded and every piece record released.

// rgEntry is what one reader keeps of a row group while it reads pieces of
// it: the page locations of streamed columns and the whole decoded columns
// of the others, shared by the pieces and released after the last one.
type rgEntry struct {
	mu      sync.Mutex
	left    int               // pieces not decoded yet
	locs    map[int][]pageLoc // per column: nil slice when the column is not streamed
	cols    map[int]arrow.Array
	rec     arrow.RecordBatch    // a whole record (formats without streaming)
	charged map[int]bool         // columns (-1: the whole record) whose whole size was charged (pieceCharge)
	pin     int64                // bytes this entry holds pinned in the reader's budget
	extra   int64                // bytes decoded whole that pieceCost did not foresee
	decoded map[int]decodedPages // per streamed column: the pages its last piece decoded
	edges   map[int]edgePage     // per streamed column of lists or fixed-size lists: the page its last piece ended in
}

// edgePage is a page a piece decompressed whole and ended inside: the
// next piece of its row group starts in it. Page is its index in the
// column's pages; buf (pooled) what decompressing it gave.
type edgePage struct {
	page int
	buf  []byte
}

// takeEdge hands over the decompressed page of column col with index page,
// if the last piece kept it: the caller owns buf (putBuf when done).
func (e *rgEntry) takeEdge(col, page int) []byte {
	e.mu.Lock()
	defer e.mu.Unlock()
	p, ok := e.edges[col]
	if !ok || p.page != page {
		return nil
	}
	delete(e.edges, col)
	return p.buf
}

// keepEdge keeps buf, page page of column col decompressed, for the next
// piece (returning the one kept before to the pool).
func (e *rgEntry) keepEdge(col, page int, buf []byte) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.edges == nil {
		e.edges = map[int]edgePage{}
	}
	if old, ok := e.edges[col]; ok {
		putBuf(old.buf)
	}
	e.edges[col] = edgePage{page: page, buf: buf}
}

// decodedPages is a column's pages as a piece decoded them: rows [first,
// first+rows) of the row group, of which the piece kept a slice. A later
// piece whose rows lie inside them slices the same array instead of
// decoding those pages again (a chunk of a few pages holds many pieces of
// a narrow column: an int64 id of 65,536 rows is one page).
type decodedPages struct {
	a           arrow.Array
	first, rows int64
}

// reuse returns rows [start, end) of column col from the pages an earlier
// piece decoded, or nil when they do not hold them all.
func (e *rgEntry) reuse(col int, start, end int64) arrow.Array {
	e.mu.Lock()
	defer e.mu.Unlock()
	p, ok := e.decoded[col]
	if !ok || start < p.first || end > p.first+p.rows {
		return nil
	}
	return array.NewSlice(p.a, start-p.first, end-p.first)
}

// keep records a, rows [first, first+rows) of column col, as the pages its
// row group's next piece may reuse (in place of the ones kept before).
func (e *rgEntry) keep(col int, a arrow.Array, first, rows int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.decoded == nil {
		e.decoded = map[int]decodedPages{}
	}
	if old, ok := e.decoded[col]; ok {
		old.a.Release()
	}
	a.Retain()
	e.decoded[col] = decodedPages{a: a, first: first, rows: rows}
}

func (e *rgEntry) release() {
	for _, a := range e.cols {
		a.Release()
	}
	e.cols = nil
	for _, p := range e.decoded {
		p.a.Release()
	}
	e.decoded = nil
	for _, p := range e.edges {
		putBuf(p.buf)
	}
	e.edges = nil
	if e.rec != nil {
		e.rec.Release()
		e.rec = nil
	}
}

// span returns the rows [start, end) that ref names: its Start and End, or
// the whole row group when End is 0.
func (ref RowGroupRef) span() (start, end int64) {
	if ref.End == 0 && ref.Start == 0 {
		return 0, ref.Rows
	}
	return ref.Start, ref.End
}

// whole reports whether ref names all rows of its row group.
func (ref RowGroupRef) whole() bool {
	s, e := ref.span()
	return s == 0 && e == ref.Rows
}

// streamedCost returns, for row group rg of file fi, the bytes (compressed
// plus decoded, from the footer) of the columns a piece streams and of
// those it decodes whole.
func (ds *Dataset) streamedCost(fi, rg int) (streamed, whole int64) {
	meta := ds.Files[fi].RowGroups[rg]
	d, ok := ds.decoders[fi].(*parquetDecoder)
	if !ok {
		return 0, meta.Bytes + meta.DecodedBytes
	}
	cols := d.pf.Metadata().RowGroups[rg].Columns
	for i := range d.cols {
		c := &d.cols[i]
		var n int64
		for _, leaf := range c.leaves {
			if leaf < len(cols) {
				n += cols[leaf].MetaData.TotalCompressedSize + cols[leaf].MetaData.TotalUncompressedSize
			}
		}
		if d.mayStream(c, rg) {
			streamed += n
		} else {
			whole += n
		}
	}
	return streamed, whole
}

// PieceCost returns what reading rows [start, end) of row group ref costs
// the read-ahead budget on its own (compressed plus decoded bytes, from the
// footer): the rows' share of the columns streamed plus the whole size of
// the columns decoded whole (see the package's caveats).
func (ds *Dataset) PieceCost(ref RowGroupRef, start, end int64) int64 {
	streamed, whole := ds.streamedCost(ref.File, ref.Index)
	if ref.Rows <= 0 {
		return streamed + whole
	}
	return ceilDiv(streamed*(end-start), ref.Rows) + whole
}

// StreamedRowBytes returns the most bytes per row (compressed plus decoded)
// of the streamed columns over the dataset's row groups, and the most bytes
// of any row group's columns decoded whole: a piece of n rows costs at most
// n times the first plus the second.
func (ds *Dataset) StreamedRowBytes() (perRow float64, whole int64) {
	for fi, f := range ds.Files {
		for rg, m := range f.RowGroups {
			if m.Rows == 0 {
				continue
			}
			s, w := ds.streamedCost(fi, rg)
			perRow = max(perRow, float64(s)/float64(m.Rows))
			whole = max(whole, w)
		}
	}
	return perRow, whole
}

// ArrowRowBytes returns the most bytes per row that the dataset's decoded
// records hold in Arrow memory (what a consumer that keeps rows, such as a
// shuffle window, holds per row): exact for fixed-width columns, the
// chunks' uncompressed size per row for the others.
func (ds *Dataset) ArrowRowBytes() float64 {
	var most float64
	for fi, f := range ds.Files {
		d, ok := ds.decoders[fi].(*parquetDecoder)
		for rg, m := range f.RowGroups {
			if m.Rows == 0 {
				continue
			}
			if !ok {
				most = max(most, float64(m.DecodedBytes)/float64(m.Rows))
				continue
			}
			cols := d.pf.Metadata().RowGroups[rg].Columns
			var row float64
			for i := range d.cols {
				c := &d.cols[i]
				switch {
				case (c.kind == kindPrimitive || c.kind == kindFixedList) && c.elemSize > 0:
					row += float64(c.elemSize * max(c.listSize, 1))
				case (c.kind == kindPrimitive || c.kind == kindFixedList) && c.elemSize == 0:
					row += float64(max(c.listSize, 1)) / 8
				default:
					for _, leaf := range c.leaves {
						if leaf < len(cols) {
							row += float64(cols[leaf].MetaData.TotalUncompressedSize) / float64(m.Rows)
						}
					}
				}
			}
			most = max(most, row)
		}
	}
	return most
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// mayStream reports whether column c of row group rg qualifies for
// streaming by its footer metadata (the pages decide in the end).
func (d *parquetDecoder) mayStream(c *colDecoder, rg int) bool {
	md := &d.pf.Metadata().RowGroups[rg].Columns[c.leaf].MetaData
	if !c.route(md).fast() || md.DictionaryPageOffset != 0 {
		return false
	}
	for _, e := range md.Encoding {
		switch e {
		case format.Plain, format.RLE, format.BitPacked:
		default:
			return false
		}
	}
	if md.Statistics.NullCount > 0 {
		return false
	}
	return true
}

// pieceCharge returns what reading rows [start, end) of row group ref
// charges the read-ahead budget (see RowGroupReader.pieceCost): cost for
// the pages of the streamed columns, pin for the columns decoded whole not
// yet charged for this entry. It locates the streamed columns' pages (once
// per entry).
func (ds *Dataset) pieceCharge(ctx context.Context, ref RowGroupRef, start, end int64, stats *ReadStats, e *rgEntry) (cost, pin int64, err error) {
	meta := ds.Files[ref.File].RowGroups[ref.Index]
	d, ok := ds.decoders[ref.File].(*parquetDecoder)
	charge := func(col int, n int64) {
		e.mu.Lock()
		defer e.mu.Unlock()
		if e.charged == nil {
			e.charged = map[int]bool{}
		}
		if !e.charged[col] {
			e.charged[col] = true
			e.pin += n
			pin += n
		}
	}
	if !ok {
		charge(-1, meta.Bytes+meta.DecodedBytes)
		return 0, pin, nil
	}
	cols := d.pf.Metadata().RowGroups[ref.Index].Columns
	for i := range d.cols {
		c := &d.cols[i]
		var comp, dec int64
		for _, leaf := range c.leaves {
			if leaf < len(cols) {
				comp += cols[leaf].MetaData.TotalCompressedSize
				dec += cols[leaf].MetaData.TotalUncompressedSize
			}
		}
		if d.mayStream(c, ref.Index) {
			locs, err := d.pages(ctx, ds, ref.Index, i, stats, e)
			if err != nil {
				return 0, 0, err
			}
			if locs != nil {
				a, b := pageSpan(locs, c.slot(start), c.slot(end))
				if a < b {
					slots := locs[b-1].first + locs[b-1].rows - locs[a].first
					t := pageTail(locs, b)
					cost += locs[t-1].off + locs[t-1].size - locs[a].off
					if all := c.slot(meta.Rows); all > 0 {
						cost += ceilDiv(dec*slots, all)
					}
					continue
				}
			}
		}
		charge(i, comp+dec)
	}
	return cost, pin, nil
}

// readPiece reads rows [start, end) of row group ref into a record.
func (ds *Dataset) readPiece(ctx context.Context, ref RowGroupRef, p piece) (arrow.RecordBatch, error) {
	start, end, mem, stats, e := p.rows.lo, p.rows.hi, p.mem, p.stats, p.e
	d, ok := ds.decoders[ref.File].(*parquetDecoder)
	if !ok {
		e.mu.Lock()
		defer e.mu.Unlock()
		if e.rec == nil {
			rec, err := ds.readRowGroup(ctx, ref.File, ref.Index, mem, stats)
			if err != nil {
				return nil, err
			}
			e.rec = rec
		}
		return slicePiece(e.rec, start, end, ds.Files[ref.File].Object.URI, ref.Index)
	}
	p.rg = ref.Index
	return d.decodeRange(ctx, ds, p)
}

// decodeRange decodes rows [start, end) of row group rg: streamed columns
// from the pages that hold those rows, the others from their whole chunk,
// decoded once per entry.
func (d *parquetDecoder) decodeRange(ctx context.Context, ds *Dataset, p piece) (rec arrow.RecordBatch, err error) {
	rg, start, end, stats, e := p.rg, p.rows.lo, p.rows.hi, p.stats, p.e
	if start < 0 || end > d.f.RowGroups[rg].Rows || start >= end {
		return nil, fmt.Errorf("loader: %s row group %d: rows [%d, %d) outside its %d rows", d.f.Object.URI, rg, start, end, d.f.RowGroups[rg].Rows)
	}
	arrs := make([]arrow.Array, 0, len(d.cols))
	defer d.settle(rg, &arrs, &err)
	for i := range d.cols {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		c := &d.cols[i]
		var a arrow.Array
		if d.mayStream(c, rg) {
			locs, err := d.pages(ctx, ds, rg, i, stats, e)
			if err != nil {
				return nil, err
			}
			if locs != nil {
				p.col = i
				if a, err = d.decodePages(ctx, ds, p, locs); err != nil {
					return nil, err
				}
			}
		}
		if a == nil {
			p.col = i
			w, err := d.wholeColumn(ctx, ds, p)
			if err != nil {
				return nil, err
			}
			a = array.NewSlice(w, start, end)
		}
		arrs = append(arrs, a)
	}
	rec = array.NewRecordBatch(d.sch, arrs, end-start)
	for _, a := range arrs {
		a.Release()
	}
	arrs = nil
	return rec, nil
}

// wholeColumn returns column i of row group rg decoded whole, decoding it on
// the entry's first need.
func (d *parquetDecoder) wholeColumn(ctx context.Context, ds *Dataset, p piece) (arrow.Array, error) {
	rg, i, mem, stats, e := p.rg, p.col, p.mem, p.stats, p.e
	e.mu.Lock()
	defer e.mu.Unlock()
	if a, ok := e.cols[i]; ok {
		return a, nil
	}
	c := &d.cols[i]
	var chunks []Chunk
	for _, ch := range d.f.RowGroups[rg].Chunks {
		if ch.Column == c.name {
			chunks = append(chunks, ch)
		}
	}
	ra, err := ds.fetchChunks(ctx, ds.fileIndex(d.f), rg, chunks, stats)
	if err != nil {
		return nil, err
	}
	defer ra.release()
	if ra.mapped {
		defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	}
	a, err := d.decodeColumn(ctx, c, rg, ra, mem)
	if err != nil {
		return nil, err
	}
	if e.cols == nil {
		e.cols = map[int]arrow.Array{}
	}
	e.cols[i] = a
	if !e.charged[i] {
		// Foreseen as streamed, decoded whole after all (pages that are
		// not the fast path's): counted from now on.
		for _, ch := range chunks {
			e.extra += ch.Length
		}
		e.extra += arrowmem.DataBytes(a.Data())
	}
	return a, nil
}

// fileIndex returns the index of f in ds.Files.
func (ds *Dataset) fileIndex(f *File) int {
	for i, g := range ds.Files {
		if g == f {
			return i
		}
	}
	return -1
}

// slicePiece returns rows [start, end) of rec, a whole batch decoded for
// its pieces, or ErrCorrupt naming the file and batch when the batch does not
// hold them or its buffers do not (arrow-go checks offsets when slicing, by
// panicking).
func slicePiece(rec arrow.RecordBatch, start, end int64, uri string, batch int) (out arrow.RecordBatch, err error) {
	if start < 0 || end < start || end > rec.NumRows() {
		return nil, fmt.Errorf("loader: %s batch %d: rows [%d, %d) asked of a batch of %d rows: %w", uri, batch, start, end, rec.NumRows(), ErrCorrupt)
	}
	defer func() {
		if r := recover(); r != nil {
			out, err = nil, fmt.Errorf("loader: %s batch %d: slicing rows [%d, %d): %v: %w", uri, batch, start, end, r, ErrCorrupt)
		}
	}()
	return rec.NewSlice(start, end), nil
}
