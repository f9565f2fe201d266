package loader_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/meshfeed/meshfeed/loader"
	"github.com/meshfeed/meshfeed/objstore"
)

// The decoder (parquet-go pages into Arrow buffers) is checked against an
// independent reader: arrow-go's pqarrow on the same bytes. Files are written
// by arrow-go's writer (and by pyarrow, in pyarrow_test.go), never by the
// code under test.

// testColumns builds a record covering every decoded type. Nulls appear only
// in "maybe" (int32) and "names" (string) when withNulls is set.
func testRecord(t testing.TB, rng *rand.Rand, n int, withNulls bool) arrow.RecordBatch {
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
		b.Field(8).(*array.Float16Builder).Append(float16Of(rng.Float32()))
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

// writeParquet writes rec with arrow-go's writer, one Write per row group of
// the properties' MaxRowGroupLength, each from a freshly materialized record:
// arrow-go v18.8.0 writes fixed_size_list values wrongly when it splits one
// record into several row groups itself (both pqarrow and the loader then read
// the same wrong bytes, which would blind the oracle tests).
func writeParquet(t testing.TB, path string, rec arrow.RecordBatch, props ...parquet.WriterProperty) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	wp := parquet.NewWriterProperties(props...)
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

// oracleRowGroup reads one row group of path with arrow-go's pqarrow.
func oracleRowGroup(t testing.TB, path string, rg int) arrow.Table {
	t.Helper()
	pf, err := file.OpenParquetFile(path, false)
	if err != nil {
		t.Fatal(err)
	}
	defer pf.Close()
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{}, memory.DefaultAllocator)
	if err != nil {
		t.Fatal(err)
	}
	idx := make([]int, pf.MetaData().Schema.NumColumns())
	for i := range idx {
		idx[i] = i
	}
	tbl, err := fr.ReadRowGroups(context.Background(), idx, []int{rg})
	if err != nil {
		t.Fatal(err)
	}
	return tbl
}

// valuesString renders a column as text; Arrow's renderings are exact for
// every decoded type (floats print shortest round-trip form).
func valuesString(t testing.TB, a arrow.Array) string {
	t.Helper()
	return a.String()
}

func oracleColumn(t testing.TB, tbl arrow.Table, name string) string {
	t.Helper()
	idx := tbl.Schema().FieldIndices(name)
	if len(idx) != 1 {
		t.Fatalf("oracle has no column %q", name)
	}
	ch := tbl.Column(idx[0]).Data()
	var parts []string
	for _, c := range ch.Chunks() {
		s := c.String()
		parts = append(parts, strings.TrimSuffix(strings.TrimPrefix(s, "["), "]"))
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// checkAgainstOracle decodes every row group of path and compares each
// column with pqarrow's reading. fill replaces nulls in the oracle text.
func checkAgainstOracle(t *testing.T, store objstore.Store, path string, fill map[string]float64) {
	t.Helper()
	ctx := context.Background()
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	ds, err := loader.Open(ctx, store, []string{path}, loader.WithFill(fill), loader.WithFooterCache(nil))
	if err != nil {
		t.Fatal(err)
	}
	// Read every row group before comparing any: a decoded array that
	// aliased a recycled fetch buffer would be overwritten by later reads.
	var recs []arrow.RecordBatch
	defer func() {
		for _, r := range recs {
			r.Release()
		}
	}()
	for rg := range ds.Files[0].RowGroups {
		rec, err := ds.ReadRowGroup(ctx, 0, rg, mem)
		if err != nil {
			t.Fatalf("row group %d: %v", rg, err)
		}
		recs = append(recs, rec)
	}
	for rg, rec := range recs {
		want := oracleRowGroup(t, path, rg)
		if rec.NumRows() != want.NumRows() {
			t.Errorf("row group %d: %d rows, want %d", rg, rec.NumRows(), want.NumRows())
		}
		for i, f := range rec.Schema().Fields() {
			got := valuesString(t, rec.Column(i))
			exp := oracleColumn(t, want, f.Name)
			if v, ok := fill[f.Name]; ok {
				exp = strings.ReplaceAll(exp, "(null)", fmt.Sprint(v))
			}
			if got != exp {
				t.Errorf("%s row group %d column %q:\n got %.300s\nwant %.300s", filepath.Base(path), rg, f.Name, got, exp)
			}
		}
		want.Release()
	}
}

func TestDecodeMatchesArrowGo(t *testing.T) {
	seed := testSeed(t)
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(seed, 1))
	rec := testRecord(t, rng, 3000, true)
	defer rec.Release()
	store := objstore.NewLocalStore()
	defer store.Close()

	codecs := map[string]compress.Compression{
		"none": compress.Codecs.Uncompressed, "snappy": compress.Codecs.Snappy, "zstd": compress.Codecs.Zstd,
		"gzip": compress.Codecs.Gzip, "lz4raw": compress.Codecs.Lz4Raw,
	}
	for name, codec := range codecs {
		for _, dict := range []bool{false, true} {
			for _, v2 := range []bool{false, true} {
				label := fmt.Sprintf("%s_dict%v_v2%v", name, dict, v2)
				t.Run(label, func(t *testing.T) {
					path := filepath.Join(dir, label+".parquet")
					version := parquet.DataPageV1
					if v2 {
						version = parquet.DataPageV2
					}
					writeParquet(t, path, rec,
						parquet.WithCompression(codec),
						parquet.WithDictionaryDefault(dict),
						parquet.WithDataPageVersion(version),
						parquet.WithMaxRowGroupLength(700), // uneven last row group
						parquet.WithDataPageSize(4<<10),    // several pages per chunk
					)
					checkAgainstOracle(t, store, path, map[string]float64{"maybe": -1})
				})
			}
		}
	}
}
