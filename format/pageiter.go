package format

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"math/bits"

	"github.com/parquet-go/parquet-go/encoding/thrift"
	pqformat "github.com/parquet-go/parquet-go/format"
)

// The one walk over a column chunk's page headers. Every reader of page
// headers (the checks before decoding, the fast path, the piece locator,
// the empty-page overlay of the arrow-go route) walks them with a pageIter,
// so that a corrupt header is refused in one place: a page must fit in the
// chunk, its sizes and value count must not be negative, a v2 page's level
// sections must fit in it, and the pages together may not hold more values
// than the footer says nor decompress to more than the configured limit.

// pageKind is what a page header says its page is.
type pageKind int

const (
	pageDataV1 pageKind = iota // DATA_PAGE
	pageDataV2                 // DATA_PAGE_V2
	pageDict                   // DICTIONARY_PAGE
	pageIndex                  // INDEX_PAGE: skipped by every reader
	pageOther                  // a data page type without its header, or an unknown type
)

// pageLimits bounds what a chunk's pages may claim together.
type pageLimits struct {
	values int64 // the footer's num_values: data pages' num_values add up to at most this
	bytes  int64 // uncompressed_page_size adds up to at most this
}

// noLimits is for walks over bytes whose chunk was checked before (a run of
// its pages, or a chunk walkPages has walked).
var noLimits = pageLimits{values: math.MaxInt64, bytes: math.MaxInt64}

// chunkLimits returns the limits of the chunk whose metadata is md, decoded
// under limit bytes; a footer claiming more values than limit is ErrCorrupt.
func chunkLimits(md *pqformat.ColumnMetaData, limit int64) (pageLimits, error) {
	if md.NumValues < 0 || md.NumValues > limit {
		return pageLimits{}, fmt.Errorf("footer claims %d values in the chunk, over the limit of %d: %w; the footer is corrupt, or raise loader.WithMaxRowGroupBytes (the cap on one column chunk's decoded bytes)", md.NumValues, limit, ErrCorrupt)
	}
	return pageLimits{values: md.NumValues, bytes: limit}, nil
}

// pageHead is one page as the walk finds it.
type pageHead struct {
	h     pqformat.PageHeader
	kind  pageKind
	index int    // the page's number in the walk
	at    int64  // offset of its header from the start of the walk
	hdr   int64  // header bytes
	size  int64  // compressed_page_size: body bytes after the header
	body  []byte // the body, when the walked bytes hold it whole
	nvals int    // a data page's num_values (levels, nulls included)
}

// end returns the offset of the byte after the page from the walk's start.
func (p *pageHead) end() int64 { return p.at + p.hdr + p.size }

// v2 returns a v2 data page's header.
func (p *pageHead) v2() *pqformat.DataPageHeaderV2 { return &p.h.DataPageHeaderV2.V }

// v1 returns a v1 data page's header.
func (p *pageHead) v1() *pqformat.DataPageHeader { return &p.h.DataPageHeader.V }

// pageIter walks the page headers of a column chunk, or of a run of its
// pages, held whole or seen through windows of it (window).
type pageIter struct {
	buf    []byte // the bytes seen: the walk's bytes [bufAt, bufAt+len(buf))
	bufAt  int64
	total  int64 // bytes of the walk: every page must end within them
	pos    int64 // offset of the next header
	lim    pageLimits
	n      int   // pages walked
	values int64 // num_values of the data pages walked
	bytes  int64 // uncompressed_page_size of the pages walked
	err    error
	short  bool // stopped at a page the window does not hold (window to go on)
	proto  thrift.CompactProtocol
	br     bytes.Reader // over buf: headers are decoded from it, one decoder per buffer
	dec    *thrift.Decoder
}

// newPageIter walks the pages in chunk, all of them there.
func newPageIter(chunk []byte, lim pageLimits) *pageIter {
	it := &pageIter{total: int64(len(chunk)), lim: lim}
	it.window(chunk, 0)
	return it
}

// newPageWindows walks the pages of total bytes seen through windows, the
// first given to window.
func newPageWindows(total int64, lim pageLimits) *pageIter {
	return &pageIter{total: total, lim: lim}
}

// window gives the walk the bytes from offset at on (at must be where the
// walk stands: it.pos), and clears short.
func (it *pageIter) window(buf []byte, at int64) {
	it.buf, it.bufAt, it.short = buf, at, false
	it.br.Reset(buf)
	it.dec = thrift.NewDecoder(it.proto.NewReader(&it.br))
}

// Err returns the corruption that ended the walk, nil when it ended at the
// end of the bytes (or short, at the end of a window).
func (it *pageIter) Err() error { return it.err }

// corrupt ends the walk with an ErrCorrupt error about the page at at.
func (it *pageIter) corrupt(msg string, args ...any) bool {
	it.err = fmt.Errorf("page %d at chunk offset %d: %s: %w", it.n, it.pos, fmt.Sprintf(msg, args...), ErrCorrupt)
	return false
}

// next fills p with the next page and reports whether there is one. At the
// end it returns false with Err nil; at a corrupt header, false with Err
// set; when the window ends inside a header, or before a page body when
// whole bodies are asked for (whole), false with short set.
func (it *pageIter) next(p *pageHead, whole bool) bool {
	if it.err != nil || it.short || it.pos >= it.total {
		return false
	}
	rel := it.pos - it.bufAt
	if rel < 0 || rel >= int64(len(it.buf)) {
		it.short = true
		return false
	}
	it.br.Seek(rel, io.SeekStart)
	*p = pageHead{index: it.n, at: it.pos}
	if err := it.dec.Decode(&p.h); err != nil {
		if it.bufAt+int64(len(it.buf)) < it.total {
			it.short = true // the window may cut the header: read on
			return false
		}
		return it.corrupt("header: %v", err)
	}
	h := &p.h
	p.hdr = int64(len(it.buf)) - rel - int64(it.br.Len())
	p.size = int64(h.CompressedPageSize)
	if h.CompressedPageSize < 0 || p.size > it.total-it.pos-p.hdr {
		return it.corrupt("%d compressed bytes, but %d left in the chunk", h.CompressedPageSize, it.total-it.pos-p.hdr)
	}
	if h.UncompressedPageSize < 0 {
		return it.corrupt("negative uncompressed size %d", h.UncompressedPageSize)
	}
	if it.bytes += int64(h.UncompressedPageSize); it.bytes > it.lim.bytes {
		return it.corrupt("pages decompress to more than %d bytes; the file is corrupt, or raise loader.WithMaxRowGroupBytes (the cap on one column chunk's decoded bytes)", it.lim.bytes)
	}
	n := int32(0)
	switch {
	case h.Type == pqformat.DataPage && h.DataPageHeader.Valid:
		p.kind, n = pageDataV1, h.DataPageHeader.V.NumValues
	case h.Type == pqformat.DataPageV2 && h.DataPageHeaderV2.Valid:
		v := &h.DataPageHeaderV2.V
		p.kind, n = pageDataV2, v.NumValues
		if v.RepetitionLevelsByteLength < 0 || v.DefinitionLevelsByteLength < 0 {
			return it.corrupt("negative level lengths %d, %d", v.RepetitionLevelsByteLength, v.DefinitionLevelsByteLength)
		}
		if lv := int64(v.RepetitionLevelsByteLength) + int64(v.DefinitionLevelsByteLength); lv > p.size || lv > int64(h.UncompressedPageSize) {
			return it.corrupt("%d bytes of levels in a page of %d (%d uncompressed)", lv, p.size, h.UncompressedPageSize)
		}
		if v.NumNulls < 0 || v.NumNulls > v.NumValues || v.NumRows < 0 {
			return it.corrupt("%d nulls, %d rows for %d values", v.NumNulls, v.NumRows, v.NumValues)
		}
	case h.Type == pqformat.DictionaryPage:
		p.kind = pageDict
	case h.Type == pqformat.IndexPage:
		p.kind = pageIndex
	default:
		p.kind = pageOther
	}
	if n < 0 {
		return it.corrupt("negative value count %d", n)
	}
	p.nvals = int(n)
	if it.values += int64(n); it.values > it.lim.values {
		return it.corrupt("pages hold more values than the footer's %d", it.lim.values)
	}
	if body := rel + p.hdr; body+p.size <= int64(len(it.buf)) {
		p.body = it.buf[body : body+p.size]
	} else if whole {
		it.values -= int64(n)
		it.bytes -= int64(h.UncompressedPageSize)
		it.short = true
		return false
	}
	it.pos = p.end()
	it.n++
	return true
}

// levelRuns checks n RLE/bit-packed hybrid levels of a column whose max
// level is max, read in runs without expanding them. It returns nil when
// every level is at max in RLE runs, errFallback when a run holds a level
// below max or is bit-packed (the decoders that expand levels take the
// chunk: nulls, empty lists, or a writer that bit-packs), and ErrCorrupt
// when a run's level is above max or the runs end before n levels.
func levelRuns(levels []byte, max, n int) error {
	width := (bits.Len(uint(max)) + 7) / 8
	for count := 0; count < n; {
		h, k := binary.Uvarint(levels)
		if k <= 0 {
			return fmt.Errorf("definition levels: %d of %d levels, then no run header: %w", count, n, ErrCorrupt)
		}
		if h&1 != 0 {
			return errFallback
		}
		if len(levels)-k < width {
			return fmt.Errorf("definition levels: truncated run: %w", ErrCorrupt)
		}
		v := 0
		for i := 0; i < width; i++ {
			v |= int(levels[k+i]) << (8 * i)
		}
		switch {
		case v > max:
			return fmt.Errorf("definition level %d, max %d: %w", v, max, ErrCorrupt)
		case v < max:
			return errFallback
		}
		count += int(min(h>>1, uint64(n)))
		levels = levels[k+width:]
	}
	return nil
}

// levelsAbove returns the index of the first level above max, or -1.
func levelsAbove(levels []byte, max int) int {
	for i, l := range levels {
		if int(l) > max {
			return i
		}
	}
	return -1
}
