package format

// Decoding a piece's share of a streamed column: the pages holding its
// rows, fetched alone, decoded by decodeRows.

import (
	"context"
	"fmt"
	"math"
	"runtime/debug"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/parquet-go/parquet-go"
	pqformat "github.com/parquet-go/parquet-go/format"

	"github.com/meshfeed/meshfeed/internal/arrowmem"
	"github.com/meshfeed/meshfeed/internal/bufpool"
)

// faultAround is how far before a piece's pages a reader drops pages (the
// kernel's fault-around maps up to 64 KiB of a page's neighbours with it).
const faultAround = 64 << 10

// decodePages decodes rows p.rows of column p.col from the pages that hold
// them, fetched alone, or returns nil (no error) when those pages do not
// qualify for the fast path after all (the column is then decoded whole).
// Where the entry's last piece decoded pages holding those rows, it slices
// them instead (Stats.Reused).
//
// With into set (the piece's destinations of the column, Piece.Into), the
// values of a fixed-width column go there instead (placed true, no array;
// placeable, placePages), else it decodes as without.
func (d *parquetDecoder) decodePages(ctx context.Context, p piece, locs []pageLoc, into [][]byte) (_ arrow.Array, placed bool, _ error) {
	c, e, start, end := &d.cols[p.col], p.e, p.rows.lo, p.rows.hi
	md := &d.pf.Metadata().RowGroups[p.rg].Columns[c.leaf].MetaData
	if into != nil && !c.placeable(locs, start, end) {
		into = nil
	}
	if into == nil {
		if a := e.reuse(p.col, start, end); a != nil {
			p.stats.Reused.Add(1)
			return a, false, nil
		}
	}
	i, j := pageSpan(locs, c.slot(start), c.slot(end))
	if i >= j {
		return nil, false, fmt.Errorf("format: %s row group %d column %q: no page holds rows [%d, %d): %w", d.uri, p.rg, c.name, start, end, ErrCorrupt)
	}
	if into != nil && j == i+1 {
		if placed, err := d.placeKept(p, locs, i, into); placed || err != nil {
			return nil, placed, err
		}
	}
	t := pageTail(locs, j) // and the pages ending the last row
	off, n := locs[i].off, locs[t-1].off+locs[t-1].size-locs[i].off
	first, slots := locs[i].first, locs[j-1].first+locs[j-1].rows-locs[i].first
	ra, err := d.fetchPages(ctx, p, md, locs[i:t], c.slot(start), c.slot(end))
	if err != nil {
		return nil, false, err
	}
	defer ra.Release()
	if ra.Mapped() {
		defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	}
	b, ok := ra.BytesAt(off, n)
	if !ok {
		return nil, false, nil
	}
	if u := e.unchecked(p.col, i, t); u < t {
		if err := checkPages(b[locs[u].off-off:], md, d.maxBytes); err != nil {
			return nil, false, fmt.Errorf("format: %s row group %d column %q pages %d..%d: %w", d.uri, p.rg, c.name, u, t-1, err)
		}
		e.markChecked(p.col, u, t)
		p.stats.PagesChecked.Add(int64(t - u))
	}
	v := chunkView{b: b, codec: md.Codec, first: first, n: slots, cut: c.kind == kindList && (locs[i].cont || t > j)}
	if c.kind != kindList {
		v.pages = e.fastPagesOf(c, p.col, pageRun{i: i, t: t, b: b, locs: locs, off: off}, md.Codec)
	}
	ed := edges{e, p.col, i, p.stats, c.untilOf(p, first), p.mem}
	if into != nil {
		pages, err := v.fastPages(c)
		if err == nil {
			err = c.placePages(pages, md.Codec, rowRange{c.slot(start) - first, c.slot(end) - first}, into, ed)
		}
		if placed = err == nil; err != nil && err != errFallback {
			return nil, false, fmt.Errorf("format: %s row group %d column %q pages %d..%d (slots %d..%d): %w", d.uri, p.rg, c.name, i, t-1, first, first+slots-1, err)
		}
	}
	var out decoded
	if !placed {
		if out, err = c.decodeRows(v, p.rows, outSpec{mem: p.mem, maxBytes: d.maxBytes, ed: ed}); err == errFallback {
			return nil, false, nil
		} else if err != nil {
			return nil, false, fmt.Errorf("format: %s row group %d column %q pages %d..%d (slots %d..%d): %w", d.uri, p.rg, c.name, i, t-1, first, first+slots-1, err)
		}
	}
	if p.stats.Pages.Add(int64(t - i)); placed {
		p.stats.PagesPlaced.Add(int64(t - i))
	}
	dropPages(ra, locs, t, off, n, md.Codec)
	if placed {
		return nil, true, nil
	}
	a := out.a
	if out.first == start && int64(a.Len()) == end-start {
		return a, false, nil
	}
	e.keep(p.col, a, out.first, int64(a.Len())) // not a fixed_size_list here: rows are slots
	defer a.Release()
	return array.NewSlice(a, start-out.first, end-out.first), false, nil
}

// dropPages drops the pages [.., t) of locs that a piece decoded (off, n:
// those its rows are in) from ra where it can (Dropper): the reader's
// pieces go forward, its next one starts in the last page at the
// earliest, and takes a compressed one decompressed (edges), not from
// here. From a little before the first: populating a page maps its
// neighbours too (the kernel's fault-around, 64 KiB by default), some of
// them pages dropped before.
func dropPages(ra Fetched, locs []pageLoc, t int, off, n int64, codec pqformat.CompressionCodec) {
	if dr, ok := ra.(Dropper); ok {
		from, end := max(locs[0].off, off-faultAround), locs[t-1].off
		if codec != pqformat.Uncompressed {
			end = off + n
		}
		dr.Drop(from, end-from)
	}
}

// edges lets decodeListPiece and decodeFastRows reuse the page a piece of
// the same row group ended in (Shared.takeEdge, keepEdge): the Shared, the
// column, the index of the first page given, and the stats that count the
// reuse. The zero value reuses nothing (a whole column chunk).
type edges struct {
	e     *Shared
	col   int
	first int
	stats *Stats
	// until is the value of the pages given (from the first page's
	// first, 0) from which no later piece of the reader reads
	// (Piece.Until); math.MaxInt64 where not known.
	until int64
	// mem is the piece's allocator, which a page kept for a later piece
	// comes from where the row group's readers share pages (keptBuf).
	mem memory.Allocator
}

// untilOf returns edges.until for pages whose first value is value first
// of the column chunk.
func (c *colDecoder) untilOf(p piece, first int64) int64 {
	if p.until <= 0 {
		return math.MaxInt64
	}
	return c.slot(p.until) - first
}

// around runs decode on page i of the pages given, compressed (into n
// bytes, decompressedLen; 0 where its values are stored raw): into
// *scratch, or from pre, the page the piece before decompressed (nil:
// none), or else the one another reader of the row group keeps (shared).
// Where more (the next piece starts inside the page)
// and decode succeeds, the page decompressed (pre, or what decode
// decompressed into a buffer of its own, then offered to the row group's
// other readers) is kept for that piece; otherwise those buffers are put
// back. edgePage and placeEdge decode their part of an edge page through
// it.
//
// A buffer of its own that the page may be kept in comes from the piece's
// allocator (keptBuf), as the pages a piece decodes do, not from the
// buffer pool: a page kept between pieces lives as long as a piece's
// decoded pages, and where that allocator is the shared-memory wire's
// arena it is off the Go heap, whose collector would let the heap grow to
// twice what it holds (BENCHMARKS.md, "Kept pages from the stream's
// allocator").
func (ed edges) around(i, n int, pre []byte, more bool, scratch *[]byte, decode func(buf *[]byte, pre []byte) error) error {
	if pre == nil {
		pre = ed.shared(i)
	}
	var own []byte
	var mem memory.Allocator // own's, or nil: the buffer pool's
	buf := scratch
	if more && pre == nil {
		buf = &own
		if n > 0 {
			own, mem = ed.keptBuf(n)
		}
	}
	err := decode(buf, pre)
	switch {
	case err == nil && more && pre != nil:
		ed.keep(i, pre, false, nil)
	case err == nil && more && own != nil: // nil: the values were stored raw (v2)
		ed.keep(i, own, true, mem)
	default:
		if pre != nil {
			ed.put(i, pre)
		}
		if own != nil {
			freePage(own, mem)
		}
	}
	return err
}

// keptBuf returns a buffer of n bytes (contents unspecified) for a page
// that may be kept for a later piece, and the allocator it came from:
// the piece's, where the row group's readers share pages (every page kept
// is then offered to the share, which frees it where it came from), else
// none (nil, nil: decode takes one from the buffer pool).
func (ed edges) keptBuf(n int) ([]byte, memory.Allocator) {
	if ed.mem == nil || ed.e == nil || ed.e.Pages == nil {
		return nil, nil
	}
	return arrowmem.AllocateOverwrite(ed.mem, n), ed.mem
}

// freePage frees buf, a decompressed page, to mem, which it came from, or
// to the buffer pool where mem is nil.
func freePage(buf []byte, mem memory.Allocator) {
	if mem != nil {
		mem.Free(buf)
		return
	}
	bufpool.Put(buf)
}

func (ed edges) take(page int) []byte {
	b := ed.e.takeEdge(ed.col, page)
	if b != nil {
		ed.stats.PagesReused.Add(1)
	}
	return b
}

// decodeListPiece decodes rows r of the v.n rows that start in the list
// pages of v (v.cut: they may begin inside a row and end past their last
// row, see decodeFastListRows). Where the pages' repetition levels can be
// read without decompressing their values (uncompressed or SNAPPY v1
// pages, v2 pages) it reads them first, then allocates and copies the
// values of rows r alone, decompressing only the pages holding them;
// else it decodes every value of the pages (decodeFastListRows), for the
// caller to slice. Rows are the pages' (from 0), in and out. errFallback
// when the pages do not qualify for the fast path.
func (c *colDecoder) decodeListPiece(v chunkView, r rowRange, o outSpec) (decoded, error) {
	pages, err := c.fastPages(v.b, v.codec)
	if err != nil {
		return decoded{}, err
	}
	for i := range pages {
		if !pages[i].v2 && v.codec != pqformat.Uncompressed && v.codec != pqformat.Snappy {
			a, err := c.decodeFastListRows(v, o)
			return decoded{a, 0}, err
		}
	}
	starts, end, err := c.listStarts(pages, v)
	if err != nil {
		return decoded{}, err
	}
	a, err := c.listValues(pages, v.codec, listCut{starts, end, v.n, r}, o)
	return decoded{a, r.lo}, err
}

// listCut is rows r of the rows rows of list pages whose row starts
// (values' indexes) are starts, and end, where the last of their rows ends.
type listCut struct {
	starts []int32
	end    int32
	rows   int64
	r      rowRange
}

// listStarts reads the row starts of the list pages of v from their
// repetition levels, for decodeListPiece: v.n of them (v.n+1 when v.cut:
// the row after the last ends it, when the pages hold its start), and where
// the last row ends.
func (c *colDecoder) listStarts(pages []fastPage, v chunkView) ([]int32, int32, error) {
	rows, cut, codec := v.n, v.cut, v.codec
	var err error
	// The row starts, from the levels: rows + 1 (the row after the last
	// ends it, when the pages hold its start).
	starts := make([]int32, rows+1)
	if !cut {
		starts = starts[:rows]
	}
	var scratch []byte
	defer func() {
		if scratch != nil {
			bufpool.Put(scratch)
		}
	}()
	pos, nrows, more := 0, 0, false
	for i := 0; i < len(pages) && !more; i++ {
		p := &pages[i]
		var rep []byte
		switch {
		case p.v2:
			rep = p.body[:p.repLevels]
		case codec == pqformat.Uncompressed:
			if rep, _, err = levelSection(p.body); err != nil {
				return nil, 0, fmt.Errorf("page %d: %w", i, err)
			}
		default:
			levels, complete, err := snappyStart(&scratch, p.body, int64(p.size), 1)
			if err == nil && !complete {
				err = fmt.Errorf("SNAPPY data ends before the page's level sections: %w", ErrCorrupt)
			}
			if err != nil {
				return nil, 0, fmt.Errorf("page %d: %w", i, err)
			}
			rep, _, _ = levelSection(levels)
		}
		if nrows, more, err = rowStarts(rep, p.nvals, pos, starts, nrows); err != nil {
			return nil, 0, fmt.Errorf("page %d: %w", i, err)
		}
		pos += p.nvals
	}
	if int64(nrows) < rows || more && !cut || !cut && rows > 0 && starts[0] != 0 {
		return nil, 0, fmt.Errorf("list pages hold %d rows from their first value (more: %v), want %d: %w", nrows, more, rows, ErrCorrupt)
	}
	end := int32(pos) // where the last row ends: the next row's start, or the pages' end
	if nrows > int(rows) {
		end = starts[rows]
	}
	return starts, end, nil
}

// listValues copies the values of rows l.r of list pages into a list array
// (pieces share the pages at their edges through o.ed), for decodeListPiece.
func (c *colDecoder) listValues(pages []fastPage, codec pqformat.CompressionCodec, l listCut, o outSpec) (arrow.Array, error) {
	starts, lo, hi, ed := l.starts, l.r.lo, l.r.hi, o.ed
	var scratch []byte
	defer func() {
		if scratch != nil {
			bufpool.Put(scratch)
		}
	}()
	from, to := starts[lo], l.end
	if hi < l.rows {
		to = starts[hi]
	}
	n := int(to - from)
	if int64(n)*int64(c.elemSize) > o.maxBytes {
		return nil, errFallback // decodeChunk reports the limit
	}
	mem := o.mem
	values := arrowmem.NewOverwriteBuffer(mem, n*c.elemSize)
	defer values.Release() // the array holds its own references
	offsets := newBuf(mem, 4*(int(hi-lo)+1))
	defer offsets.Release()
	offs := unsafe.Slice((*int32)(unsafe.Pointer(unsafe.SliceData(offsets.Bytes()))), int(hi-lo)+1)
	for r := range offs[:hi-lo] {
		offs[r] = starts[lo+int64(r)] - from
	}
	// The values of rows [lo, hi): values [from, to) of the pages.
	dst := values.Bytes()
	es := c.elemSize
	pos := 0
	for i := range pages {
		p := &pages[i]
		x, y := max(pos, int(from)), min(pos+p.nvals, int(to))
		if x < y {
			// The first page may be the one the piece before ended in;
			// the last, where the next piece starts: kept decompressed.
			var pre, own []byte
			if i == 0 {
				pre = ed.take(ed.first)
			}
			keep := y < pos+p.nvals && codec != pqformat.Uncompressed
			if pre == nil && codec != pqformat.Uncompressed {
				pre = ed.shared(i)
			}
			buf := &scratch
			if keep && pre == nil {
				buf = &own
			}
			_, vals, err := c.listPageParts(p, codec, buf, pre)
			if err == errFallback {
				return nil, err
			}
			if err == nil && len(vals) != p.nvals*es {
				err = fmt.Errorf("%d bytes of values for %d values of %d bytes: %w", len(vals), p.nvals, es, ErrCorrupt)
			}
			if err != nil {
				return nil, fmt.Errorf("page %d: %w", i, err)
			}
			copy(dst[(x-int(from))*es:], vals[(x-pos)*es:(y-pos)*es])
			switch {
			case keep && pre != nil:
				ed.keep(i, pre, false, nil)
			case keep && own != nil: // nil: the page's values were stored raw (v2)
				ed.keep(i, own, true, nil) // the buffer pool's (listPageParts)
			case pre != nil:
				ed.put(i, pre)
			}
		}
		pos += p.nvals
	}
	st := &colState{c: c, mem: mem, values: values, nvals: n, offsets: offsets, rows: int(hi - lo)}
	return st.finish(hi - lo)
}

// decodeFixedListSlots decodes rows r of fixed_size_list column c from the
// pages of v, holding values [v.first, v.first+v.n) of it (pages need not
// start at a row): the pages at either end write only the values of those
// rows; a compressed page it shares with the piece before or after it is
// decompressed once for both (o.ed, see decodeFastRows). errFallback when
// the pages do not qualify for the fast path.
func (c *colDecoder) decodeFixedListSlots(v chunkView, r rowRange, o outSpec) (arrow.Array, error) {
	// Decode the values as a fixed_size_list[1] (the same page layout:
	// repetition levels checked, definition levels checked), then view them.
	one := *c // narrowed on the fast path itself when c is
	one.listSize = 1
	one.field.Type = arrow.FixedSizeListOfNonNullable(1, one.elem)
	L := int64(c.listSize)
	a, err := one.decodeFastRows(chunkView{b: v.b, codec: v.codec, n: v.n, pages: v.pages}, rowRange{r.lo*L - v.first, r.hi*L - v.first}, o)
	if err != nil {
		return nil, err
	}
	defer a.Release()
	vals := a.(*array.FixedSizeList).ListValues()
	data := array.NewData(c.field.Type, int(r.hi-r.lo), []*memory.Buffer{nil}, []arrow.ArrayData{vals.Data()}, 0, 0)
	defer data.Release()
	return array.MakeFromData(data), nil
}

// streamEligible reports whether c's layout can be streamed: the fast
// path's layouts, and those of 8- and 16-bit integers stored as INT32
// (narrowed, checked, on the fast path; lists of them read as INT32, then
// narrowed by narrow).
func (c *colDecoder) streamEligible() bool {
	return c.fastEligible() || c.narrowed()
}

// narrowed reports whether c is an 8- or 16-bit integer column (or a list
// of them) stored as INT32.
func (c *colDecoder) narrowed() bool {
	if c.kind != kindPrimitive && c.kind != kindFixedList && c.kind != kindList || c.phys != parquet.Int32 {
		return false
	}
	switch c.elem.ID() {
	case arrow.INT8, arrow.UINT8, arrow.INT16, arrow.UINT16:
		return true
	}
	return false
}

// wide returns c as an int32 column of the same layout, for the fast path.
func (c *colDecoder) wide() *colDecoder {
	w := *c
	w.elem, w.elemSize = arrow.PrimitiveTypes.Int32, 4
	switch c.kind {
	case kindFixedList:
		w.field.Type = arrow.FixedSizeListOfNonNullable(int32(c.listSize), w.elem)
	case kindList:
		w.field.Type = arrow.ListOfNonNullable(w.elem)
	default:
		w.field.Type = w.elem
	}
	return &w
}

// narrow converts a, decoded by c.wide(), to c's type, checking that every
// value fits (the writer guarantees it; one that does not is ErrCorrupt). It
// releases a.
func (c *colDecoder) narrow(a arrow.Array, mem memory.Allocator) (arrow.Array, error) {
	defer a.Release()
	vals := a.Data()
	var offsets *memory.Buffer
	if c.kind == kindFixedList || c.kind == kindList {
		if c.kind == kindList {
			offsets = vals.Buffers()[1]
		}
		vals = vals.Children()[0]
	}
	n := vals.Len()
	raw := vals.Buffers()[1].Bytes()[vals.Offset()*4 : (vals.Offset()+n)*4]
	out := arrowmem.NewOverwriteBuffer(mem, n*c.elemSize)
	defer out.Release()
	if err := convertInto(out.Bytes(), c.elem.ID(), raw, parquet.Int32, n); err != nil {
		return nil, err
	}
	st := &colState{c: c, mem: mem, values: out, nvals: n, offsets: offsets, rows: a.Len()}
	return st.finish(int64(a.Len()))
}
