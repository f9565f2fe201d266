package format

// Statistics for filters: a column chunk's min, max and null count, as the
// Arrow type the column decodes to, so that a caller can rule row groups out
// without reading them. Bounds are converted exactly or widened (a timestamp
// stored in a finer unit than it decodes to: min rounded down, max up); a
// chunk whose statistics cannot be read as its output type gets none.

import (
	"math"
	"math/big"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/metadata"
	pqschema "github.com/apache/arrow-go/v18/parquet/schema"
)

// ColumnStats is what a footer says of one column chunk of a row group.
type ColumnStats struct {
	// Rows in the row group.
	Rows int64
	// Nulls is the null count, when NullsKnown.
	Nulls      int64
	NullsKnown bool
	// MinMax is nil, or two values of the column's output type (a
	// dictionary's value type): bounds of its non-null values, NaN
	// excluded. The caller releases it.
	MinMax arrow.Array
}

// StatsFooter is a Footer that reads column statistics (Parquet's).
type StatsFooter interface {
	// ColumnStats returns the statistics of top-level column name in row
	// group rg, its bounds as type out, allocated from mem; ok false when the
	// footer records none for it.
	ColumnStats(rg int, name string, out arrow.DataType, mem memory.Allocator) (st ColumnStats, ok bool)
}

var _ StatsFooter = (*parquetFooter)(nil)

// ColumnStats implements StatsFooter.
func (p *parquetFooter) ColumnStats(rg int, name string, out arrow.DataType, mem memory.Allocator) (ColumnStats, bool) {
	leaves := p.leaves[name]
	rgs := p.pf.Metadata().RowGroups
	if len(leaves) != 1 || rg < 0 || rg >= len(rgs) {
		return ColumnStats{}, false
	}
	st := ColumnStats{Rows: rgs[rg].NumRows}
	st.Nulls, st.NullsKnown = p.chunkNulls(rg, leaves[0])
	if d, ok := out.(*arrow.DictionaryType); ok {
		out = d.ValueType
	}
	st.MinMax = p.minMax(rg, leaves[0], out, mem)
	return st, true
}

// minMax returns the chunk's bounds as an array [min, max] of type out, or
// nil.
func (p *parquetFooter) minMax(rg, leaf int, out arrow.DataType, mem memory.Allocator) (arr arrow.Array) {
	defer func() {
		if recover() != nil {
			arr = nil // an undecodable statistic is no statistic
		}
	}()
	md, err := p.arrowMD()
	if err != nil || rg >= md.NumRowGroups() {
		return nil
	}
	cc, err := md.RowGroup(rg).ColumnChunk(leaf)
	if err != nil {
		return nil
	}
	ts, err := cc.Statistics()
	if err != nil || ts == nil || !ts.HasMinMax() {
		return nil
	}
	lt := ts.Descr().LogicalType()
	var lo, hi any
	switch s := ts.(type) {
	case *metadata.Int32Statistics:
		lo, hi = int64(s.Min()), int64(s.Max())
		if _, ok := lt.(*pqschema.IntLogicalType); ok && !lt.(*pqschema.IntLogicalType).IsSigned() {
			lo, hi = int64(uint32(s.Min())), int64(uint32(s.Max()))
		}
	case *metadata.Int64Statistics:
		lo, hi = s.Min(), s.Max()
		if il, ok := lt.(*pqschema.IntLogicalType); ok && !il.IsSigned() {
			lo, hi = uint64(s.Min()), uint64(s.Max())
		}
		if tl, ok := lt.(*pqschema.TimestampLogicalType); ok {
			if lo, hi, ok = timestampBounds(s.Min(), s.Max(), tl.TimeUnit(), out); !ok {
				return nil
			}
		}
	case *metadata.Float32Statistics:
		lo, hi = float64(s.Min()), float64(s.Max())
	case *metadata.Float64Statistics:
		lo, hi = s.Min(), s.Max()
	case *metadata.BooleanStatistics:
		lo, hi = s.Min(), s.Max()
	case *metadata.ByteArrayStatistics:
		lo, hi = []byte(s.Min()), []byte(s.Max())
	case *metadata.FixedLenByteArrayStatistics:
		lo, hi = []byte(s.Min()), []byte(s.Max())
	default:
		return nil
	}
	return boundsArray(lo, hi, out, mem)
}

// timestampBounds converts stored bounds in unit pu to out's unit, widening
// when out is coarser.
func timestampBounds(lo, hi int64, pu pqschema.TimeUnitType, out arrow.DataType) (int64, int64, bool) {
	tt, ok := out.(*arrow.TimestampType)
	if !ok {
		return 0, 0, false
	}
	per := map[pqschema.TimeUnitType]int64{pqschema.TimeUnitMillis: 1e3, pqschema.TimeUnitMicros: 1e6, pqschema.TimeUnitNanos: 1e9}[pu]
	want := map[arrow.TimeUnit]int64{arrow.Second: 1, arrow.Millisecond: 1e3, arrow.Microsecond: 1e6, arrow.Nanosecond: 1e9}[tt.Unit]
	switch {
	case per == 0:
		return 0, 0, false
	case per == want:
		return lo, hi, true
	case per > want:
		f := per / want
		l, h := lo/f, hi/f
		if lo%f != 0 && lo < 0 {
			l--
		}
		if hi%f != 0 && hi > 0 {
			h++
		}
		return l, h, true
	}
	f := want / per
	if lo < math.MinInt64/f || hi > math.MaxInt64/f {
		return 0, 0, false
	}
	return lo * f, hi * f, true
}

// boundsArray builds [lo, hi] as an array of type out, or nil when the
// stored kind does not convert to it exactly.
//
// Length: one case per output type the filters read.
func boundsArray(lo, hi any, out arrow.DataType, mem memory.Allocator) arrow.Array {
	b := array.NewBuilder(mem, out)
	defer b.Release()
	for _, v := range []any{lo, hi} {
		switch bb := b.(type) {
		case *array.Int8Builder:
			bb.Append(int8(v.(int64)))
		case *array.Int16Builder:
			bb.Append(int16(v.(int64)))
		case *array.Int32Builder:
			bb.Append(int32(v.(int64)))
		case *array.Int64Builder:
			bb.Append(v.(int64))
		case *array.Uint8Builder:
			bb.Append(uint8(v.(int64)))
		case *array.Uint16Builder:
			bb.Append(uint16(v.(int64)))
		case *array.Uint32Builder:
			bb.Append(uint32(v.(int64)))
		case *array.Uint64Builder:
			bb.Append(v.(uint64))
		case *array.Float32Builder:
			bb.Append(float32(v.(float64)))
		case *array.Float64Builder:
			bb.Append(v.(float64))
		case *array.BooleanBuilder:
			bb.Append(v.(bool))
		case *array.Date32Builder:
			bb.Append(arrow.Date32(v.(int64)))
		case *array.TimestampBuilder:
			bb.Append(arrow.Timestamp(v.(int64)))
		case *array.StringBuilder:
			bb.Append(string(v.([]byte)))
		case *array.LargeStringBuilder:
			bb.Append(string(v.([]byte)))
		case *array.BinaryBuilder:
			bb.Append(v.([]byte))
		case *array.Decimal128Builder:
			n, ok := decimalBound(v)
			if !ok {
				return nil
			}
			bb.Append(n)
		default:
			return nil
		}
	}
	return b.NewArray()
}

// decimalBound reads a decimal's unscaled value: an int from INT32 or INT64,
// or big-endian two's complement bytes.
func decimalBound(v any) (decimal128.Num, bool) {
	switch v := v.(type) {
	case int64:
		return decimal128.FromI64(v), true
	case []byte:
		if len(v) == 0 || len(v) > 16 {
			return decimal128.Num{}, false
		}
		x := new(big.Int).SetBytes(v)
		if v[0]&0x80 != 0 {
			x.Sub(x, new(big.Int).Lsh(big.NewInt(1), uint(8*len(v))))
		}
		return decimal128.FromBigInt(x), true
	}
	return decimal128.Num{}, false
}
