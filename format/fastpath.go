package format

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/parquet-go/parquet-go"
	pqformat "github.com/parquet-go/parquet-go/format"

	"github.com/meshfeed/meshfeed/internal/arrowmem"
	"github.com/meshfeed/meshfeed/internal/bufpool"
)

// Fast path: fixed-width columns, and lists of them, without nulls in PLAIN
// pages are decoded
// straight from the fetched chunk bytes into the Arrow buffer, without
// parquet-go's page machinery (which expands every repetition and definition
// level to a byte and copies each page through two intermediate buffers).
//
// A chunk takes the fast path when all of these hold, else it falls back to
// decodeChunk, which decodes everything:
//
//   - the column is a fixed-width primitive (not bool), or a fixed_size_list
//     or list of one, stored in a physical type of the element's exact width;
//     or an 8- or 16-bit integer (or a fixed_size_list of them) stored as
//     INT32, narrowed, checked, straight from the page into the Arrow buffer
//     (fastPageNarrow; lists of them are narrowed after decoding);
//   - the codec is UNCOMPRESSED, SNAPPY, ZSTD or GZIP;
//   - there is no dictionary page and every data page is PLAIN;
//   - no page holds a null or an empty list: v2 pages say num_nulls == 0;
//     v1 pages' definition levels are RLE runs all equal to the max level.
//
// The repetition levels of a fixed_size_list are skipped, not checked
// (checkLevels says why). Those of a
// list give its offsets: a row starts at every level 0 (decodeFastList). Counts are
// checked: every page's values must be num_values elements, and the chunk's
// values rows x list size; a mismatch is ErrCorrupt.

// fastChunks counts column chunks decoded by the fast path; tests read it.
var fastChunks atomic.Int64

// scratchPages counts whole compressed v1 pages decompressed into scratch
// and copied out (fastPageV1: no room before their values); tests read it.
var scratchPages atomic.Int64

// errFallback is returned inside the fast path when a chunk turns out not to
// qualify after decoding started (v1 definition levels that are not all at
// the max level); the caller then decodes the chunk with decodeChunk.
var errFallback = errors.New("fast path does not apply")

// fastPage is one data page of a fast-path chunk, located in the chunk.
type fastPage struct {
	body      []byte // compressed_page_size bytes following the header
	v2        bool
	nvals     int  // num_values: levels, and values since there are no nulls
	size      int  // uncompressed_page_size
	levels    int  // v2: bytes of repetition and definition levels (never compressed)
	repLevels int  // v2: bytes of repetition levels (the first part of levels)
	valuesRaw bool // v2: values stored uncompressed (codec none or is_compressed false)
}

// fastCodec reports whether the fast path decodes codec.
func fastCodec(codec pqformat.CompressionCodec) bool {
	switch codec {
	case pqformat.Uncompressed, pqformat.Snappy, pqformat.Zstd, pqformat.Gzip:
		return true
	}
	return false
}

// fastEligible reports whether c's layout qualifies for the fast path; the
// chunk's metadata and pages are checked by decodeFast.
func (c *colDecoder) fastEligible() bool {
	if c.kind != kindPrimitive && c.kind != kindFixedList && c.kind != kindList {
		return false
	}
	return c.elemSize > 0 && physWidth(c.phys) == c.elemSize
}

// decodeFastRows decodes the values of rows [r.lo, r.hi) of the rows
// the pages of v hold (v.n; r relative to the pages' first row) for a column
// that is not a list: of a page holding rows on both sides of r.lo or r.hi
// only those inside are written, the others' values are not copied (a page
// outside is not decoded at all). With o.ed set (a piece of a row group), a
// compressed page the range ends inside is kept decompressed for the row
// group's next piece, which starts in it, and the first page is taken from
// the piece before where it kept it. errFallback: the chunk does not
// qualify (nothing was allocated).
func (c *colDecoder) decodeFastRows(v chunkView, r rowRange, o outSpec) (arrow.Array, error) {
	rows, lo, hi := v.n, r.lo, r.hi
	if !(c.fastEligible() || c.narrowed()) || !fastCodec(v.codec) || rows < 0 || rows > math.MaxInt32 || lo < 0 || lo > hi || hi > rows {
		return nil, errFallback
	}
	per := int64(1)
	if c.kind == kindFixedList {
		per = int64(c.listSize)
	}
	want := rows * per // values
	vals := rowRange{lo * per, hi * per}
	if (vals.hi-vals.lo)*int64(c.elemSize) > o.maxBytes || want > math.MaxInt32 {
		return nil, errFallback // decodeChunk reports the limit
	}
	pages, err := v.fastPages(c)
	if err != nil {
		return nil, err
	}
	var total int64
	for i := range pages {
		total += int64(pages[i].nvals)
	}
	if total != want {
		return nil, fmt.Errorf("pages hold %d values, want %d rows x %d: %w", total, rows, per, ErrCorrupt)
	}
	// Every page inside the range writes its part, and so do the pages
	// across its ends: together they write every value of the buffer.
	size := int((vals.hi - vals.lo) * int64(c.elemSize))
	head := c.firstPageHead(pages, v.codec, vals, size)
	full := arrowmem.NewOverwriteBuffer(o.mem, head+size)
	values := full
	if head > 0 {
		// The values start past room for the first page's levels: it is
		// decompressed in place too (writePages), not through scratch.
		values = memory.SliceBuffer(full, head, size)
		full.Release()
	}
	defer values.Release() // the array holds its own reference
	if err := c.writePages(pages, v.codec, vals, full.Bytes(), head, o.ed); err != nil {
		return nil, err
	}
	st := &colState{c: c, mem: o.mem, values: values, nvals: int(vals.hi - vals.lo)}
	a, err := st.finish(hi - lo)
	if err != nil {
		return nil, err
	}
	fastChunks.Add(1)
	return a, nil
}

// firstPageHead returns the bytes to keep free before the values of rows
// vals (size bytes) of pages so that the first page, when it is a
// compressed v1 page whole inside them, decompresses in place like the
// others (its levels land in that room; fastPageV1): its levels' bytes,
// rounded up to 64 (values stay 64-byte aligned), or 0. Room of more than
// an eighth of the values (and 4 KiB) is not worth it.
func (c *colDecoder) firstPageHead(pages []fastPage, codec pqformat.CompressionCodec, vals rowRange, size int) int {
	if testNoHead || codec == pqformat.Uncompressed || c.narrowed() || c.kind == kindList {
		return 0
	}
	var at int64
	for i := range pages {
		p := &pages[i]
		next := at + int64(p.nvals)
		if next <= vals.lo {
			at = next
			continue
		}
		if at != vals.lo || next > vals.hi || p.v2 {
			return 0 // an edge page (decompressed to scratch either way), or v2 (values alone)
		}
		lv := p.size - p.nvals*c.elemSize
		head := (lv + 63) &^ 63
		if lv <= 0 || head > max(size/8, 4096) {
			return 0
		}
		return head
	}
	return 0
}

// testNoHead, set by a test, leaves no room before a piece's values.
var testNoHead bool

// writePages writes values [vals.lo, vals.hi) of pages into buf[head:]
// (exactly their size), for decodeFastRows; buf[:head] is free room the
// first page may decompress its levels into.
func (c *colDecoder) writePages(pages []fastPage, codec pqformat.CompressionCodec, vals rowRange, buf []byte, head int, ed edges) error {
	dst := buf[head:]
	var scratch []byte
	defer func() {
		if scratch != nil {
			bufpool.Put(scratch)
		}
	}()
	// Pages are decoded last to first: a compressed v1 page is decompressed
	// whole, levels first, into the end of the previous page's part of dst
	// plus its own, which the previous page then overwrites, so its values
	// land in place without a copy through a scratch buffer.
	starts := make([]int64, len(pages)+1) // the first value of each page
	for i := range pages {
		starts[i+1] = starts[i] + int64(pages[i].nvals)
	}
	// The first page, decompressed by the piece before, if it kept it:
	// taken before the last page may keep its own in its place.
	var pre []byte
	if ed.e != nil && codec != pqformat.Uncompressed && vals.lo > 0 {
		pre = ed.take(ed.first)
	}
	defer func() {
		if pre != nil { // not used after all
			ed.put(0, pre)
		}
	}()
	es := int64(c.elemSize)
	for i := len(pages) - 1; i >= 0; i-- {
		p := &pages[i]
		from, to := max(starts[i], vals.lo), min(starts[i+1], vals.hi)
		if from > to || from == to && p.nvals > 0 {
			continue // no value of the range
		}
		start, n := int((from-vals.lo)*es), int((to-from)*es)
		var err error
		switch {
		case from != starts[i] || to != starts[i+1]: // the range ends inside the page
			part := pagePart{out: dst[start : start+n : start+n], first: int(from - starts[i]), i: i, more: to < starts[i+1]}
			if i == 0 {
				part.pre, pre = pre, nil
			}
			err = c.edgePage(p, codec, part, &scratch, ed)
		case c.narrowed():
			err = c.fastPageNarrow(p, codec, dst[start:start+n:start+n], &scratch)
		case p.v2:
			err = fastPageV2(p, codec, dst[start:start+n:start+n])
		default:
			err = c.fastPageV1(p, codec, buf, head+start, n, &scratch)
		}
		if err == errFallback {
			return err
		}
		if err != nil {
			return fmt.Errorf("page %d: %w", i, err)
		}
	}
	return nil
}

// fastPages walks the page headers of chunk and returns its data pages, or
// errFallback if any page keeps the chunk off the fast path (dictionary, non
// PLAIN encoding, nulls, a header that does not parse: decodeChunk and
// checkPages report what is wrong with it). The level sections of v2 pages
// (never compressed) are checked here (checkLevels): a level above the max
// is ErrCorrupt.
func (c *colDecoder) fastPages(chunk []byte, codec pqformat.CompressionCodec) (pages []fastPage, err error) {
	it := newPageIter(chunk, noLimits)
	var h pageHead
	for it.next(&h, true) {
		p := fastPage{body: h.body, size: int(h.h.UncompressedPageSize), nvals: h.nvals}
		switch h.kind {
		case pageDataV1:
			dh := h.v1()
			if dh.Encoding != pqformat.Plain ||
				(c.maxDef > 0 && dh.DefinitionLevelEncoding != pqformat.RLE) ||
				((c.kind == kindFixedList || c.kind == kindList) && dh.RepetitionLevelEncoding != pqformat.RLE) {
				return nil, errFallback
			}
			if codec == pqformat.Uncompressed && p.size != len(p.body) {
				return nil, errFallback
			}
		case pageDataV2:
			dh := h.v2()
			if dh.Encoding != pqformat.Plain || dh.NumNulls != 0 {
				return nil, errFallback
			}
			p.v2 = true
			p.levels = int(dh.RepetitionLevelsByteLength) + int(dh.DefinitionLevelsByteLength)
			p.repLevels = int(dh.RepetitionLevelsByteLength)
			p.valuesRaw = codec == pqformat.Uncompressed || (dh.IsCompressed.Valid && !dh.IsCompressed.V)
			if err := c.checkLevels(p.body[p.repLevels:p.levels], p.nvals, true); err != nil {
				if err != errFallback {
					err = fmt.Errorf("page %d: %w", h.index, err)
				}
				return nil, err
			}
		case pageIndex:
			continue
		default: // dictionary pages, unknown page types
			return nil, errFallback
		}
		if int64(p.nvals)*int64(c.elemSize) > math.MaxInt32 {
			return nil, errFallback
		}
		pages = append(pages, p)
	}
	if it.Err() != nil {
		return nil, errFallback
	}
	return pages, nil
}

// checkLevels checks the definition levels of a fast-path page of c
// holding n values: they must all be at the max (levelRuns: errFallback
// when some are below, ErrCorrupt when one is above or they end early). A v2
// page may leave out its level sections (v2 set): its num_nulls of 0 then
// stands for them. Repetition levels are not read here: a list's are read
// by rowStarts (which checks them), a fixed_size_list's cannot move a value
// (every row holds n values, checked by count) and reading them costs work
// per row, a sixth of a decode of float32[8] rows.
func (c *colDecoder) checkLevels(def []byte, n int, v2 bool) error {
	if c.maxDef == 0 || v2 && len(def) == 0 {
		return nil
	}
	return levelRuns(def, c.maxDef, n)
}

// fastPageV2 writes a v2 page's values into out (exactly its size). The
// levels are skipped: num_nulls is 0, so every level is at the maximum.
func fastPageV2(p *fastPage, codec pqformat.CompressionCodec, out []byte) error {
	src := p.body[p.levels:]
	if p.size-p.levels != len(out) {
		return fmt.Errorf("%d bytes of values for %d values: %w", p.size-p.levels, len(out), ErrCorrupt)
	}
	if p.valuesRaw {
		if len(src) != len(out) {
			return fmt.Errorf("%d bytes of values for %d value bytes: %w", len(src), len(out), ErrCorrupt)
		}
		copy(out, src)
		return nil
	}
	return decompressInto(codec, out, src)
}

// fastPageV1 writes a v1 page's values into dst[start:start+n] (exactly
// their size) after checking that its definition levels hold no null. A
// compressed page is decompressed whole into dst[start-levels:start+n] when
// the bytes before start are free to use (the caller decodes pages last to
// first), else into *scratch (from the fetch buffer pool) and copied.
func (c *colDecoder) fastPageV1(p *fastPage, codec pqformat.CompressionCodec, dst []byte, start, n int, scratch *[]byte) error {
	out := dst[start : start+n : start+n]
	page := p.body
	if codec != pqformat.Uncompressed {
		var buf []byte
		if lv := p.size - n; lv >= 0 && lv <= start {
			buf = dst[start-lv : start+n : start+n]
		} else {
			scratchPages.Add(1)
			if cap(*scratch) < p.size {
				if *scratch != nil {
					bufpool.Put(*scratch)
				}
				*scratch = bufpool.Get(int64(p.size))
			}
			buf = (*scratch)[:p.size:p.size]
		}
		if err := decompressInto(codec, buf, page); err != nil {
			return err
		}
		page = buf
	}
	page, err := c.v1Values(page, p.nvals)
	if err != nil {
		return err
	}
	if len(page) != len(out) {
		return fmt.Errorf("%d bytes of values for %d values of %d bytes: %w", len(page), p.nvals, len(out)/max(p.nvals, 1), ErrCorrupt)
	}
	if len(out) > 0 && unsafe.SliceData(page) != unsafe.SliceData(out) {
		copy(out, page)
	}
	return nil
}

// fastPageNarrow writes a page's INT32 values into out (exactly nvals
// values of c's 8- or 16-bit type), narrowed and checked by convertInto (a
// value out of range is ErrCorrupt), after checking that its definition
// levels hold no null. A compressed page is decompressed into *scratch first:
// its values are wider than their place in out.
func (c *colDecoder) fastPageNarrow(p *fastPage, codec pqformat.CompressionCodec, out []byte, scratch *[]byte) error {
	if len(out) != p.nvals*c.elemSize {
		return fmt.Errorf("%d bytes for %d values: %w", len(out), p.nvals, ErrCorrupt)
	}
	return c.fastPagePart(p, codec, out, 0, scratch, nil)
}

// pagePart is the part of page i of a piece's pages that the piece's rows
// cover, at the piece's edges.
type pagePart struct {
	out   []byte // where its values go (as many as it holds)
	first int    // the first of its values in the page
	i     int    // the page's index in the pages given
	more  bool   // the next piece starts inside the page
	pre   []byte // the page decompressed by the piece before, or nil
}

// edgePage is fastPagePart for part of page p: part.pre, when set, is the
// page decompressed by the piece before (the caller owns it until this
// call, then this function does); with ed set, the page is kept
// decompressed for the next piece when part.more is set (the next piece
// starts inside it).
func (c *colDecoder) edgePage(p *fastPage, codec pqformat.CompressionCodec, part pagePart, scratch *[]byte, ed edges) error {
	if ed.e == nil || codec == pqformat.Uncompressed {
		return c.fastPagePart(p, codec, part.out, part.first, scratch, nil)
	}
	n, _ := decompressedLen(p, codec)
	return ed.around(part.i, n, part.pre, part.more, scratch, func(buf *[]byte, pre []byte) error {
		return c.fastPagePart(p, codec, part.out, part.first, buf, pre)
	})
}

// fastPagePart writes the page's values from its value first on into out
// (as many as out holds, narrowed where c is), after checking that its
// definition levels hold no null: the part of a page that a piece's rows
// cover, at the piece's edges. The values of an uncompressed page are
// copied from the page itself; a compressed page is decompressed into
// *scratch first, unless pre holds it decompressed already.
func (c *colDecoder) fastPagePart(p *fastPage, codec pqformat.CompressionCodec, out []byte, first int, scratch *[]byte, pre []byte) error {
	w, narrow := c.elemSize, c.narrowed()
	if narrow {
		w = 4 // INT32
	}
	page, err := c.pageValues(p, codec, scratch, pre)
	if err != nil {
		return err
	}
	if len(page) != w*p.nvals {
		return fmt.Errorf("%d bytes of values for %d values of %d bytes: %w", len(page), p.nvals, w, ErrCorrupt)
	}
	n := len(out) / c.elemSize
	if first < 0 || first+n > p.nvals || n*c.elemSize != len(out) {
		return fmt.Errorf("values [%d, %d) of a page of %d: %w", first, first+n, p.nvals, ErrCorrupt)
	}
	part := page[first*w : (first+n)*w]
	if narrow {
		return convertInto(out, c.elem.ID(), part, parquet.Int32, n)
	}
	copy(out, part)
	return nil
}

// pageValues returns the bytes of a page's values: the page's own bytes past
// its levels when its values are stored uncompressed, else the page
// decompressed into *scratch (from the fetch buffer pool), past its levels;
// pre, when set, is the page decompressed before (what *scratch would hold).
// A v1 page's definition levels are checked to hold no null (errFallback).
func (c *colDecoder) pageValues(p *fastPage, codec pqformat.CompressionCodec, scratch *[]byte, pre []byte) ([]byte, error) {
	page := p.body
	if p.v2 {
		page = p.body[p.levels:]
	}
	if n, ok := decompressedLen(p, codec); ok {
		switch {
		case pre != nil:
			if len(pre) != n {
				return nil, fmt.Errorf("page decompressed before to %d bytes, want %d: %w", len(pre), n, ErrCorrupt)
			}
			page = pre
		default:
			if cap(*scratch) < n {
				if *scratch != nil {
					bufpool.Put(*scratch)
				}
				*scratch = bufpool.Get(int64(n))
			}
			buf := (*scratch)[:n:n]
			if err := decompressInto(codec, buf, page); err != nil {
				return nil, err
			}
			page = buf
		}
	}
	if !p.v2 {
		return c.v1Values(page, p.nvals)
	}
	return page, nil
}

// decompressedLen returns the bytes pageValues decompresses page p into
// (*scratch), and false where it decompresses nothing (the page's values
// are stored raw).
func decompressedLen(p *fastPage, codec pqformat.CompressionCodec) (int, bool) {
	switch {
	case p.v2 && !p.valuesRaw:
		return p.size - p.levels, true
	case !p.v2 && codec != pqformat.Uncompressed:
		return p.size, true
	}
	return 0, false
}

// v1Values returns the values of the decompressed v1 page of c holding n
// values, past its level sections, which checkLevels checks.
func (c *colDecoder) v1Values(page []byte, n int) ([]byte, error) {
	var def []byte
	var err error
	if c.kind == kindFixedList { // repetition levels: skipped (checkLevels)
		if _, page, err = levelSection(page); err != nil {
			return nil, err
		}
	}
	if c.maxDef > 0 {
		if def, page, err = levelSection(page); err != nil {
			return nil, err
		}
	}
	if err := c.checkLevels(def, n, false); err != nil {
		return nil, err
	}
	return page, nil
}

// levelSection splits a v1 page's level section (4-byte little-endian length,
// then RLE/bit-packed hybrid data) from the rest of the page.
func levelSection(page []byte) (levels, rest []byte, err error) {
	if len(page) < 4 {
		return nil, nil, fmt.Errorf("page of %d bytes has no level section: %w", len(page), ErrCorrupt)
	}
	n := binary.LittleEndian.Uint32(page)
	if uint64(n) > uint64(len(page)-4) {
		return nil, nil, fmt.Errorf("level section of %d bytes in a page of %d: %w", n, len(page), ErrCorrupt)
	}
	return page[4 : 4+n], page[4+n:], nil
}
