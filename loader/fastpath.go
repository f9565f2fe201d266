package loader

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/snappy"
	"github.com/klauspost/compress/zstd"
	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/format"

	"github.com/meshfeed/meshfeed/internal/arrowmem"
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
// The repetition levels of a fixed_size_list are skipped, not checked: the
// slow path does not check them either (it counts values only). Those of a
// list give its offsets: a row starts at every level 0 (decodeFastList). Counts are
// checked: every page's values must be num_values elements, and the chunk's
// values rows x list size; a mismatch is ErrCorrupt.

// fastChunks counts column chunks decoded by the fast path; tests read it.
var fastChunks atomic.Int64

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
func fastCodec(codec format.CompressionCodec) bool {
	switch codec {
	case format.Uncompressed, format.Snappy, format.Zstd, format.Gzip:
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
	pages, err := c.fastPages(v.b, v.codec)
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
	values := arrowmem.NewOverwriteBuffer(o.mem, int((vals.hi-vals.lo)*int64(c.elemSize)))
	defer values.Release() // the array holds its own reference
	if err := c.writePages(pages, v.codec, vals, values.Bytes(), o.ed); err != nil {
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

// writePages writes values [vals.lo, vals.hi) of pages into dst (exactly
// their size), for decodeFastRows.
func (c *colDecoder) writePages(pages []fastPage, codec format.CompressionCodec, vals rowRange, dst []byte, ed edges) error {
	var scratch []byte
	defer func() {
		if scratch != nil {
			putBuf(scratch)
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
	if ed.e != nil && codec != format.Uncompressed && vals.lo > 0 {
		pre = ed.take(ed.first)
	}
	defer func() {
		if pre != nil { // not used after all
			putBuf(pre)
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
			err = c.fastPageV1(p, codec, dst, start, n, &scratch)
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
func (c *colDecoder) fastPages(chunk []byte, codec format.CompressionCodec) (pages []fastPage, err error) {
	it := newPageIter(chunk, noLimits)
	var h pageHead
	for it.next(&h, true) {
		p := fastPage{body: h.body, size: int(h.h.UncompressedPageSize), nvals: h.nvals}
		switch h.kind {
		case pageDataV1:
			dh := h.v1()
			if dh.Encoding != format.Plain ||
				(c.maxDef > 0 && dh.DefinitionLevelEncoding != format.RLE) ||
				((c.kind == kindFixedList || c.kind == kindList) && dh.RepetitionLevelEncoding != format.RLE) {
				return nil, errFallback
			}
			if codec == format.Uncompressed && p.size != len(p.body) {
				return nil, errFallback
			}
		case pageDataV2:
			dh := h.v2()
			if dh.Encoding != format.Plain || dh.NumNulls != 0 {
				return nil, errFallback
			}
			p.v2 = true
			p.levels = int(dh.RepetitionLevelsByteLength) + int(dh.DefinitionLevelsByteLength)
			p.repLevels = int(dh.RepetitionLevelsByteLength)
			p.valuesRaw = codec == format.Uncompressed || (dh.IsCompressed.Valid && !dh.IsCompressed.V)
			if err := c.checkLevels(p.body[:p.repLevels], p.body[p.repLevels:p.levels], p.nvals, true); err != nil {
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

// checkLevels checks the levels of a fast-path page of c holding n values:
// a fixed_size_list's repetition levels must parse with no level above 1
// (a list's are read by rowStarts, which checks them), and the definition
// levels must all be at the max (levelRuns: errFallback when some are below,
// ErrCorrupt when one is above or they end early). A v2 page may leave out
// its level sections (v2 set): its num_nulls of 0 then stands for them.
func (c *colDecoder) checkLevels(rep, def []byte, n int, v2 bool) error {
	if c.kind == kindFixedList && !(v2 && len(rep) == 0) {
		if _, _, err := rowStarts(rep, n, 0, nil, 0); err != nil {
			return err
		}
	}
	if c.maxDef == 0 || v2 && len(def) == 0 {
		return nil
	}
	return levelRuns(def, c.maxDef, n)
}

// fastPageV2 writes a v2 page's values into out (exactly its size). The
// levels are skipped: num_nulls is 0, so every level is at the maximum.
func fastPageV2(p *fastPage, codec format.CompressionCodec, out []byte) error {
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
func (c *colDecoder) fastPageV1(p *fastPage, codec format.CompressionCodec, dst []byte, start, n int, scratch *[]byte) error {
	out := dst[start : start+n : start+n]
	page := p.body
	if codec != format.Uncompressed {
		var buf []byte
		if lv := p.size - n; lv >= 0 && lv <= start {
			buf = dst[start-lv : start+n : start+n]
		} else {
			if cap(*scratch) < p.size {
				if *scratch != nil {
					putBuf(*scratch)
				}
				*scratch = getBuf(int64(p.size))
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
func (c *colDecoder) fastPageNarrow(p *fastPage, codec format.CompressionCodec, out []byte, scratch *[]byte) error {
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
func (c *colDecoder) edgePage(p *fastPage, codec format.CompressionCodec, part pagePart, scratch *[]byte, ed edges) error {
	if ed.e == nil || codec == format.Uncompressed {
		return c.fastPagePart(p, codec, part.out, part.first, scratch, nil)
	}
	var own []byte
	buf := scratch
	if part.more && part.pre == nil {
		buf = &own
	}
	err := c.fastPagePart(p, codec, part.out, part.first, buf, part.pre)
	switch {
	case err == nil && part.more && part.pre != nil:
		ed.e.keepEdge(ed.col, ed.first+part.i, part.pre)
	case err == nil && part.more && own != nil: // nil: the values were stored raw (v2)
		ed.e.keepEdge(ed.col, ed.first+part.i, own)
	default:
		if part.pre != nil {
			putBuf(part.pre)
		}
		if own != nil {
			putBuf(own)
		}
	}
	return err
}

// fastPagePart writes the page's values from its value first on into out
// (as many as out holds, narrowed where c is), after checking that its
// definition levels hold no null: the part of a page that a piece's rows
// cover, at the piece's edges. The values of an uncompressed page are
// copied from the page itself; a compressed page is decompressed into
// *scratch first, unless pre holds it decompressed already.
func (c *colDecoder) fastPagePart(p *fastPage, codec format.CompressionCodec, out []byte, first int, scratch *[]byte, pre []byte) error {
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
func (c *colDecoder) pageValues(p *fastPage, codec format.CompressionCodec, scratch *[]byte, pre []byte) ([]byte, error) {
	page := p.body
	if p.v2 {
		page = p.body[p.levels:]
	}
	if n := p.size - p.levels; (p.v2 && !p.valuesRaw) || (!p.v2 && codec != format.Uncompressed) {
		if !p.v2 {
			n = p.size
		}
		switch {
		case pre != nil:
			if len(pre) != n {
				return nil, fmt.Errorf("page decompressed before to %d bytes, want %d: %w", len(pre), n, ErrCorrupt)
			}
			page = pre
		default:
			if cap(*scratch) < n {
				if *scratch != nil {
					putBuf(*scratch)
				}
				*scratch = getBuf(int64(n))
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

// v1Values returns the values of the decompressed v1 page of c holding n
// values, past its level sections, which checkLevels checks.
func (c *colDecoder) v1Values(page []byte, n int) ([]byte, error) {
	var rep, def []byte
	var err error
	if c.kind == kindFixedList {
		if rep, page, err = levelSection(page); err != nil {
			return nil, err
		}
	}
	if c.maxDef > 0 {
		if def, page, err = levelSection(page); err != nil {
			return nil, err
		}
	}
	if err := c.checkLevels(rep, def, n, false); err != nil {
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

// zstdDecoder decodes every fast-path ZSTD page (DecodeAll is safe for
// concurrent use). The cap limit makes a frame that claims more than the
// page's uncompressed size an error instead of an allocation of that size.
var zstdDecoder = sync.OnceValues(func() (*zstd.Decoder, error) {
	return zstd.NewReader(nil, zstd.WithDecoderConcurrency(0), zstd.WithDecodeAllCapLimit(true))
})

// gzipReaders are reset onto each page.
var gzipReaders sync.Pool

// gunzipInto decodes a gzip stream that must hold exactly len(out) bytes.
func gunzipInto(out, src []byte) error {
	br := bytes.NewReader(src)
	z, _ := gzipReaders.Get().(*gzip.Reader)
	var err error
	if z == nil {
		z, err = gzip.NewReader(br)
	} else {
		err = z.Reset(br)
	}
	if err != nil {
		return fmt.Errorf("GZIP: %w: %w", err, ErrCorrupt)
	}
	defer gzipReaders.Put(z)
	if _, err := io.ReadFull(z, out); err != nil {
		return fmt.Errorf("GZIP data shorter than %d bytes: %w: %w", len(out), err, ErrCorrupt)
	}
	var one [1]byte
	if n, err := z.Read(one[:]); n != 0 || err != io.EOF {
		return fmt.Errorf("GZIP data longer than %d bytes, or a corrupt end (%v): %w", len(out), err, ErrCorrupt)
	}
	return nil
}

// decompressInto decodes src into out, which must be exactly the decoded
// size. Every codec of fastCodec decodes into out; another (not reached)
// would go through parquet-go's codec and a copy.
func decompressInto(codec format.CompressionCodec, out, src []byte) error {
	out = out[:len(out):len(out)]
	var got []byte
	var err error
	switch codec {
	case format.Snappy:
		// Check the stated length first: Decode allocates it when out is
		// smaller.
		var n int
		if n, err = snappy.DecodedLen(src); err == nil && n != len(out) {
			return fmt.Errorf("%s data decodes to %d bytes, want %d: %w", codec, n, len(out), ErrCorrupt)
		}
		if err == nil {
			got, err = snappy.Decode(out, src)
		}
	case format.Zstd:
		var d *zstd.Decoder
		if d, err = zstdDecoder(); err == nil {
			got, err = d.DecodeAll(src, out[:0])
		}
	case format.Gzip:
		return gunzipInto(out, src)
	default:
		got, err = parquet.LookupCompressionCodec(codec).Decode(out, src)
	}
	if err != nil {
		return fmt.Errorf("%s: %w: %w", codec, err, ErrCorrupt)
	}
	if len(got) != len(out) {
		return fmt.Errorf("%s data decodes to %d bytes, want %d: %w", codec, len(got), len(out), ErrCorrupt)
	}
	if len(got) > 0 && unsafe.SliceData(got) != unsafe.SliceData(out) {
		copy(out, got)
	}
	return nil
}

// decodeFastListRows decodes a list<fixed-width> chunk on the fast path:
// the values are copied (or decompressed) straight into the Arrow values
// buffer, and the offsets come from the repetition levels, read in their
// RLE and bit-packed runs without expanding them. errFallback when the
// chunk does not qualify (a null or empty list, a null element: decodeChunk
// handles those). With v.cut set, the pages are a run of a chunk's pages
// (pieces_pages.go) that may begin inside a row (the values before the
// first row start belong to the row before: they stay in the values buffer,
// before the first offset) and may end past the end of its v.n-th row
// (decoding stops at the next row start, which ends that row).
func (c *colDecoder) decodeFastListRows(v chunkView, o outSpec) (arrow.Array, error) {
	rows, piece, codec, mem := v.n, v.cut, v.codec, o.mem
	if !c.fastEligible() || !fastCodec(codec) || rows < 0 || rows > math.MaxInt32 {
		return nil, errFallback
	}
	pages, err := c.fastPages(v.b, codec)
	if err != nil {
		return nil, err
	}
	var total int64
	for i := range pages {
		total += int64(pages[i].nvals)
	}
	if total*int64(c.elemSize) > o.maxBytes || total > math.MaxInt32 {
		return nil, errFallback // decodeChunk reports the limit
	}
	values := arrowmem.NewOverwriteBuffer(mem, int(total)*c.elemSize)
	defer values.Release() // the array holds its own references
	offsets := newBuf(mem, 4*(int(rows)+1))
	defer offsets.Release()
	offs := unsafe.Slice((*int32)(unsafe.Pointer(unsafe.SliceData(offsets.Bytes()))), int(rows)+1)
	dst := values.Bytes()
	var scratch []byte
	defer func() {
		if scratch != nil {
			putBuf(scratch)
		}
	}()
	starts := offs[:rows] // a piece records the start of the row after its last too
	if piece {
		starts = offs[:rows+1]
	}
	pos, nrows, more := 0, 0, false
	for i := 0; i < len(pages) && !more; i++ {
		p := &pages[i]
		rep, vals, err := c.listPageParts(p, codec, &scratch, nil)
		if err == errFallback {
			return nil, err
		}
		if err == nil && len(vals) != p.nvals*c.elemSize {
			err = fmt.Errorf("%d bytes of values for %d values of %d bytes: %w", len(vals), p.nvals, c.elemSize, ErrCorrupt)
		}
		if err == nil {
			nrows, more, err = rowStarts(rep, p.nvals, pos, starts, nrows)
		}
		if err == nil && more && !piece {
			err = fmt.Errorf("pages hold more than the footer's %d rows: %w", rows, ErrCorrupt)
		}
		if err != nil {
			return nil, fmt.Errorf("page %d: %w", i, err)
		}
		copy(dst[pos*c.elemSize:], vals)
		pos += p.nvals
	}
	if !piece && rows > 0 && nrows > 0 && offs[0] != 0 {
		return nil, fmt.Errorf("the chunk's first value does not start a row (repetition level 1): %w", ErrCorrupt)
	}
	nvals := int(total)
	if nrows > int(rows) { // a piece's next row start: the end of its values
		nrows, nvals = int(rows), int(offs[rows])
	}
	st := &colState{c: c, mem: mem, values: values, nvals: nvals, offsets: offsets, rows: nrows}
	a, err := st.finish(rows)
	if err != nil {
		return nil, err
	}
	fastChunks.Add(1)
	return a, nil
}

// listPageParts returns the repetition levels and the value bytes of a list
// page, decompressing it into *scratch if need be (or taking pre, what
// decompressing it gave before, when not nil), after checking that its
// definition levels are all at the max (no null or empty list, no null
// element); errFallback if they are not.
func (c *colDecoder) listPageParts(p *fastPage, codec format.CompressionCodec, scratch *[]byte, pre []byte) (rep, vals []byte, err error) {
	decompress := func(src []byte, n int) ([]byte, error) {
		if pre != nil {
			if len(pre) != n {
				return nil, fmt.Errorf("page decompressed before to %d bytes, want %d: %w", len(pre), n, ErrCorrupt)
			}
			return pre, nil
		}
		if cap(*scratch) < n {
			if *scratch != nil {
				putBuf(*scratch)
			}
			*scratch = getBuf(int64(n))
		}
		buf := (*scratch)[:n:n]
		return buf, decompressInto(codec, buf, src)
	}
	var def []byte
	if p.v2 {
		rep, def = p.body[:p.repLevels], p.body[p.repLevels:p.levels]
		vals = p.body[p.levels:]
		if !p.valuesRaw {
			if vals, err = decompress(vals, p.size-p.levels); err != nil {
				return nil, nil, err
			}
		}
	} else {
		page := p.body
		if codec != format.Uncompressed {
			if page, err = decompress(page, p.size); err != nil {
				return nil, nil, err
			}
		}
		if rep, page, err = levelSection(page); err != nil {
			return nil, nil, err
		}
		if def, vals, err = levelSection(page); err != nil {
			return nil, nil, err
		}
	}
	if p.v2 && len(def) == 0 {
		return nil, nil, errFallback
	}
	if err := levelRuns(def, c.maxDef, p.nvals); err != nil {
		return nil, nil, err
	}
	return rep, vals, nil
}

// rowStarts reads n repetition levels (max level 1: bit width 1, in RLE and
// bit-packed runs) of values numbered from base, and records the number of
// every value at level 0, which starts a row, in offs[nrows:]. It returns
// the new row count. With offs nil it only counts the rows. When offs is
// full and another row starts, it stops there and reports more (the caller
// decides whether that is corrupt). A level above 1 or a run that does not
// parse is ErrCorrupt.
func rowStarts(rep []byte, n, base int, offs []int32, nrows int) (rows int, more bool, err error) {
	count := offs == nil
	for done := 0; done < n; {
		h, k := binary.Uvarint(rep)
		if k <= 0 || h>>1 == 0 {
			return 0, false, fmt.Errorf("repetition levels: bad run header: %w", ErrCorrupt)
		}
		rep = rep[k:]
		if h&1 == 0 { // RLE run: one byte of value
			if len(rep) < 1 {
				return 0, false, fmt.Errorf("repetition levels: truncated run: %w", ErrCorrupt)
			}
			run := int(min(h>>1, uint64(n-done)))
			switch rep[0] {
			case 0: // every value starts a row (lists of one)
				if count {
					nrows += run
					break
				}
				take := min(run, len(offs)-nrows)
				for j := range take {
					offs[nrows+j] = int32(base + done + j)
				}
				nrows += take
				if take < run {
					return nrows, true, nil
				}
			case 1:
			default:
				return 0, false, fmt.Errorf("repetition level %d, max 1: %w", rep[0], ErrCorrupt)
			}
			rep = rep[1:]
			done += run
			continue
		}
		// Bit-packed: h>>1 groups of 8 levels, one byte each, LSB first.
		if h>>1 > uint64(len(rep)) {
			return 0, false, fmt.Errorf("repetition levels: truncated bit-packed run: %w", ErrCorrupt)
		}
		groups := rep[:h>>1]
		rep = rep[h>>1:]
		for len(groups) > 0 && done < n {
			// Eight groups at a time: a row starts at every 0 bit.
			var w uint64
			nb := min(len(groups), 8)
			if nb == 8 {
				w = binary.LittleEndian.Uint64(groups)
			} else {
				for i, b := range groups[:nb] {
					w |= uint64(b) << (8 * i)
				}
			}
			groups = groups[nb:]
			m := ^w
			if valid := min(nb*8, n-done); valid < 64 {
				m &= 1<<valid - 1
			}
			if count {
				nrows += bits.OnesCount64(m)
			}
			for ; m != 0 && !count; m &= m - 1 {
				if nrows == len(offs) {
					return nrows, true, nil
				}
				offs[nrows] = int32(base + done + bits.TrailingZeros64(m))
				nrows++
			}
			done += nb * 8
		}
	}
	return nrows, false, nil
}

// firstLevel returns the first of the RLE/bit-packed hybrid repetition
// levels rep (bit width 1); false when rep holds none.
func firstLevel(rep []byte) (byte, bool) {
	h, k := binary.Uvarint(rep)
	if k <= 0 || h>>1 == 0 || len(rep) <= k {
		return 0, false
	}
	if h&1 == 0 {
		return rep[k], true
	}
	return rep[k] & 1, true
}
