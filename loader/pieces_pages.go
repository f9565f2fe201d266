package loader

import (
	"context"
	"encoding/binary"
	"fmt"
	"runtime/debug"
	"sort"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/encoding/thrift"
	"github.com/parquet-go/parquet-go/format"

	"github.com/meshfeed/meshfeed/internal/arrowmem"
	"github.com/meshfeed/meshfeed/objstore"
)

// The pages of a piece (pieces.go): where a streamed column's data pages lie
// and which rows each holds, and decoding only the pages of a row range.

// pageWindow is the bytes read at a time to walk page headers without an
// offset index.
const pageWindow = 64 << 10

// pageLoc is one data page of a column chunk: its bytes (header and body)
// in the file and the slots it holds: rows, or for a fixed_size_list[n]
// column values (n per row: pages need not start at a row).
type pageLoc struct {
	off, size   int64
	first, rows int64 // slots
	cont        bool  // a list page whose first values end the row begun before it
}

// slot returns the slot of row r of c: r, or r*n for a fixed_size_list[n].
func (c *colDecoder) slot(r int64) int64 {
	if c.kind == kindFixedList {
		return r * int64(c.listSize)
	}
	return r
}

// pageSpan returns the pages [i, j) of locs where rows [start, end) start.
func pageSpan(locs []pageLoc, start, end int64) (i, j int) {
	i = sort.Search(len(locs), func(k int) bool { return locs[k].first+locs[k].rows > start })
	j = sort.Search(len(locs), func(k int) bool { return locs[k].first >= end })
	return i, j
}

// pageTail returns the end of the pages to decode for the rows starting in
// pages [i, j): j, or past the pages that continue the last of those rows
// (list pages that begin inside a row: cont), up to the one where the next
// row starts.
func pageTail(locs []pageLoc, j int) int {
	for ; j < len(locs) && locs[j].cont; j++ {
		if locs[j].rows > 0 {
			return j + 1
		}
	}
	return j
}

// pages returns the page locations of column i of row group rg, located on
// the entry's first need; nil when the column cannot be streamed.
func (d *parquetDecoder) pages(ctx context.Context, ds *Dataset, rg, i int, stats *ReadStats, e *rgEntry) ([]pageLoc, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if locs, ok := e.locs[i]; ok {
		return locs, nil
	}
	locs, err := d.locatePages(ctx, ds.store, rg, &d.cols[i], stats)
	if err != nil {
		return nil, fmt.Errorf("loader: %s row group %d column %q: locating pages: %w", d.f.Object.URI, rg, d.cols[i].name, err)
	}
	if e.locs == nil {
		e.locs = map[int][]pageLoc{}
	}
	e.locs[i] = locs
	return locs, nil
}

// locatePages finds the data pages of column c in row group rg and the rows
// each holds: from the offset index when the file has one, else from the
// page headers, and for a list column's v1 pages (whose headers count
// values, not rows) from their repetition levels: a page holds the rows
// that start in it (level 0), and one whose first level is 1 continues the
// row begun before it (cont; arrow-go cuts v1 list pages anywhere). Those
// levels are read one page at a time, and the pages' values never: from
// the page itself when uncompressed (the levels lead its body), from the
// start of the page alone for SNAPPY (snappyPrefix, usually from the
// window of headers already read), else from the page decompressed whole
// into a pooled buffer (ZSTD, GZIP); levels that do not parse are
// ErrCorrupt. It returns nil (not an error) when the pages cannot be
// placed by row (a dictionary page, a chunk whose first value does not
// start a row, levels not RLE-encoded, a v1 list page holding a null or
// empty list, counts that do not add up): the column is then decoded
// whole, and decoding reports what is wrong with it.
func (d *parquetDecoder) locatePages(ctx context.Context, store objstore.Store, rg int, c *colDecoder, stats *ReadStats) ([]pageLoc, error) {
	cc := &d.pf.Metadata().RowGroups[rg].Columns[c.leaf]
	md := &cc.MetaData
	rows := d.f.RowGroups[rg].Rows
	chunkOff, chunkLen := chunkRange(md)
	if cc.OffsetIndexOffset > 0 && cc.OffsetIndexLength > 0 {
		if cc.OffsetIndexLength > 64<<20 || cc.OffsetIndexOffset+int64(cc.OffsetIndexLength) > d.f.Object.Size {
			return nil, fmt.Errorf("offset index [%d, +%d) outside the file's %d bytes: %w", cc.OffsetIndexOffset, cc.OffsetIndexLength, d.f.Object.Size, ErrCorrupt)
		}
		buf := make([]byte, cc.OffsetIndexLength)
		if err := store.ReadAt(ctx, d.f.Object, buf, cc.OffsetIndexOffset); err != nil {
			return nil, err
		}
		stats.Fetches.Add(1)
		stats.FetchedBytes.Add(int64(len(buf)))
		var oi format.OffsetIndex
		var proto thrift.CompactProtocol
		if err := thrift.Unmarshal(&proto, buf, &oi); err != nil {
			return nil, fmt.Errorf("offset index: %w: %w", err, ErrCorrupt)
		}
		locs := make([]pageLoc, len(oi.PageLocations))
		for k, pl := range oi.PageLocations {
			locs[k] = pageLoc{off: pl.Offset, size: int64(pl.CompressedPageSize), first: c.slot(pl.FirstRowIndex)}
			if k > 0 {
				locs[k-1].rows = locs[k].first - locs[k-1].first
			}
		}
		if n := len(locs); n > 0 {
			locs[n-1].rows = c.slot(rows) - locs[n-1].first
		}
		if !placed(locs, c.slot(rows), chunkOff, chunkOff+chunkLen) {
			return nil, nil
		}
		return locs, nil
	}
	// No offset index: walk the headers, pageWindow bytes at a time.
	var locs []pageLoc
	end := chunkOff + chunkLen
	var first int64
	buf := getBuf(pageWindow)
	defer func() { putBuf(buf) }()
	lv := listLevels{store: store, obj: d.f.Object, stats: stats}
	defer lv.release()
	lim, err := chunkLimits(md, d.maxBytes)
	if err != nil {
		return nil, nil // decoding the chunk whole reports it
	}
	it := newPageWindows(chunkLen, lim)
	for it.pos < chunkLen {
		w := min(int64(cap(buf)), chunkLen-it.pos)
		win, wpos := buf[:w], chunkOff+it.pos
		if err := store.ReadAt(ctx, d.f.Object, win, wpos); err != nil {
			return nil, err
		}
		stats.Fetches.Add(1)
		stats.FetchedBytes.Add(w)
		it.window(win, it.pos)
		parsed := 0
		var h pageHead
		for it.next(&h, false) {
			pos := chunkOff + h.at
			var n int64
			switch h.kind {
			case pageDataV1:
				n = int64(h.nvals) // rows, or a fixed list's values
				if c.kind == kindList {
					// Rows known only from the levels.
					lv.win, lv.wpos = win, wpos
					pr, err := lv.rows(ctx, c, md.Codec, &h.h, pos+h.hdr, d.maxBytes)
					if err == errFallback || err == nil && pr.cont && len(locs) == 0 {
						return nil, nil
					}
					if err != nil {
						return nil, fmt.Errorf("page %d at offset %d: %w", len(locs), pos, err)
					}
					locs = append(locs, pageLoc{off: pos, size: h.hdr + h.size, first: first, rows: pr.rows, cont: pr.cont})
					first += pr.rows
					n = -1
				}
			case pageDataV2:
				n = int64(h.v2().NumRows)
				if c.kind == kindFixedList {
					n = int64(h.nvals)
				}
			case pageIndex:
				n = -1
			default: // dictionary pages, unknown pages
				return nil, nil
			}
			if n >= 0 {
				locs = append(locs, pageLoc{off: pos, size: h.hdr + h.size, first: first, rows: n})
				first += n
			}
			parsed++
		}
		if it.Err() != nil {
			return nil, nil // a header that does not parse: decoding the chunk whole reports it
		}
		if parsed == 0 && it.pos < chunkLen {
			if cap(buf) >= 16<<20 {
				return nil, nil
			}
			putBuf(buf)
			buf = getBuf(int64(cap(buf)) * 2) // a header larger than the window (large statistics)
		}
	}
	if !placed(locs, c.slot(rows), chunkOff, end) {
		return nil, nil
	}
	return locs, nil
}

// listLevels reads the repetition levels of a list column's v1 pages while
// locatePages walks their headers: from the window of headers read (win, at
// file offset wpos) when it holds them, else from a read of their own.
type listLevels struct {
	store objstore.Store
	obj   objstore.Object
	stats *ReadStats
	win   []byte
	wpos  int64
	read  []byte // pooled: bytes read past the window
	plain []byte // pooled: a page decompressed
}

func (lv *listLevels) release() {
	for _, b := range [][]byte{lv.read, lv.plain} {
		if b != nil {
			putBuf(b)
		}
	}
}

// at returns the file's bytes [off, off+n): from the window, or read into
// lv.read (the window's part copied, the rest read and counted in stats).
func (lv *listLevels) at(ctx context.Context, off, n int64) ([]byte, error) {
	wend := lv.wpos + int64(len(lv.win))
	switch {
	case n == 0:
		return nil, nil
	case off >= lv.wpos && off+n <= wend:
		return lv.win[off-lv.wpos : off-lv.wpos+n], nil
	}
	lv.read = growBuf(lv.read, n)
	b := lv.read[:n]
	have := int64(0)
	if off >= lv.wpos && off < wend {
		have = int64(copy(b, lv.win[off-lv.wpos:]))
	}
	if err := lv.store.ReadAt(ctx, lv.obj, b[have:], off+have); err != nil {
		return nil, err
	}
	lv.stats.Fetches.Add(1)
	lv.stats.FetchedBytes.Add(n - have)
	return b, nil
}

// growBuf returns a pooled buffer of at least n bytes: b if it is large
// enough, else a new one (b returned to the pool).
func growBuf(b []byte, n int64) []byte {
	if int64(cap(b)) >= n {
		return b[:n]
	}
	if b != nil {
		putBuf(b)
	}
	return getBuf(n)
}

// pageRows is what a v1 list page's repetition levels say: the rows that
// start in it, and whether its first value continues a row begun before it.
type pageRows struct {
	rows int64
	cont bool
}

// rows returns the rows of the v1 list page of column c with header h and
// body at file offset body. errFallback when the page cannot be streamed
// (levels not RLE-encoded, no value, nesting deeper than one list, a page
// larger than maxBytes, definition levels below the max: a null or empty
// list or a null element, which the fast path leaves to decodeChunk).
func (lv *listLevels) rows(ctx context.Context, c *colDecoder, codec format.CompressionCodec, h *format.PageHeader, body, maxBytes int64) (pageRows, error) {
	var err error
	dh := &h.DataPageHeader.V
	size, usize := int64(h.CompressedPageSize), int64(h.UncompressedPageSize)
	if c.maxRep != 1 || dh.RepetitionLevelEncoding != format.RLE || dh.NumValues <= 0 ||
		(c.maxDef > 0 && dh.DefinitionLevelEncoding != format.RLE) ||
		usize < 4 || usize > maxBytes || size < 4 || (codec == format.Uncompressed && size != usize) {
		return pageRows{}, errFallback
	}
	sections := 1 // repetition levels, then definition levels
	if c.maxDef > 0 {
		sections = 2
	}
	var levels []byte // the page's start, holding its level sections
	switch codec {
	case format.Uncompressed: // the levels lead the body: read them alone
		for need := int64(4); ; {
			if need > size {
				return pageRows{}, fmt.Errorf("level sections of %d bytes in a page of %d: %w", need, size, ErrCorrupt)
			}
			b, err := lv.at(ctx, body, need)
			if err != nil {
				return pageRows{}, err
			}
			end, known := levelsEnd(b, sections)
			if known {
				levels = b
				break
			}
			need = end
		}
	case format.Snappy:
		if levels, err = lv.snappyLevels(ctx, body, size, usize, sections); err != nil {
			return pageRows{}, err
		}
	default:
		src, err := lv.at(ctx, body, size)
		if err != nil {
			return pageRows{}, err
		}
		lv.plain = growBuf(lv.plain, usize)
		page := lv.plain[:usize]
		if err := decompressInto(codec, page, src); err != nil {
			return pageRows{}, err
		}
		if _, known := levelsEnd(page, sections); !known {
			return pageRows{}, fmt.Errorf("level sections past the page's %d bytes: %w", usize, ErrCorrupt)
		}
		levels = page
	}
	rep, rest, _ := levelSection(levels)
	if sections == 2 {
		def, _, _ := levelSection(rest)
		if err := levelRuns(def, c.maxDef, int(dh.NumValues)); err != nil {
			return pageRows{}, err
		}
	}
	lead, ok := firstLevel(rep)
	if !ok {
		return pageRows{}, fmt.Errorf("repetition levels: bad run header: %w", ErrCorrupt)
	}
	n, _, err := rowStarts(rep, int(dh.NumValues), 0, nil, 0)
	if err != nil {
		return pageRows{}, err
	}
	return pageRows{int64(n), lead != 0}, nil
}

// levelsEnd returns where the first sections level sections of a v1 page
// end, if page (the start of the page) holds them all (known), else the
// bytes of the page needed to learn more.
func levelsEnd(page []byte, sections int) (end int64, known bool) {
	for range sections {
		if int64(len(page)) < end+4 {
			return end + 4, false
		}
		end += 4 + int64(binary.LittleEndian.Uint32(page[end:]))
	}
	return end, end <= int64(len(page))
}

// snappyLevels returns the start of the SNAPPY v1 page whose body (size
// bytes, usize decompressed) is at file offset body, up to the end of its
// first sections level sections, decoding only that start: from the part
// of the body in the window when that holds it (the levels lead the page
// and take a few bytes per row), else from the body read whole.
func (lv *listLevels) snappyLevels(ctx context.Context, body, size, usize int64, sections int) ([]byte, error) {
	wend := lv.wpos + int64(len(lv.win))
	if body >= lv.wpos && body < wend {
		src := lv.win[body-lv.wpos : min(wend, body+size)-lv.wpos]
		if int64(len(src)) == size || len(src) >= 64 {
			levels, complete, err := snappyStart(&lv.plain, src, usize, sections)
			if err != nil || complete {
				return levels, err
			}
			if int64(len(src)) == size {
				return nil, fmt.Errorf("SNAPPY data ends before the page's level sections: %w", ErrCorrupt)
			}
		}
	}
	src, err := lv.at(ctx, body, size)
	if err != nil {
		return nil, err
	}
	levels, complete, err := snappyStart(&lv.plain, src, usize, sections)
	if err == nil && !complete {
		err = fmt.Errorf("SNAPPY data ends before the page's level sections: %w", ErrCorrupt)
	}
	return levels, err
}

// snappyStart decodes the start of the SNAPPY page src (usize bytes
// decompressed; src may be cut) into *buf (pooled, grown as needed) up to
// the end of its first sections level sections, and returns it; complete
// is false when src ends first.
func snappyStart(buf *[]byte, src []byte, usize int64, sections int) (levels []byte, complete bool, err error) {
	target := min(usize, 4<<10)
	for {
		*buf = growBuf(*buf, target)
		n, err := snappyPrefix((*buf)[:target], src, usize)
		if err != nil {
			return nil, false, err
		}
		end, known := levelsEnd((*buf)[:n], sections)
		if known {
			return (*buf)[:end], true, nil
		}
		if end > usize {
			return nil, false, fmt.Errorf("level sections of %d bytes in a page of %d: %w", end, usize, ErrCorrupt)
		}
		if int64(n) < target { // src ended first
			return nil, false, nil
		}
		target = min(usize, max(end, 2*target))
	}
}

// snappyPrefix decodes the start of the snappy block src, which must
// decode to want bytes, into dst: len(dst) bytes, or fewer when src ends
// first (src may be the start of a block). It returns the bytes decoded;
// an element that points outside the output, or a stated length other than
// want, is ErrCorrupt.
func snappyPrefix(dst, src []byte, want int64) (int, error) {
	corrupt := func(what string) (int, error) {
		return 0, fmt.Errorf("SNAPPY data: %s: %w", what, ErrCorrupt)
	}
	total, k := binary.Uvarint(src)
	if k <= 0 {
		if len(src) < binary.MaxVarintLen64 && k == 0 {
			return 0, nil // the length itself is cut
		}
		return corrupt("bad length")
	}
	if total != uint64(want) {
		return corrupt(fmt.Sprintf("decodes to %d bytes, want %d", total, want))
	}
	if uint64(len(dst)) > total {
		dst = dst[:total]
	}
	s, d := k, 0
	for d < len(dst) && s < len(src) {
		tag := src[s]
		var length, offset int
		switch tag & 3 {
		case 0: // literal
			x := int(tag >> 2)
			s++
			if x >= 60 {
				nb := x - 59
				if s+nb > len(src) {
					return d, nil
				}
				x = 0
				for i := range nb {
					x |= int(src[s+i]) << (8 * i)
				}
				s += nb
			}
			m := min(x+1, len(dst)-d, len(src)-s)
			copy(dst[d:], src[s:s+m])
			d, s = d+m, s+m
			continue
		case 1:
			if s+2 > len(src) {
				return d, nil
			}
			length, offset = 4+int(tag>>2)&7, int(tag&0xe0)<<3|int(src[s+1])
			s += 2
		case 2:
			if s+3 > len(src) {
				return d, nil
			}
			length, offset = 1+int(tag>>2), int(binary.LittleEndian.Uint16(src[s+1:]))
			s += 3
		default:
			if s+5 > len(src) {
				return d, nil
			}
			length, offset = 1+int(tag>>2), int(binary.LittleEndian.Uint32(src[s+1:]))
			s += 5
		}
		if offset <= 0 || offset > d {
			return corrupt(fmt.Sprintf("copy from %d bytes back at byte %d", offset, d))
		}
		for end := min(d+length, len(dst)); d < end; d++ { // overlapping copies repeat
			dst[d] = dst[d-offset]
		}
	}
	return d, nil
}

// placed reports whether locs are pages in order inside [lo, hi) whose rows
// add up to rows.
func placed(locs []pageLoc, rows, lo, hi int64) bool {
	var next int64
	pos := lo
	for _, l := range locs {
		if l.first != next || l.rows < 0 || l.off < pos || l.size <= 0 || l.off+l.size > hi {
			return false
		}
		next += l.rows
		pos = l.off + l.size
	}
	return next == rows && len(locs) > 0
}

// piece is rows of a row group that a reader decodes by themselves, and
// where: column col's share of a piece (decodePages).
type piece struct {
	rg, col int
	rows    rowRange
	mem     memory.Allocator
	stats   *ReadStats
	e       *rgEntry // the reader's entry of the row group: what its pieces share
}

// decodePages decodes rows p.rows of column p.col from the pages that hold
// them, fetched alone, or returns nil (no error) when those pages do not
// qualify for the fast path after all (the column is then decoded whole).
// Where the entry's last piece decoded pages holding those rows, it slices
// them instead (ReadStats.Reused).
func (d *parquetDecoder) decodePages(ctx context.Context, ds *Dataset, p piece, locs []pageLoc) (arrow.Array, error) {
	c, e, start, end := &d.cols[p.col], p.e, p.rows.lo, p.rows.hi
	if a := e.reuse(p.col, start, end); a != nil {
		p.stats.Reused.Add(1)
		return a, nil
	}
	i, j := pageSpan(locs, c.slot(start), c.slot(end))
	if i >= j {
		return nil, fmt.Errorf("loader: %s row group %d column %q: no page holds rows [%d, %d): %w", d.f.Object.URI, p.rg, c.name, start, end, ErrCorrupt)
	}
	t := pageTail(locs, j) // and the pages ending the last row
	off, n := locs[i].off, locs[t-1].off+locs[t-1].size-locs[i].off
	first, slots := locs[i].first, locs[j-1].first+locs[j-1].rows-locs[i].first
	ra, err := ds.fetchChunks(ctx, ds.fileIndex(d.f), p.rg, []Chunk{{Column: c.name, Offset: off, Length: n}}, p.stats)
	if err != nil {
		return nil, err
	}
	defer ra.release()
	if ra.mapped {
		defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	}
	b, ok := ra.bytesAt(off, n)
	if !ok {
		return nil, nil
	}
	md := &d.pf.Metadata().RowGroups[p.rg].Columns[c.leaf].MetaData
	if err := checkPages(b, md, d.maxBytes); err != nil {
		return nil, fmt.Errorf("loader: %s row group %d column %q pages %d..%d: %w", d.f.Object.URI, p.rg, c.name, i, t-1, err)
	}
	v := chunkView{b: b, codec: md.Codec, first: first, n: slots, cut: c.kind == kindList && (locs[i].cont || t > j)}
	out, err := c.decodeRows(v, p.rows, outSpec{mem: p.mem, maxBytes: d.maxBytes, ed: edges{e, p.col, i, p.stats}})
	if err == errFallback {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("loader: %s row group %d column %q pages %d..%d (slots %d..%d): %w", d.f.Object.URI, p.rg, c.name, i, t-1, first, first+slots-1, err)
	}
	p.stats.Pages.Add(int64(t - i))
	a := out.a
	if out.first == start && int64(a.Len()) == end-start {
		return a, nil
	}
	e.keep(p.col, a, out.first, int64(a.Len())) // not a fixed_size_list here: rows are slots
	defer a.Release()
	return array.NewSlice(a, start-out.first, end-out.first), nil
}

// edges lets decodeListPiece and decodeFastRows reuse the page a piece of
// the same row group ended in (rgEntry.takeEdge, keepEdge): the entry, the
// column, the index of the first page given, and the stats that count the
// reuse. The zero value reuses nothing (a whole column chunk).
type edges struct {
	e     *rgEntry
	col   int
	first int
	stats *ReadStats
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
		if !pages[i].v2 && v.codec != format.Uncompressed && v.codec != format.Snappy {
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
			putBuf(scratch)
		}
	}()
	pos, nrows, more := 0, 0, false
	for i := 0; i < len(pages) && !more; i++ {
		p := &pages[i]
		var rep []byte
		switch {
		case p.v2:
			rep = p.body[:p.repLevels]
		case codec == format.Uncompressed:
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
func (c *colDecoder) listValues(pages []fastPage, codec format.CompressionCodec, l listCut, o outSpec) (arrow.Array, error) {
	starts, lo, hi, ed := l.starts, l.r.lo, l.r.hi, o.ed
	var scratch []byte
	defer func() {
		if scratch != nil {
			putBuf(scratch)
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
			keep := y < pos+p.nvals && codec != format.Uncompressed
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
				ed.e.keepEdge(ed.col, ed.first+i, pre)
			case keep && own != nil: // nil: the page's values were stored raw (v2)
				ed.e.keepEdge(ed.col, ed.first+i, own)
			case pre != nil:
				putBuf(pre)
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
	a, err := one.decodeFastRows(chunkView{b: v.b, codec: v.codec, n: v.n}, rowRange{r.lo*L - v.first, r.hi*L - v.first}, o)
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
