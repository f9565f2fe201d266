package fastgen

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/float16"
	"github.com/apache/arrow-go/v18/arrow/memory"
	pq "github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/parquet-go/parquet-go"
)

// ListSize is the length of the fixed-size list columns.
const ListSize = 8

// Generators of the test columns; expected values come from these.
func GenID(i int) int64            { return int64(i)*1_000_003 - 7 }
func GenLabel(i int) int32         { return int32(i%97) - 40 }
func GenFeat(i, j int) float32     { return float32(i) + float32(j)/16 }
func GenMaybe(i int) (int32, bool) { return int32(i) * 3, i%9 != 4 }
func GenTok(i, j int) int32        { return int32(i*100 + j) }

// GenTokLen is the length of row i's list in "tokens": stretches of 30 lists
// of one value (RLE runs of repetition level 0) between lists of 2 to 6.
func GenTokLen(i int) int {
	if (i/30)%2 == 0 {
		return 1
	}
	return 2 + (i*7)%5
}

// GenPixel is value j of row i's "pixels" (every byte value occurs).
func GenPixel(i, j int) uint8 { return uint8(i*31 + j*7) }

// GenETokLen is the length of row i's list in "etokens": some lists empty.
func GenETokLen(i int) int { return i % 4 }

// Record holds rows [first, first+n) of the benchmark's column types
// (both required and nullable without nulls) and of columns the fast path
// must leave alone.
func Record(first, n int) arrow.RecordBatch {
	mem := memory.NewGoAllocator()
	fields := []arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "label", Type: arrow.PrimitiveTypes.Int32, Nullable: true}, // max def 1, no nulls
		{Name: "features", Type: arrow.FixedSizeListOfNonNullable(ListSize, arrow.PrimitiveTypes.Float32)},
		{Name: "nfeatures", Type: arrow.FixedSizeListOf(ListSize, arrow.PrimitiveTypes.Float32), Nullable: true},
		{Name: "flag", Type: arrow.FixedWidthTypes.Boolean},
		{Name: "small", Type: arrow.PrimitiveTypes.Int8},
		{Name: "maybe", Type: arrow.PrimitiveTypes.Int32, Nullable: true},
		{Name: "tokens", Type: arrow.ListOf(arrow.PrimitiveTypes.Int32)},
		{Name: "etokens", Type: arrow.ListOf(arrow.PrimitiveTypes.Int32)},
		{Name: "pixels", Type: arrow.FixedSizeListOfNonNullable(ListSize, arrow.PrimitiveTypes.Uint8)}, // images: UINT_8 stored as INT32
	}
	b := array.NewRecordBuilder(mem, arrow.NewSchema(fields, nil))
	defer b.Release()
	for i := first; i < first+n; i++ {
		b.Field(0).(*array.Int64Builder).Append(GenID(i))
		b.Field(1).(*array.Int32Builder).Append(GenLabel(i))
		for _, k := range []int{2, 3} {
			fl := b.Field(k).(*array.FixedSizeListBuilder)
			fl.Append(true)
			for j := 0; j < ListSize; j++ {
				fl.ValueBuilder().(*array.Float32Builder).Append(GenFeat(i, j))
			}
		}
		b.Field(4).(*array.BooleanBuilder).Append(i%3 == 0)
		b.Field(5).(*array.Int8Builder).Append(int8(i))
		if v, ok := GenMaybe(i); ok {
			b.Field(6).(*array.Int32Builder).Append(v)
		} else {
			b.Field(6).AppendNull()
		}
		for k, n := range map[int]int{7: GenTokLen(i), 8: GenETokLen(i)} {
			lb := b.Field(k).(*array.ListBuilder)
			lb.Append(true)
			for j := range n {
				lb.ValueBuilder().(*array.Int32Builder).Append(GenTok(i, j))
			}
		}
		px := b.Field(9).(*array.FixedSizeListBuilder)
		px.Append(true)
		for j := 0; j < ListSize; j++ {
			px.ValueBuilder().(*array.Uint8Builder).Append(GenPixel(i, j))
		}
	}
	return b.NewRecordBatch()
}

// WriteFile writes recs with arrow-go's writer, one row group per record
// when each record fills the writer's max row group length. Records are
// written whole: arrow-go v18.8.0's writer writes a sliced fixed_size_list
// from the start of its child values, so a record split into row groups
// by the writer stores the wrong features after the first row group.
func WriteFile(t *testing.T, path string, recs []arrow.RecordBatch, props ...pq.WriterProperty) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w, err := pqarrow.NewFileWriter(recs[0].Schema(), f, pq.NewWriterProperties(props...), pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema()))
	if err != nil {
		t.Fatal(err)
	}
	for _, rec := range recs {
		if err := w.Write(rec); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// CheckColumn compares a decoded column with the generators, rows from first.
//
// Length: one case per test column, each its generator's check.
func CheckColumn(t *testing.T, name string, a arrow.Array, first int) {
	t.Helper()
	bad := func(i int, got, want any) {
		t.Helper()
		t.Fatalf("column %q row %d = %v, want %v", name, first+i, got, want)
	}
	switch name {
	case "id":
		for i, v := range a.(*array.Int64).Int64Values() {
			if w := GenID(first + i); v != w {
				bad(i, v, w)
			}
		}
	case "label":
		for i, v := range a.(*array.Int32).Int32Values() {
			if w := GenLabel(first + i); v != w {
				bad(i, v, w)
			}
		}
	case "features", "nfeatures":
		vals := a.(*array.FixedSizeList).ListValues().(*array.Float32).Float32Values()
		if len(vals) != a.Len()*ListSize {
			t.Fatalf("column %q: %d values for %d rows", name, len(vals), a.Len())
		}
		for k, v := range vals {
			if w := GenFeat(first+k/ListSize, k%ListSize); v != w {
				bad(k/ListSize, v, w)
			}
		}
	case "tokens", "etokens":
		l := a.(*array.List)
		vals := l.ListValues().(*array.Int32).Int32Values()
		offs := l.Offsets()
		for i := 0; i < a.Len(); i++ {
			n := GenTokLen(first + i)
			if name == "etokens" {
				n = GenETokLen(first + i)
			}
			row := vals[offs[i]:offs[i+1]]
			if len(row) != n {
				bad(i, row, fmt.Sprintf("%d values", n))
			}
			for j, v := range row {
				if w := GenTok(first+i, j); v != w {
					bad(i, v, w)
				}
			}
		}
	case "flag":
		for i := 0; i < a.Len(); i++ {
			if v, w := a.(*array.Boolean).Value(i), (first+i)%3 == 0; v != w {
				bad(i, v, w)
			}
		}
	case "pixels":
		vals := a.(*array.FixedSizeList).ListValues().(*array.Uint8)
		off := a.Data().Offset() * ListSize
		for i := 0; i < a.Len(); i++ {
			for j := 0; j < ListSize; j++ {
				if v, w := vals.Value(off+i*ListSize+j), GenPixel(first+i, j); v != w {
					bad(i, v, w)
				}
			}
		}
	case "small":
		for i, v := range a.(*array.Int8).Int8Values() {
			if w := int8(first + i); v != w {
				bad(i, v, w)
			}
		}
	case "maybe":
		for i, v := range a.(*array.Int32).Int32Values() {
			w, ok := GenMaybe(first + i)
			if !ok {
				w = -1 // the fill value
			}
			if v != w {
				bad(i, v, w)
			}
		}
	default:
		t.Fatalf("no generator for column %q", name)
	}
}

// PlainChunks counts the chunks of column col in path that have no
// dictionary page (read with parquet-go, apart from the loader).
func PlainChunks(t *testing.T, path, col string) int64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	pf, err := parquet.OpenFile(f, st.Size())
	if err != nil {
		t.Fatal(err)
	}
	leaf, ok := pf.Schema().Lookup(col)
	if !ok {
		leaf, ok = pf.Schema().Lookup(col, "list", "element")
	}
	if !ok {
		t.Fatalf("%s: no leaf column %q", path, col)
	}
	var n int64
	for _, rg := range pf.Metadata().RowGroups {
		if rg.Columns[leaf.ColumnIndex].MetaData.DictionaryPageOffset == 0 {
			n++
		}
	}
	return n
}

// VlistLen is the length of row i's list in the test's list columns: mostly
// 1 to 2500 values (rows spanning several 1 KiB pages: arrow-go fills a
// page with at least 1024 levels), with stretches of lists of one (RLE runs
// of repetition level 0).
func VlistLen(seed uint64, i int) int {
	if (i/40)%5 == 0 {
		return 1
	}
	h := (uint64(i) + seed) * 0x9e3779b97f4a7c15
	return 1 + int((h>>33)%2500)
}

// VlistRecord holds rows [first, first+n) of "tokens" (list<int32>, the
// elements nullable without nulls), "rtokens" (list<int32 not null>) and
// "stokens" (list<int16>: INT32 narrowed after decoding).
func VlistRecord(seed uint64, first, n int) arrow.RecordBatch {
	mem := memory.NewGoAllocator()
	fields := []arrow.Field{
		{Name: "tokens", Type: arrow.ListOf(arrow.PrimitiveTypes.Int32)},
		{Name: "rtokens", Type: arrow.ListOfNonNullable(arrow.PrimitiveTypes.Int32)},
		{Name: "stokens", Type: arrow.ListOf(arrow.PrimitiveTypes.Int16)},
	}
	b := array.NewRecordBuilder(mem, arrow.NewSchema(fields, nil))
	defer b.Release()
	for i := first; i < first+n; i++ {
		for k := range fields {
			lb := b.Field(k).(*array.ListBuilder)
			lb.Append(true)
			for j := range VlistLen(seed+uint64(k), i) {
				switch vb := lb.ValueBuilder().(type) {
				case *array.Int32Builder:
					vb.Append(GenTok(i, j))
				case *array.Int16Builder:
					vb.Append(int16(GenTok(i, j)))
				}
			}
		}
	}
	return b.NewRecordBatch()
}

// CheckVlist compares list column k of VlistRecord, rows from first, with
// its generator.
func CheckVlist(t *testing.T, seed uint64, k int, a arrow.Array, first int) {
	t.Helper()
	l := a.(*array.List)
	offs := l.Offsets()
	for i := 0; i < a.Len(); i++ {
		if n, want := int(offs[i+1]-offs[i]), VlistLen(seed+uint64(k), first+i); n != want {
			t.Fatalf("column %d row %d: %d values, want %d", k, first+i, n, want)
		}
		for j := int(offs[i]); j < int(offs[i+1]); j++ {
			var v int32
			switch vals := l.ListValues().(type) {
			case *array.Int32:
				v = vals.Value(j)
			case *array.Int16:
				v = int32(vals.Value(j))
			}
			if w := GenTok(first+i, j-int(offs[i])); k == 2 && v != int32(int16(w)) || k != 2 && v != w {
				t.Fatalf("column %d row %d value %d = %d, want %d", k, first+i, j-int(offs[i]), v, w)
			}
		}
	}
}

// MixedRecord builds a record of n rows covering every decoded type. Nulls appear only
// in "maybe" (int32) and "names" (string) when withNulls is set.
func MixedRecord(t testing.TB, rng *rand.Rand, n int, withNulls bool) arrow.RecordBatch {
	t.Helper()
	mem := memory.NewGoAllocator()
	fields := []arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "flag", Type: arrow.FixedWidthTypes.Boolean},
		{Name: "i8", Type: arrow.PrimitiveTypes.Int8},
		{Name: "u8", Type: arrow.PrimitiveTypes.Uint8},
		{Name: "i16", Type: arrow.PrimitiveTypes.Int16},
		{Name: "u16", Type: arrow.PrimitiveTypes.Uint16},
		{Name: "u32", Type: arrow.PrimitiveTypes.Uint32},
		{Name: "u64", Type: arrow.PrimitiveTypes.Uint64},
		{Name: "h", Type: arrow.FixedWidthTypes.Float16},
		{Name: "f", Type: arrow.PrimitiveTypes.Float32},
		{Name: "d", Type: arrow.PrimitiveTypes.Float64},
		{Name: "features", Type: arrow.FixedSizeListOf(4, arrow.PrimitiveTypes.Float32)},
		{Name: "tokens", Type: arrow.ListOf(arrow.PrimitiveTypes.Int32)},
		{Name: "key", Type: arrow.BinaryTypes.String},
		{Name: "blob", Type: arrow.BinaryTypes.Binary},
		{Name: "maybe", Type: arrow.PrimitiveTypes.Int32, Nullable: true},
		{Name: "names", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "seq", Type: arrow.ListOf(arrow.PrimitiveTypes.Int32)},
		{Name: "runs", Type: arrow.ListOf(arrow.PrimitiveTypes.Int64)},
	}
	b := array.NewRecordBuilder(mem, arrow.NewSchema(fields, nil))
	defer b.Release()
	for i := 0; i < n; i++ {
		b.Field(0).(*array.Int64Builder).Append(int64(i))
		// Runs of equal booleans exercise RLE runs, not only bit-packing.
		b.Field(1).(*array.BooleanBuilder).Append((i/13)%2 == 0 || rng.IntN(7) == 0)
		b.Field(2).(*array.Int8Builder).Append(int8(rng.IntN(256) - 128))
		b.Field(3).(*array.Uint8Builder).Append(uint8(rng.IntN(256)))
		b.Field(4).(*array.Int16Builder).Append(int16(rng.IntN(65536) - 32768))
		b.Field(5).(*array.Uint16Builder).Append(uint16(rng.IntN(65536)))
		b.Field(6).(*array.Uint32Builder).Append(rng.Uint32())
		b.Field(7).(*array.Uint64Builder).Append(rng.Uint64())
		b.Field(8).(*array.Float16Builder).Append(float16.New(rng.Float32()))
		b.Field(9).(*array.Float32Builder).Append(rng.Float32())
		b.Field(10).(*array.Float64Builder).Append(rng.NormFloat64())
		fl := b.Field(11).(*array.FixedSizeListBuilder)
		fl.Append(true)
		for j := 0; j < 4; j++ {
			fl.ValueBuilder().(*array.Float32Builder).Append(float32(i) + float32(j)/8)
		}
		lb := b.Field(12).(*array.ListBuilder)
		lb.Append(true)
		for j := 0; j < rng.IntN(6); j++ { // includes empty lists
			lb.ValueBuilder().(*array.Int32Builder).Append(int32(i*10 + j))
		}
		b.Field(13).(*array.StringBuilder).Append(fmt.Sprintf("k%d", i%17)) // low cardinality: dictionary pages
		b.Field(14).(*array.BinaryBuilder).Append(bytes.Repeat([]byte{byte(i)}, i%5))
		if withNulls && i%9 == 4 {
			b.Field(15).AppendNull()
			b.Field(16).AppendNull()
		} else {
			b.Field(15).(*array.Int32Builder).Append(int32(i) * 3)
			b.Field(16).(*array.StringBuilder).Append(fmt.Sprintf("name-%d", i))
		}
		sb := b.Field(17).(*array.ListBuilder)
		sb.Append(true)
		for j := 0; j < 1+rng.IntN(6); j++ { // never empty: the levels' fast path
			sb.ValueBuilder().(*array.Int32Builder).Append(int32(-i*10 - j))
		}
		// Stretches of lists of one value: repetition levels in RLE runs of 0.
		rb := b.Field(18).(*array.ListBuilder)
		rb.Append(true)
		n := 1
		if (i/20)%2 == 1 {
			n = 2 + i%3
		}
		for j := range n {
			rb.ValueBuilder().(*array.Int64Builder).Append(int64(i)<<8 | int64(j))
		}
	}
	return b.NewRecordBatch()
}

// WriteParquet writes rec with arrow-go's writer, one Write per row group of
// the properties' MaxRowGroupLength, each from a freshly materialized record:
// arrow-go v18.8.0 writes fixed_size_list values wrongly when it splits one
// record into several row groups itself (both pqarrow and the loader then read
// the same wrong bytes, which would blind the oracle tests).
func WriteParquet(t testing.TB, path string, rec arrow.RecordBatch, props ...pq.WriterProperty) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	wp := pq.NewWriterProperties(props...)
	w, err := pqarrow.NewFileWriter(rec.Schema(), f, wp, pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema()))
	if err != nil {
		t.Fatal(err)
	}
	step := max(wp.MaxRowGroupLength(), 1)
	for lo := int64(0); lo < rec.NumRows() || lo == 0; lo += step {
		hi := min(lo+step, rec.NumRows())
		view := rec.NewSlice(lo, hi)
		cols := make([]arrow.Array, view.NumCols())
		for i, c := range view.Columns() {
			if cols[i], err = array.Concatenate([]arrow.Array{c}, memory.DefaultAllocator); err != nil {
				t.Fatal(err)
			}
		}
		part := array.NewRecordBatch(rec.Schema(), cols, hi-lo)
		err := w.Write(part)
		part.Release()
		for _, c := range cols {
			c.Release()
		}
		view.Release()
		if err != nil {
			t.Fatal(err)
		}
		if hi == rec.NumRows() {
			break
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}
