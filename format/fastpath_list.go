package format

// The fast path of list columns: values copied out of the pages, offsets
// read from the repetition levels in their runs.

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	pqformat "github.com/parquet-go/parquet-go/format"

	"github.com/meshfeed/meshfeed/internal/arrowmem"
	"github.com/meshfeed/meshfeed/internal/bufpool"
)

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
			bufpool.Put(scratch)
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
func (c *colDecoder) listPageParts(p *fastPage, codec pqformat.CompressionCodec, scratch *[]byte, pre []byte) (rep, vals []byte, err error) {
	decompress := func(src []byte, n int) ([]byte, error) {
		if pre != nil {
			if len(pre) != n {
				return nil, fmt.Errorf("page decompressed before to %d bytes, want %d: %w", len(pre), n, ErrCorrupt)
			}
			return pre, nil
		}
		if cap(*scratch) < n {
			if *scratch != nil {
				bufpool.Put(*scratch)
			}
			*scratch = bufpool.Get(int64(n))
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
		if codec != pqformat.Uncompressed {
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
