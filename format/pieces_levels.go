package format

// Where a v1 list page's rows lie: its repetition levels read while the
// page headers are walked (pieces_pages.go), from the window of headers,
// a read of their own, or the start of a SNAPPY page decoded alone.

import (
	"context"
	"encoding/binary"
	"fmt"

	pqformat "github.com/parquet-go/parquet-go/format"

	"github.com/meshfeed/meshfeed/internal/bufpool"
)

// listLevels reads the repetition levels of a list column's v1 pages while
// locatePages walks their headers: from the window of headers read (win, at
// file offset wpos) when it holds them, else from a read of their own.
type listLevels struct {
	src   Source
	stats *Stats
	win   []byte
	wpos  int64
	read  []byte // pooled: bytes read past the window
	plain []byte // pooled: a page decompressed
}

func (lv *listLevels) release() {
	for _, b := range [][]byte{lv.read, lv.plain} {
		if b != nil {
			bufpool.Put(b)
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
	if err := lv.src.ReadAt(ctx, b[have:], off+have); err != nil {
		return nil, err
	}
	countRead(lv.stats, lv.src, off+have, n-have)
	return b, nil
}

// growBuf returns a pooled buffer of at least n bytes: b if it is large
// enough, else a new one (b returned to the pool).
func growBuf(b []byte, n int64) []byte {
	if int64(cap(b)) >= n {
		return b[:n]
	}
	if b != nil {
		bufpool.Put(b)
	}
	return bufpool.Get(n)
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
func (lv *listLevels) rows(ctx context.Context, c *colDecoder, codec pqformat.CompressionCodec, h *pqformat.PageHeader, body, maxBytes int64) (pageRows, error) {
	var err error
	dh := &h.DataPageHeader.V
	size, usize := int64(h.CompressedPageSize), int64(h.UncompressedPageSize)
	if c.maxRep != 1 || dh.RepetitionLevelEncoding != pqformat.RLE || dh.NumValues <= 0 ||
		(c.maxDef > 0 && dh.DefinitionLevelEncoding != pqformat.RLE) ||
		usize < 4 || usize > maxBytes || size < 4 || (codec == pqformat.Uncompressed && size != usize) {
		return pageRows{}, errFallback
	}
	sections := 1 // repetition levels, then definition levels
	if c.maxDef > 0 {
		sections = 2
	}
	var levels []byte // the page's start, holding its level sections
	switch codec {
	case pqformat.Uncompressed: // the levels lead the body: read them alone
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
	case pqformat.Snappy:
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
