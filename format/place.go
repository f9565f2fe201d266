package format

import (
	"errors"
	"fmt"
	"sync/atomic"

	pqformat "github.com/parquet-go/parquet-go/format"

	"github.com/meshfeed/meshfeed/internal/bufpool"
	"github.com/meshfeed/meshfeed/internal/ntcopy"
)

// Pieces whose values go into the caller's memory (Piece.Into): a
// mixture's slice holds its sources' rows back to back, so a piece's rows
// go to the slices of the several steps that take them. A column's pages
// are decoded straight into those slices, without a buffer of the piece's
// own in between (which would write every byte twice).

// Into asks DecodeRange to write the values of some columns of a piece
// into the caller's memory instead of the record's buffers.
type Into struct {
	// Bounds are the piece's rows (from its first, 0) where each
	// destination begins, ascending, then the piece's row count.
	Bounds []int64
	// Cols[i], for column i of the projection, is nil or one destination
	// per run of rows: Cols[i][j] receives the values of rows [Bounds[j],
	// Bounds[j+1]), exactly their bytes.
	Cols [][][]byte
	// Placed[i] is set by DecodeRange for each column it wrote into
	// Cols[i] (len(Cols) entries); the record it returns leaves those
	// columns out. The others are decoded as without Into.
	Placed []bool
}

// placeScatterMin is the least compressed size of a snappy page, in
// eighths of its decoded size, that is decoded straight into its
// destinations (snappyScatter): below it, the page's copies are many and
// short, which the klauspost decoder makes faster than snappyScatter does
// even with a copy after (BenchmarkSnappyScatter, 1 MiB of values: compressed
// to 0.4, 0.74-0.93 ms whole, 0.79-1.0 copied out after, 2.6-3.8
// scattered; random, 0.20-0.24 ms whole, 0.31-0.37 copied out after,
// 0.20-0.24 scattered).
const placeScatterMin = 7

// scatteredPages counts the pages snappyScatter decoded, keptPlaced the
// pieces placed from a kept page without a fetch (placeKept; for tests).
var scatteredPages, keptPlaced atomic.Int64

// placeable reports whether rows [start, end) of column c, on pages locs,
// can be placed: a fixed-width column of whole bytes (primitive, or a
// fixed-size list of one, not narrowed), whose rows start in pages of
// their own (not lists' pages).
func (c *colDecoder) placeable(locs []pageLoc, start, end int64) bool {
	if c.kind != kindPrimitive && c.kind != kindFixedList || c.narrowed() || !c.fastEligible() {
		return false
	}
	i, j := pageSpan(locs, c.slot(start), c.slot(end))
	return i < j && pageTail(locs, j) == j
}

// placePages writes values [vals.lo, vals.hi) of pages (those of the
// piece's rows, counted from the first page's first) into dst, the
// piece's destinations of the column, which must hold exactly their
// bytes. A page the range holds whole is decoded straight into dst where
// it is a snappy page of values it barely compresses (scatterPage), else
// decompressed to scratch and copied; a page the range cuts (its edge)
// is decompressed once for the reader's pieces it is in, as decodeRows
// does (edges: taken from the piece before, kept for the next). ed is
// the piece's edges; errFallback: a page does not qualify (a null, an
// encoding other than PLAIN); the column is then decoded as without Into,
// and dst's bytes are unspecified until then.
func (c *colDecoder) placePages(pages []fastPage, codec pqformat.CompressionCodec, vals rowRange, dst [][]byte, ed edges) error {
	if !fastCodec(codec) {
		return errFallback
	}
	es := int64(c.elemSize)
	var total int64
	for _, d := range dst {
		total += int64(len(d))
	}
	if total != (vals.hi-vals.lo)*es {
		return fmt.Errorf("destinations of %d bytes for %d values of %d bytes (internal error)", total, vals.hi-vals.lo, es)
	}
	var bufs placeBufs
	defer bufs.release()
	segs := make([][]byte, 0, len(dst)+1)
	at, skip := 0, 0 // dst[at][skip:] is where the next page's values go
	var first int64  // the page's first value
	for i := range pages {
		p := &pages[i]
		pf := first
		from, to := max(pf, vals.lo), min(pf+int64(p.nvals), vals.hi)
		first += int64(p.nvals)
		if from >= to {
			continue
		}
		segs = append(segs[:0], nil) // room for the levels
		for left := int((to - from) * es); left > 0; {
			for len(dst[at]) == skip {
				at, skip = at+1, 0
			}
			d := dst[at][skip:]
			k := min(left, len(d))
			segs = append(segs, d[:k])
			left -= k
			skip += k
		}
		var err error
		if from == pf && to == first {
			var ok bool
			if ok, err = c.scatterPage(p, codec, segs, &bufs, false); err == nil && !ok {
				err = c.copyPage(p, codec, segs[1:], 0, &bufs.scratch, nil)
			}
		} else {
			// more: a later piece of the reader reads the page past this
			// piece's values (ed.until: none reads from there on).
			more := to < first && to < ed.until
			err = c.placeEdge(p, codec, edgePart{segs: segs[1:], first: int(from - pf), i: i, more: more, taken: from > pf, cut: to < first}, &bufs, ed)
		}
		if errors.Is(err, errFallback) {
			return errFallback
		}
		if err != nil {
			return fmt.Errorf("page %d: %w", i, err)
		}
	}
	if first < vals.hi {
		return fmt.Errorf("pages hold %d values, want at least %d: %w", first, vals.hi, ErrCorrupt)
	}
	return nil
}

// copyPage copies the values of page p from its value first on into segs
// (as many as they hold), the page decompressed into *scratch unless pre
// holds it decompressed (pageValues).
func (c *colDecoder) copyPage(p *fastPage, codec pqformat.CompressionCodec, segs [][]byte, first int, scratch *[]byte, pre []byte) error {
	page, err := c.pageValues(p, codec, scratch, pre)
	if err != nil {
		return err
	}
	es := c.elemSize
	if len(page) != p.nvals*es {
		return fmt.Errorf("%d bytes of values for %d values of %d bytes: %w", len(page), p.nvals, es, ErrCorrupt)
	}
	page = page[first*es:]
	for _, s := range segs {
		if len(s) > len(page) {
			return fmt.Errorf("values past the page's %d: %w", p.nvals, ErrCorrupt)
		}
		page = page[ntcopy.Copy(s, page):] // into the slices: see scatterOut.put
	}
	return nil
}

// placeBufs is placePages' scratch: a page decompressed (or the values
// before a piece's, scatterEdge), v1 levels (both from the fetch buffer
// pool), and scatterPage's segments and their ends.
type placeBufs struct {
	scratch, levels []byte
	segs            [][]byte
	ends            []int
}

func (b *placeBufs) release() {
	for _, x := range [][]byte{b.scratch, b.levels} {
		if x != nil {
			bufpool.Put(x)
		}
	}
}

// edgePart is the part of page i of a piece's pages that the piece's
// rows cover, at the piece's edges, for placeEdge: its values from first
// on go into segs (as many as they hold); taken: the piece starts inside
// the page (the piece before may have kept it decompressed); cut: the
// piece ends inside it; more: a later piece of the reader reads it past
// the piece's values (the next one starts inside it).
type edgePart struct {
	segs             [][]byte
	first, i         int
	taken, cut, more bool
}

// placeEdge is edgePage for a page whose values go into part.segs: with ed
// set and a compressed page, the page is taken decompressed from the
// piece before where it starts inside it, and kept for the next piece
// where that one starts inside it. A page no piece kept and no later
// piece reads is decoded straight into part.segs where scatterEdge can.
func (c *colDecoder) placeEdge(p *fastPage, codec pqformat.CompressionCodec, part edgePart, bufs *placeBufs, ed edges) error {
	if ed.e == nil || codec == pqformat.Uncompressed {
		return c.copyPage(p, codec, part.segs, part.first, &bufs.scratch, nil)
	}
	var pre []byte
	if part.taken {
		pre = ed.take(ed.first + part.i)
	}
	if pre == nil && p.body == nil {
		return errFallback // placeKept's page, taken by another piece since
	}
	if pre == nil && !part.more {
		if ok, err := c.scatterEdge(p, codec, part, bufs); ok || err != nil {
			return err
		}
	}
	n, _ := decompressedLen(p, codec)
	return ed.around(part.i, n, pre, part.more, &bufs.scratch, func(buf *[]byte, pre []byte) error {
		return c.copyPage(p, codec, part.segs, part.first, buf, pre)
	})
}

// scatterEdge decodes the page of part, which no later piece of the
// reader reads, as scatterPage does: its values before the piece's into
// scratch (where the piece starts inside it: a stream's first piece),
// and none past the piece's (where it ends inside it: a stream's last),
// so that neither the piece's values are copied nor those past them
// decoded. false: not a page scatterPage takes.
func (c *colDecoder) scatterEdge(p *fastPage, codec pqformat.CompressionCodec, part edgePart, bufs *placeBufs) (bool, error) {
	segs := append(bufs.segs[:0], nil) // room for the levels
	if head := part.first * c.elemSize; head > 0 {
		bufs.scratch = growBuf(bufs.scratch, int64(head))
		segs = append(segs, bufs.scratch[:head])
	}
	segs = append(segs, part.segs...)
	bufs.segs = segs
	return c.scatterPage(p, codec, segs, bufs, part.cut)
}

// scatterPage decodes a snappy page that compresses its values little
// (placeScatterMin) straight into segs[1:] (its values' destinations),
// its v1 levels into segs[0] (from bufs.levels, the fetch buffer pool),
// and checks them as pageValues does; with prefix, only as many of its
// values as segs[1:] hold, its first. false: not such a page, or one
// snappyScatter refused (the caller decodes it the usual way, which
// reports what is wrong with it).
func (c *colDecoder) scatterPage(p *fastPage, codec pqformat.CompressionCodec, segs [][]byte, bufs *placeBufs, prefix bool) (bool, error) {
	if codec != pqformat.Snappy || p.v2 && p.valuesRaw {
		return false, nil
	}
	n := p.nvals * c.elemSize
	src, lv := p.body, p.size-n
	if p.v2 {
		src, lv = p.body[p.levels:], 0
		if p.size-p.levels != n {
			return false, nil
		}
	}
	if lv < 0 || len(src)*8 < (lv+n)*placeScatterMin {
		return false, nil
	}
	bufs.levels = growBuf(bufs.levels, int64(lv))
	segs[0] = bufs.levels[:lv:lv]
	if cap(bufs.ends) < len(segs) {
		bufs.ends = make([]int, len(segs))
	}
	if snappyScatter(segs, bufs.ends, src, prefix) != nil {
		return false, nil
	}
	if p.v2 {
		scatteredPages.Add(1)
		return true, nil
	}
	// The levels, as v1Values reads them: they must end where the values
	// begin (a page with nulls holds fewer values than its levels).
	rest, err := c.v1Values(segs[0], p.nvals)
	if errors.Is(err, errFallback) {
		return false, errFallback
	}
	if err != nil {
		return false, nil // the usual decode reports it
	}
	if len(rest) != 0 {
		return false, nil
	}
	scatteredPages.Add(1)
	return true, nil
}

// checkInto checks p's Into against the piece and the projection and
// clears its Placed; nil without one.
func (d *parquetDecoder) checkInto(p piece) (*Into, error) {
	in := p.into
	if in == nil {
		return nil, nil
	}
	rows := p.rows.hi - p.rows.lo
	b := in.Bounds
	if len(b) < 2 || b[0] != 0 || b[len(b)-1] != rows || len(in.Cols) != len(d.cols) || len(in.Placed) != len(d.cols) {
		return nil, fmt.Errorf("format: %s row group %d rows [%d, %d): Into of bounds %v for %d columns, Placed %d (internal error)", d.uri, p.rg, p.rows.lo, p.rows.hi, b, len(in.Cols), len(in.Placed))
	}
	for j := 1; j < len(b); j++ {
		if b[j] < b[j-1] {
			return nil, fmt.Errorf("format: %s row group %d: Into's bounds %v descend (internal error)", d.uri, p.rg, b)
		}
	}
	for i, dst := range in.Cols {
		in.Placed[i] = false
		if dst == nil {
			continue
		}
		c := &d.cols[i]
		if c.kind != kindPrimitive && c.kind != kindFixedList {
			continue // not placed (placeable)
		}
		if len(dst) != len(b)-1 {
			return nil, fmt.Errorf("format: %s column %q: %d destinations for %d runs of rows (internal error)", d.uri, c.name, len(dst), len(b)-1)
		}
		w := int64(c.elemSize)
		if c.kind == kindFixedList {
			w *= int64(c.listSize)
		}
		for j, s := range dst {
			if int64(len(s)) != (b[j+1]-b[j])*w {
				return nil, fmt.Errorf("format: %s column %q: a destination of %d bytes for %d rows of %d bytes (internal error)", d.uri, c.name, len(s), b[j+1]-b[j], w)
			}
		}
	}
	return in, nil
}

// placeKept places rows [start, end) of column c (slots [lo, hi) of page
// i of locs) from the page the piece before kept decompressed (edges),
// without fetching it: a narrow column's page holds many of a reader's
// pieces, each of which would fetch (map and drop) its compressed bytes
// only to take the kept page. false where the page is not kept or its
// header not read yet (the caller fetches as usual).
func (d *parquetDecoder) placeKept(p piece, locs []pageLoc, i int, into [][]byte) (bool, error) {
	c, e := &d.cols[p.col], p.e
	lo, hi := c.slot(p.rows.lo), c.slot(p.rows.hi)
	md := &d.pf.Metadata().RowGroups[p.rg].Columns[c.leaf].MetaData
	if md.Codec == pqformat.Uncompressed || lo <= locs[i].first || hi > locs[i].first+locs[i].rows || !e.hasEdge(p.col, i) {
		return false, nil
	}
	fp, ok := e.fastHead(p.col, i)
	if !ok || fp.v2 { // a v2 page's values are past its levels in its body
		return false, nil
	}
	err := c.placePages([]fastPage{fp}, md.Codec, rowRange{lo - locs[i].first, hi - locs[i].first}, into, edges{e, p.col, i, p.stats, c.untilOf(p, locs[i].first), p.mem})
	if err == errFallback {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("format: %s row group %d column %q page %d (slots %d..%d): %w", d.uri, p.rg, c.name, i, lo, hi-1, err)
	}
	p.stats.Pages.Add(1)
	p.stats.PagesPlaced.Add(1)
	keptPlaced.Add(1)
	return true, nil
}

// hasEdge reports whether page page of column col is kept decompressed.
func (e *Shared) hasEdge(col, page int) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	p, ok := e.edges[col]
	return ok && p.page == page
}

// fastHead returns page page of column col as fastPages read it (its body
// nil), where a piece read it.
func (e *Shared) fastHead(col, page int) (fastPage, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	h, ok := e.heads[col][page]
	return h.p, ok
}
