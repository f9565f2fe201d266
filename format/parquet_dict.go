package format

// Dictionaries for filters: the dictionary page of a column chunk whose data
// pages are all dictionary-encoded holds every distinct value of the chunk,
// so a filter whose values are none of them (== and in on a string column,
// typically) rules the row group out without reading its data pages.

import (
	"context"
	"encoding/binary"
	"math"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	pqformat "github.com/parquet-go/parquet-go/format"
)

// maxDictBytes bounds the dictionary page read for a filter; a larger one
// is not read (the row group is then evaluated as without it).
const maxDictBytes = 8 << 20

// DictFooter is a Footer that reads a column chunk's dictionary (Parquet's).
type DictFooter interface {
	// ColumnDictionary returns every distinct value of top-level column
	// name in row group rg, as type out (a dictionary's value type),
	// allocated from mem, read from src (the file the footer was read
	// from): ok false when the chunk has no dictionary page, some data page
	// is not dictionary-encoded (or the footer does not say), the page is
	// too large, or its values do not convert to out exactly. An error is a
	// read or a corrupt page.
	ColumnDictionary(ctx context.Context, src Source, rg int, name string, out arrow.DataType, mem memory.Allocator) (dict arrow.Array, ok bool, err error)
}

var _ DictFooter = (*parquetFooter)(nil)

// ColumnDictionary implements DictFooter.
func (p *parquetFooter) ColumnDictionary(ctx context.Context, src Source, rg int, name string, out arrow.DataType, mem memory.Allocator) (arrow.Array, bool, error) {
	leaves := p.leaves[name]
	rgs := p.pf.Metadata().RowGroups
	if len(leaves) != 1 || rg < 0 || rg >= len(rgs) || leaves[0] >= len(rgs[rg].Columns) {
		return nil, false, nil
	}
	if d, ok := out.(*arrow.DictionaryType); ok {
		out = d.ValueType
	}
	md := &rgs[rg].Columns[leaves[0]].MetaData
	if !allDictEncoded(md) {
		return nil, false, nil
	}
	n := md.DataPageOffset - md.DictionaryPageOffset
	if n <= 0 || n > maxDictBytes || md.DictionaryPageOffset+n > src.Size() {
		return nil, false, nil
	}
	buf := make([]byte, n)
	if err := src.ReadAt(ctx, buf, md.DictionaryPageOffset); err != nil {
		return nil, false, err
	}
	it := newPageIter(buf, pageLimits{values: math.MaxInt64, bytes: 4 * maxDictBytes})
	var ph pageHead
	if !it.next(&ph, true) || ph.kind != pageDict || !ph.h.DictionaryPageHeader.Valid {
		return nil, false, it.Err()
	}
	raw := ph.body
	if md.Codec != pqformat.Uncompressed {
		raw = make([]byte, ph.h.UncompressedPageSize)
		if err := decompressInto(md.Codec, raw, ph.body); err != nil {
			return nil, false, err
		}
	}
	return plainValues(raw, int(ph.h.DictionaryPageHeader.V.NumValues), md.Type, out, mem)
}

// allDictEncoded reports whether the footer says that every data page of
// the chunk is dictionary-encoded (a writer falls back to PLAIN when the
// dictionary grows too large, and those values are not in the dictionary).
func allDictEncoded(md *pqformat.ColumnMetaData) bool {
	if md.DictionaryPageOffset <= 0 || len(md.EncodingStats) == 0 {
		return false
	}
	data := 0
	for _, s := range md.EncodingStats {
		if s.PageType != pqformat.DataPage && s.PageType != pqformat.DataPageV2 {
			continue
		}
		if s.Encoding != pqformat.PlainDictionary && s.Encoding != pqformat.RLEDictionary {
			return false
		}
		data++
	}
	return data > 0
}

// plainValues decodes n PLAIN values of physical type t into an array of
// type out: byte arrays as strings or binaries, INT32 and INT64 as ints of
// their width, floats; ok false for anything else.
func plainValues(raw []byte, n int, t pqformat.Type, out arrow.DataType, mem memory.Allocator) (arrow.Array, bool, error) {
	b := array.NewBuilder(mem, out)
	defer b.Release()
	for i := 0; i < n; i++ {
		switch t {
		case pqformat.ByteArray:
			if len(raw) < 4 || int64(binary.LittleEndian.Uint32(raw)) > int64(len(raw)-4) {
				return nil, false, nil // a short page: not used
			}
			l := binary.LittleEndian.Uint32(raw)
			v := raw[4 : 4+l]
			raw = raw[4+l:]
			switch bb := b.(type) {
			case *array.StringBuilder:
				bb.BinaryBuilder.Append(v)
			case *array.LargeStringBuilder:
				bb.BinaryBuilder.Append(v)
			case *array.BinaryBuilder:
				bb.Append(v)
			default:
				return nil, false, nil
			}
		case pqformat.Int32, pqformat.Int64, pqformat.Float, pqformat.Double:
			w := 4
			if t == pqformat.Int64 || t == pqformat.Double {
				w = 8
			}
			if len(raw) < w {
				return nil, false, nil
			}
			x := binary.LittleEndian.Uint64(append(raw[:w:w], make([]byte, 8-w)...))
			raw = raw[w:]
			if !appendPlain(b, t, x) {
				return nil, false, nil
			}
		default:
			return nil, false, nil
		}
	}
	return b.NewArray(), true, nil
}

// appendPlain appends the fixed-width value x (the bits of an INT32, INT64,
// FLOAT or DOUBLE) to b when b's type is exactly that physical type's.
func appendPlain(b array.Builder, t pqformat.Type, x uint64) bool {
	switch bb := b.(type) {
	case *array.Int32Builder:
		if t == pqformat.Int32 {
			bb.Append(int32(uint32(x)))
			return true
		}
	case *array.Int64Builder:
		if t == pqformat.Int64 {
			bb.Append(int64(x))
			return true
		}
	case *array.Float32Builder:
		if t == pqformat.Float {
			bb.Append(math.Float32frombits(uint32(x)))
			return true
		}
	case *array.Float64Builder:
		if t == pqformat.Double {
			bb.Append(math.Float64frombits(x))
			return true
		}
	}
	return false
}
