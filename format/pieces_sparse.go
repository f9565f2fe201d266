package format

import (
	"context"
	"encoding/binary"

	pqformat "github.com/parquet-go/parquet-go/format"
)

// Sparse edge pages: of the pages holding a piece's rows, the first and the
// last may hold rows outside the piece. Where a piece copies its own rows
// alone out of those pages (a fixed_size_list of fixed-width values:
// decodeFixedListSlots) and their values are stored uncompressed (codec
// UNCOMPRESSED, v1 pages located by their headers), only what decoding
// reads of them is fetched: the header, the level sections, and the values
// of the piece's rows. A v1 page's values are its last slots x width bytes
// (PLAIN, no nulls), so where the piece's values start and end in it is
// known from the walk alone; once fetched, the page's level sections are
// checked to end exactly there (sparseLayout), else the pages are fetched
// whole. The bytes left out are never read: the decoder reads a page's
// header, its repetition levels' length (not the levels: checkLevels),
// its definition levels, and the values of the piece's rows
// (fastPagePart).

// sparseMin is the fewest bytes of a page's values worth leaving out: a
// part left out at the start of a piece's values costs a second ranged
// request.
const sparseMin = 64 << 10

// fetchPages fetches the pages locs of column p.col (the pages holding
// slots [lo, hi), the first holding lo, the last holding hi-1): sparse
// (sparseParts) where the column and pages allow and the fetcher does,
// else whole.
func (d *parquetDecoder) fetchPages(ctx context.Context, p piece, md *pqformat.ColumnMetaData, locs []pageLoc, lo, hi int64) (Fetched, error) {
	c := &d.cols[p.col]
	first, last := locs[0], locs[len(locs)-1]
	ch := Chunk{Column: c.name, Offset: first.off, Length: last.off + last.size - first.off}
	if sf, ok := p.fetch.(SparseFetcher); ok && sf.Sparse() {
		if parts := c.sparseParts(md, locs, lo, hi); parts != nil {
			ra, err := sf.FetchSparse(ctx, p.rg, ch, parts)
			if err != nil {
				return nil, err
			}
			if b, ok := ra.BytesAt(ch.Offset, ch.Length); ok && c.sparseLayout(b, ch.Offset, locs) {
				skipped := ch.Length
				for _, r := range parts {
					skipped -= r[1] - r[0]
				}
				p.stats.SparseSkipped.Add(skipped)
				return ra, nil
			}
			ra.Release()
		}
	}
	return p.fetch.Fetch(ctx, p.rg, []Chunk{ch})
}

// sparseParts returns the byte ranges of pages locs to fetch for slots
// [lo, hi) of c, leaving out the values of the slots outside them in the
// first and last pages where those are at least sparseMin bytes; nil when
// nothing is left out (the column, the codec or the pages do not allow it).
func (c *colDecoder) sparseParts(md *pqformat.ColumnMetaData, locs []pageLoc, lo, hi int64) [][2]int64 {
	if c.kind != kindFixedList || !c.fastEligible() || md.Codec != pqformat.Uncompressed {
		return nil
	}
	w := int64(c.elemSize)
	first, last := locs[0], locs[len(locs)-1]
	var holes [][2]int64
	if skip := lo - first.first; first.hdr > 0 && skip > 0 && skip <= first.rows && skip*w >= sparseMin {
		if vs := first.off + first.size - w*first.rows; vs >= first.off+first.hdr {
			holes = append(holes, [2]int64{vs, vs + skip*w})
		}
	}
	if keep := hi - last.first; last.hdr > 0 && keep > 0 && keep < last.rows && (last.rows-keep)*w >= sparseMin {
		if vs := last.off + last.size - w*last.rows; vs >= last.off+last.hdr {
			holes = append(holes, [2]int64{vs + keep*w, last.off + last.size})
		}
	}
	if len(holes) == 0 {
		return nil
	}
	var parts [][2]int64
	at := first.off
	for _, h := range holes {
		if h[0] > at {
			parts = append(parts, [2]int64{at, h[0]})
		}
		at = max(at, h[1])
	}
	if end := last.off + last.size; at < end {
		parts = append(parts, [2]int64{at, end})
	}
	return parts
}

// sparseLayout reports whether the first and last of pages locs, fetched
// sparse into b (the bytes from off), are laid out as sparseParts
// assumed: a v1 body whose repetition and definition level sections
// (4-byte length, then the levels) end exactly where its last
// slots x width bytes of values begin. It reads only their headers' ends
// and level lengths, which sparseParts fetched.
func (c *colDecoder) sparseLayout(b []byte, off int64, locs []pageLoc) bool {
	for _, l := range []pageLoc{locs[0], locs[len(locs)-1]} {
		if l.hdr <= 0 {
			return false
		}
		lo, hi := l.off+l.hdr-off, l.off+l.size-off
		if lo < 0 || hi > int64(len(b)) || lo > hi {
			return false
		}
		body := b[lo:hi]
		levels := int64(len(body)) - int64(c.elemSize)*l.rows
		if levels < 4 {
			return false
		}
		at := 4 + int64(binary.LittleEndian.Uint32(body)) // repetition levels
		if c.maxDef > 0 {
			if at+4 > levels {
				return false
			}
			at += 4 + int64(binary.LittleEndian.Uint32(body[at:]))
		}
		if at != levels {
			return false
		}
	}
	return true
}
