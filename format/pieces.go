package format

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	pqformat "github.com/parquet-go/parquet-go/format"

	"github.com/meshfeed/meshfeed/internal/arrowmem"
)

// Pieces: a row range of a row group decoded by itself, so that a reader
// never holds more than a bounded part of a large row group (the caller,
// package loader, decides which rows a piece reads and when).
//
// A column is streamed (only the pages holding the range are fetched and
// decoded) when the fast path (fastpath.go) decodes it: fixed-width values
// and lists of them, PLAIN pages, no dictionary, no nulls, codec none,
// snappy, zstd or gzip. Its pages are located with the column chunk's
// offset index when the file has one (one small read; the page locations
// and first rows), else by walking the page headers in bounded windows
// (pageWindow bytes at a time; once the pages walked are larger than that,
// hopWindow bytes at each page's start: its header alone; where the last
// two pages were of one size, the next hopsAhead headers at that stride
// are read at once: pagehops.go), which finds the rows of every page of a
// primitive or fixed_size_list column and of v2 pages; a list column's v1
// pages, whose headers count values, not rows, are placed by their
// repetition levels, read one page at a time (for SNAPPY from the start of
// the page alone; ZSTD and GZIP pages are decompressed into a pooled
// buffer). A piece fetches at most one page more per column at each end,
// and for a list whose v1 pages are cut inside rows (as arrow-go writes
// them) also the pages that end its last row; of a fixed-size list's
// uncompressed v1 pages at its ends, only the headers, the levels and its
// own rows' values where the fetcher reads rather than maps
// (pieces_sparse.go). Of the pages cutting the
// range's edges, a piece of a fixed-size list column copies its own rows'
// values alone, and a compressed page it ends inside is kept decompressed
// for the row group's next piece, which starts there (edges); a primitive
// column's piece of uncompressed pages copies its own rows alone, and of
// compressed pages decodes them whole and keeps them for the next piece to
// slice where its rows lie inside them (decodedPages: it then fetches
// nothing; an int64 id of 65,536 rows is one page). The pages' headers are
// checked and read once per row group, by the first piece cutting them
// (Shared: checked, heads). A piece of a list column holds
// its rows' values alone where the levels can be read apart from the values
// (uncompressed and SNAPPY v1 pages, v2 pages), not its pages'.
//
// A piece given destinations for a fixed-width column writes its values
// there instead (Piece.Into, place.go).
//
// Every other column (dictionary-encoded, nullable, booleans, strings,
// arrow-go's fallback types) is decoded whole, once per row group and
// Shared, and the pieces of that row group are slices of it.

// Ranged is a Decoder that also decodes row ranges of a row group by
// themselves, fetching only the pages of their rows where it can (the
// Parquet decoder).
type Ranged interface {
	Decoder
	// DecodeRange decodes rows [p.Lo, p.Hi) of row group p.RG into a record
	// the caller releases. With p.Into, the columns it places are written
	// there and left out of the record (Into.Placed).
	DecodeRange(ctx context.Context, p Piece) (arrow.RecordBatch, error)
	// Charge returns what decoding p costs (compressed plus decoded bytes):
	// cost for the pages of the streamed columns, pin for the columns
	// decoded whole that no piece of p.Shared was charged for yet. It
	// locates the streamed columns' pages (once per Shared).
	Charge(ctx context.Context, p Piece) (cost, pin int64, err error)
	// StreamedCost returns the bytes (compressed plus decoded, from the
	// footer) of row group rg's columns a piece streams, and of those it
	// decodes whole.
	StreamedCost(rg int) (streamed, whole int64)
	// RowBytes returns the bytes per row that row group rg's decoded
	// columns hold in Arrow memory: exact for fixed-width columns, the
	// chunks' uncompressed size per row for the others.
	RowBytes(rg int) float64
	// PageBreaks returns the rows of row group p.RG, ascending, at which a
	// data page of its widest compressed streamed column starts with a
	// row (not the first page's): where a piece can end without cutting a
	// page of that column, which each piece it ends in then decompresses
	// to scratch and copies out of. nil when no compressed column
	// streams. It locates that column's pages (once per Shared).
	PageBreaks(ctx context.Context, p Piece) ([]int64, error)
}

// Piece is rows [Lo, Hi) of row group RG to decode by themselves, and with
// what: the allocator, the stats, what the row group's pieces share, and
// how to fetch their pages.
type Piece struct {
	RG     int
	Lo, Hi int64
	Mem    memory.Allocator
	Stats  *Stats
	Shared *Shared
	Fetch  Fetcher
	// Into, when set, is where the values of some columns go instead of
	// the record (place.go); DecodeRange sets its Placed.
	Into *Into
	// Until, when above 0, is the row of the row group from which no
	// later piece of the reader reads: a placed page the piece ends
	// inside is then not kept decompressed for the next piece, and a
	// snappy one that compresses little is decoded only as far as the
	// piece's rows (place.go).
	Until int64
}

// Shared is what the pieces of one row group share while a reader reads
// them: the page locations of the streamed columns, the whole decoded
// columns of the others, the pages the last piece decoded or ended in. The
// zero value is empty; Release frees it after the row group's last piece.
type Shared struct {
	mu      sync.Mutex
	locs    map[int][]pageLoc // per column: nil slice when the column is not streamed
	cols    map[int]arrow.Array
	charged map[int]bool             // columns whose whole size was charged (Charge)
	extra   int64                    // bytes decoded whole that Charge did not foresee
	decoded map[int]decodedPages     // per streamed column: the pages its last piece decoded
	edges   map[int]edgePage         // per streamed column of lists or fixed-size lists: the page its last piece ended in
	checked map[int][2]int           // per streamed column: the pages [lo, hi) whose headers a piece checked (checkPages)
	heads   map[int]map[int]fastHead // per streamed column of primitives or fixed-size lists: its pages' headers as fastPages read them, by page index
	breaks  *[]int64                 // PageBreaks's, once computed
	// Pages, when set, is the row group's pages kept decompressed that
	// the readers of its rows share (the loader sets it); nil: none.
	Pages *PageShare
}

// fastHead is a fastPage without its bytes: where its body lies from the
// page's start, and how long it is.
type fastHead struct {
	p       fastPage // body nil
	at, len int64
}

// pageRun is pages [i, t) of a column chunk: locs are the chunk's page
// locations, b the bytes fetched of it, from file offset off.
type pageRun struct {
	i, t int
	b    []byte
	locs []pageLoc
	off  int64
}

// fastPagesOf returns the pages of sp of column col (stored with codec) as
// c.fastPages reads them: from the headers
// an earlier piece of the row group read, else reading them from b and
// keeping them for the next pieces, which cut the same pages. nil where
// c.fastPages fails or reads another number of pages (the caller then
// reads them as before, and falls back where it must).
func (e *Shared) fastPagesOf(c *colDecoder, col int, sp pageRun, codec pqformat.CompressionCodec) []fastPage {
	i, t, b, locs, off := sp.i, sp.t, sp.b, sp.locs, sp.off
	if len(b) == 0 {
		return nil
	}
	pages := make([]fastPage, 0, t-i)
	e.mu.Lock()
	heads := e.heads[col]
	for k := i; k < t && heads != nil; k++ {
		h, ok := heads[k]
		if !ok {
			break
		}
		at := locs[k].off - off + h.at
		if at < 0 || at+h.len > int64(len(b)) {
			break
		}
		fp := h.p
		fp.body = b[at : at+h.len : at+h.len]
		pages = append(pages, fp)
	}
	e.mu.Unlock()
	if len(pages) == t-i {
		return pages
	}
	read, err := c.fastPages(b, codec)
	if err != nil || len(read) != t-i {
		return nil
	}
	base := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.heads == nil {
		e.heads = map[int]map[int]fastHead{}
	}
	if e.heads[col] == nil {
		e.heads[col] = map[int]fastHead{}
	}
	for k, fp := range read {
		if len(fp.body) == 0 {
			continue
		}
		at := int64(uintptr(unsafe.Pointer(unsafe.SliceData(fp.body))) - base)
		h := fastHead{p: fp, at: at - (locs[i+k].off - off), len: int64(len(fp.body))}
		h.p.body = nil
		e.heads[col][i+k] = h
	}
	return read
}

// unchecked returns the first of pages [i, j) of column col from which
// they were not checked by an earlier piece of the row group (the same
// bytes of the same object version: a page that later pieces cut too need
// not be checked again): j when all were.
func (e *Shared) unchecked(col, i, j int) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	r, ok := e.checked[col]
	if !ok || i < r[0] || i >= r[1] {
		return i
	}
	return min(r[1], j)
}

// markChecked records that pages [i, j) of column col were checked.
func (e *Shared) markChecked(col, i, j int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.checked == nil {
		e.checked = map[int][2]int{}
	}
	if r, ok := e.checked[col]; ok && i <= r[1] && j >= r[0] {
		i, j = min(i, r[0]), max(j, r[1]) // overlapping or touching: one range
	}
	e.checked[col] = [2]int{i, j}
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
func (e *Shared) reuse(col int, start, end int64) arrow.Array {
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
func (e *Shared) keep(col int, a arrow.Array, first, rows int64) {
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

// TakeExtra returns the bytes of columns decoded whole that Charge foresaw
// as streamed (their pages did not qualify after all), counting them from
// now on as charged: the caller pins them until Release.
func (e *Shared) TakeExtra() int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := e.extra
	e.extra = 0
	return n
}

// Release frees the decoded columns and pages the pieces shared; e is
// empty after.
func (e *Shared) Release() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, a := range e.cols {
		a.Release()
	}
	e.cols = nil
	for _, p := range e.decoded {
		p.a.Release()
	}
	e.decoded = nil
	for col, p := range e.edges {
		e.Pages.put(col, p.page, p.buf)
	}
	e.edges = nil
	e.checked = nil
	e.heads = nil
	e.breaks = nil
}

// piece is a Piece as the decoders pass it on: column col's share of it
// (decodePages).
type piece struct {
	rg, col int
	rows    rowRange
	mem     memory.Allocator
	stats   *Stats
	e       *Shared
	fetch   Fetcher
	into    *Into
	until   int64 // Piece.Until
}

func (p Piece) internal() piece {
	return piece{rg: p.RG, rows: rowRange{p.Lo, p.Hi}, mem: p.Mem, stats: p.Stats, e: p.Shared, fetch: p.Fetch, into: p.Into, until: p.Until}
}

// StreamedCost implements Ranged.
func (d *parquetDecoder) StreamedCost(rg int) (streamed, whole int64) {
	for i := range d.cols {
		c := &d.cols[i]
		comp, dec := d.chunkSizes(c, rg)
		if d.mayStream(c, rg) {
			streamed += comp + dec
		} else {
			whole += comp + dec
		}
	}
	return streamed, whole
}

// RowBytes implements Ranged.
func (d *parquetDecoder) RowBytes(rg int) float64 {
	rows := d.rows(rg)
	if rows <= 0 {
		return 0
	}
	var row float64
	for i := range d.cols {
		c := &d.cols[i]
		switch {
		case (c.kind == kindPrimitive || c.kind == kindFixedList) && c.elemSize > 0:
			row += float64(c.elemSize * max(c.listSize, 1))
		case (c.kind == kindPrimitive || c.kind == kindFixedList) && c.elemSize == 0:
			row += float64(max(c.listSize, 1)) / 8
		default:
			_, dec := d.chunkSizes(c, rg)
			row += float64(dec) / float64(rows)
		}
	}
	return row
}

// mayStream reports whether column c of row group rg qualifies for
// streaming by its footer metadata (the pages decide in the end).
func (d *parquetDecoder) mayStream(c *colDecoder, rg int) bool {
	md := &d.pf.Metadata().RowGroups[rg].Columns[c.leaf].MetaData
	if !c.route(md).fast() || md.DictionaryPageOffset != 0 {
		return false
	}
	for _, e := range md.Encoding {
		switch e {
		case pqformat.Plain, pqformat.RLE, pqformat.BitPacked:
		default:
			return false
		}
	}
	if md.Statistics.NullCount > 0 {
		return false
	}
	return true
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// PageBreaks implements Ranged.
func (d *parquetDecoder) PageBreaks(ctx context.Context, p Piece) ([]int64, error) {
	e := p.Shared
	e.mu.Lock()
	if e.breaks != nil {
		defer e.mu.Unlock()
		return *e.breaks, nil
	}
	e.mu.Unlock()
	widest, most := -1, int64(0)
	for i := range d.cols {
		c := &d.cols[i]
		md := &d.pf.Metadata().RowGroups[p.RG].Columns[c.leaf].MetaData
		if md.Codec == pqformat.Uncompressed || !d.mayStream(c, p.RG) {
			continue
		}
		if _, dec := d.chunkSizes(c, p.RG); dec > most {
			widest, most = i, dec
		}
	}
	var breaks []int64
	if widest >= 0 {
		locs, err := d.pages(ctx, p.internal(), widest)
		if err != nil {
			return nil, err
		}
		c := &d.cols[widest]
		n := c.slot(1)
		for _, l := range locs[min(1, len(locs)):] {
			if !l.cont && l.first%n == 0 {
				breaks = append(breaks, l.first/n)
			}
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.breaks = &breaks
	return breaks, nil
}

// Charge implements Ranged.
func (d *parquetDecoder) Charge(ctx context.Context, p Piece) (cost, pin int64, err error) {
	e, rows := p.Shared, d.rows(p.RG)
	for i := range d.cols {
		c := &d.cols[i]
		comp, dec := d.chunkSizes(c, p.RG)
		if d.mayStream(c, p.RG) {
			locs, err := d.pages(ctx, p.internal(), i)
			if err != nil {
				return 0, 0, err
			}
			if locs != nil {
				a, b := pageSpan(locs, c.slot(p.Lo), c.slot(p.Hi))
				if a < b {
					slots := locs[b-1].first + locs[b-1].rows - locs[a].first
					t := pageTail(locs, b)
					cost += locs[t-1].off + locs[t-1].size - locs[a].off
					if all := c.slot(rows); all > 0 {
						cost += ceilDiv(dec*slots, all)
					}
					continue
				}
			}
		}
		e.mu.Lock()
		if e.charged == nil {
			e.charged = map[int]bool{}
		}
		if !e.charged[i] {
			e.charged[i] = true
			pin += comp + dec
		}
		e.mu.Unlock()
	}
	return cost, pin, nil
}

// DecodeRange implements Ranged: streamed columns from the pages that hold
// the rows, the others from their whole chunk, decoded once per Shared.
func (d *parquetDecoder) DecodeRange(ctx context.Context, pc Piece) (rec arrow.RecordBatch, err error) {
	p := pc.internal()
	rg, start, end := p.rg, p.rows.lo, p.rows.hi
	if start < 0 || end > d.rows(rg) || start >= end {
		return nil, fmt.Errorf("format: %s row group %d: rows [%d, %d) outside its %d rows", d.uri, rg, start, end, d.rows(rg))
	}
	into, err := d.checkInto(p)
	if err != nil {
		return nil, err
	}
	arrs := make([]arrow.Array, 0, len(d.cols))
	defer d.settle(rg, &arrs, &err)
	var fields []arrow.Field // the record's, where columns were placed
	for i := range d.cols {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		c := &d.cols[i]
		var a arrow.Array
		p.col = i
		if d.mayStream(c, rg) {
			locs, err := d.pages(ctx, p, i)
			if err != nil {
				return nil, err
			}
			if locs != nil {
				var dst [][]byte
				if into != nil {
					dst = into.Cols[i]
				}
				var placed bool
				if a, placed, err = d.decodePages(ctx, p, locs, dst); err != nil {
					return nil, err
				}
				if placed {
					if fields == nil {
						fields = append(make([]arrow.Field, 0, len(d.cols)), d.sch.Fields()[:i]...)
					}
					into.Placed[i] = true
					continue
				}
			}
		}
		if a == nil {
			w, err := d.wholeColumn(ctx, p)
			if err != nil {
				return nil, err
			}
			a = array.NewSlice(w, start, end)
		}
		arrs = append(arrs, a)
		if fields != nil {
			fields = append(fields, d.sch.Field(i))
		}
	}
	sch := d.sch
	if fields != nil {
		sch = arrow.NewSchema(fields, nil)
	}
	rec = array.NewRecordBatch(sch, arrs, end-start)
	for _, a := range arrs {
		a.Release()
	}
	arrs = nil
	return rec, nil
}

// wholeColumn returns column p.col of row group p.rg decoded whole,
// decoding it on the Shared's first need.
func (d *parquetDecoder) wholeColumn(ctx context.Context, p piece) (arrow.Array, error) {
	rg, i, e := p.rg, p.col, p.e
	e.mu.Lock()
	defer e.mu.Unlock()
	if a, ok := e.cols[i]; ok {
		return a, nil
	}
	c := &d.cols[i]
	var chunks []Chunk
	cols := d.pf.Metadata().RowGroups[rg].Columns
	for _, leaf := range c.leaves {
		off, n := chunkRange(&cols[leaf].MetaData)
		chunks = append(chunks, Chunk{Column: c.name, Offset: off, Length: n})
	}
	ra, err := p.fetch.Fetch(ctx, rg, chunks)
	if err != nil {
		return nil, err
	}
	defer ra.Release()
	if ra.Mapped() {
		defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	}
	a, err := d.decodeColumn(ctx, c, rg, ra, p.mem)
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
