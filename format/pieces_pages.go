package format

import (
	"context"
	"fmt"
	"sort"
	"sync"

	"github.com/parquet-go/parquet-go/encoding/thrift"
	pqformat "github.com/parquet-go/parquet-go/format"

	"github.com/meshfeed/meshfeed/internal/bufpool"
)

// The pages of a piece (pieces.go): where a streamed column's data pages lie
// and which rows each holds, and decoding only the pages of a row range.

// pageWindow is the bytes read at a time to walk page headers without an
// offset index, and hopWindow the bytes read at a page's start once the
// pages walked are larger than pageWindow (each window then holds one
// header: its page's body is not needed).
const (
	pageWindow = 64 << 10
	hopWindow  = 4 << 10
)

// pageLoc is one data page of a column chunk: its bytes (header and body)
// in the file and the slots it holds: rows, or for a fixed_size_list[n]
// column values (n per row: pages need not start at a row).
type pageLoc struct {
	off, size   int64
	first, rows int64 // slots
	cont        bool  // a list page whose first values end the row begun before it
	hdr         int64 // v1 pages located by their headers: the header's bytes (else 0)
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

// pages returns the page locations of column i of row group p.rg, located
// on the Shared's first need; nil when the column cannot be streamed. The
// locations are also kept for other readers of the row group (d.located):
// the readers of a mixture's or a single dataset's slices that read parts
// of one row group walk its pages' headers once between them, not once
// each.
func (d *parquetDecoder) pages(ctx context.Context, p piece, i int) ([]pageLoc, error) {
	rg, stats, e := p.rg, p.stats, p.e
	e.mu.Lock()
	defer e.mu.Unlock()
	if locs, ok := e.locs[i]; ok {
		return locs, nil
	}
	locs, err := d.located.get(rg, i, func() ([]pageLoc, error) {
		stats.ChunksLocated.Add(1)
		return d.locatePages(ctx, rg, &d.cols[i], d.chunkSource(p, i), stats)
	})
	if err != nil {
		return nil, fmt.Errorf("format: %s row group %d column %q: locating pages: %w", d.uri, rg, d.cols[i].name, err)
	}
	if e.locs == nil {
		e.locs = map[int][]pageLoc{}
	}
	e.locs[i] = locs
	return locs, nil
}

// pageCacheSize is how many row groups' columns a decoder keeps the page
// locations of (pageCache): each is a few dozen bytes per page, and the
// readers that share a row group read it at about the same time.
const pageCacheSize = 64

// pageCache keeps the page locations of the pageCacheSize (row group,
// column) pairs located last, for every reader of a file: locating walks
// the chunk's page headers (a read per page where pages are larger than
// pageWindow), which each reader of a part of the row group would
// otherwise repeat. Readers asking for one pair at once wait for the first
// to locate it; a failed locate is not kept (the next asks again).
type pageCache struct {
	mu    sync.Mutex
	m     map[[2]int]*pageCached
	order [][2]int // the keys in m, oldest first
}

type pageCached struct {
	mu   sync.Mutex
	done bool
	locs []pageLoc // nil when the column cannot be streamed; read only
}

// get returns the locations of column col of row group rg, from locate on
// the first ask.
func (c *pageCache) get(rg, col int, locate func() ([]pageLoc, error)) ([]pageLoc, error) {
	k := [2]int{rg, col}
	c.mu.Lock()
	e, ok := c.m[k]
	if !ok {
		if c.m == nil {
			c.m = map[[2]int]*pageCached{}
		}
		if len(c.order) >= pageCacheSize {
			delete(c.m, c.order[0])
			c.order = append(c.order[:0], c.order[1:]...)
		}
		e = &pageCached{}
		c.m[k] = e
		c.order = append(c.order, k)
	}
	c.mu.Unlock()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.done {
		return e.locs, nil
	}
	locs, err := locate()
	if err != nil {
		return nil, err
	}
	e.locs, e.done = locs, true
	return locs, nil
}

// chunkSource returns where the page walk of column i of row group p.rg
// reads: the chunk's bytes held by p's fetcher (format.HeldFetcher) when
// it holds all of them, else the file.
func (d *parquetDecoder) chunkSource(p piece, i int) Source {
	h, ok := p.fetch.(HeldFetcher)
	if !ok {
		return d.src
	}
	off, n := chunkRange(&d.pf.Metadata().RowGroups[p.rg].Columns[d.cols[i].leaf].MetaData)
	b, ok := h.HeldBytes(p.rg, off, n)
	if !ok {
		return d.src
	}
	return heldSource{Source: d.src, off: off, b: b}
}

// heldSource is a file whose bytes [off, off+len(b)) are b, in memory:
// reads inside them are not fetches (counted), others go to the file.
type heldSource struct {
	Source
	off int64
	b   []byte
}

func (s heldSource) ReadAt(ctx context.Context, p []byte, off int64) error {
	if off >= s.off && off+int64(len(p)) <= s.off+int64(len(s.b)) {
		copy(p, s.b[off-s.off:])
		return nil
	}
	return s.Source.ReadAt(ctx, p, off)
}

// countRead counts in stats a read of n bytes at off from src, unless src
// held them in memory.
func countRead(stats *Stats, src Source, off, n int64) {
	if h, ok := src.(heldSource); ok && off >= h.off && off+n <= h.off+int64(len(h.b)) {
		return
	}
	stats.Fetches.Add(1)
	stats.FetchedBytes.Add(n)
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
//
// Length: one walk, whose window, list levels and locations live across its
// two loops.
func (d *parquetDecoder) locatePages(ctx context.Context, rg int, c *colDecoder, src Source, stats *Stats) ([]pageLoc, error) {
	cc := &d.pf.Metadata().RowGroups[rg].Columns[c.leaf]
	md := &cc.MetaData
	rows := d.rows(rg)
	chunkOff, chunkLen := chunkRange(md)
	if cc.OffsetIndexOffset > 0 && cc.OffsetIndexLength > 0 {
		return d.indexedPages(ctx, rg, c, stats)
	}
	// No offset index: walk the headers, pageWindow bytes at a time.
	var locs []pageLoc
	end := chunkOff + chunkLen
	var first int64
	buf := bufpool.Get(pageWindow)
	defer func() { bufpool.Put(buf) }()
	lv := listLevels{src: src, stats: stats}
	defer lv.release()
	lim, err := chunkLimits(md, d.maxBytes)
	if err != nil {
		return nil, nil // decoding the chunk whole reports it
	}
	it := newPageWindows(chunkLen, lim)
	want := int64(pageWindow)
	hops := hopReads{src: src, stats: stats, chunkOff: chunkOff, chunkLen: chunkLen}
	defer hops.release()
	var prev, last int64 // the sizes of the last two pages walked
	for it.pos < chunkLen {
		if int64(cap(buf)) < want {
			bufpool.Put(buf)
			buf = bufpool.Get(want)
		}
		w := min(want, chunkLen-it.pos)
		win, wpos := buf[:w], chunkOff+it.pos
		if err := hops.read(ctx, win, it.pos); err != nil {
			return nil, err
		}
		it.window(win, it.pos)
		parsed := 0
		var h pageHead
		for it.next(&h, false) {
			pos := chunkOff + h.at
			prev, last = last, h.hdr+h.size
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
				var hdr int64
				if h.kind == pageDataV1 {
					hdr = h.hdr
				}
				locs = append(locs, pageLoc{off: pos, size: h.hdr + h.size, first: first, rows: n, hdr: hdr})
				first += n
			}
			parsed++
		}
		if it.Err() != nil {
			return nil, nil // a header that does not parse: decoding the chunk whole reports it
		}
		switch {
		case parsed == 0 && it.pos < chunkLen:
			if want >= 16<<20 {
				return nil, nil
			}
			want *= 2 // a header larger than the window (large statistics)
		case c.kind != kindList && last > pageWindow:
			// Pages larger than a window: read the next header alone (a
			// list's levels are read from the window: keep it whole), and
			// where the pages are of one size, the next ones' at once.
			want = hopWindow
			if prev == last {
				hops.predict(ctx, it.pos, last)
			}
		default:
			want = pageWindow
		}
	}
	if !placed(locs, c.slot(rows), chunkOff, end) {
		return nil, nil
	}
	return locs, nil
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

// indexedPages is locatePages from the column chunk's offset index.
func (d *parquetDecoder) indexedPages(ctx context.Context, rg int, c *colDecoder, stats *Stats) ([]pageLoc, error) {
	cc := &d.pf.Metadata().RowGroups[rg].Columns[c.leaf]
	rows := d.rows(rg)
	chunkOff, chunkLen := chunkRange(&cc.MetaData)
	if cc.OffsetIndexLength > 64<<20 || cc.OffsetIndexOffset+int64(cc.OffsetIndexLength) > d.src.Size() {
		return nil, fmt.Errorf("offset index [%d, +%d) outside the file's %d bytes: %w", cc.OffsetIndexOffset, cc.OffsetIndexLength, d.src.Size(), ErrCorrupt)
	}
	buf := make([]byte, cc.OffsetIndexLength)
	if err := d.src.ReadAt(ctx, buf, cc.OffsetIndexOffset); err != nil {
		return nil, err
	}
	stats.Fetches.Add(1)
	stats.FetchedBytes.Add(int64(len(buf)))
	var oi pqformat.OffsetIndex
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
