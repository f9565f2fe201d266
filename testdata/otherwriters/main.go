// Command otherwriters writes Parquet files in the layouts other writers
// (parquet-mr/Spark, Impala, Hive, older Arrow C++) produce and pyarrow reads,
// with arrow-go's low-level writer: legacy two-level lists and repeated fields
// without a LIST annotation, decimals stored as BYTE_ARRAY, FIXED_LEN_BYTE_ARRAY
// and (annotated by converted type only) INT32/INT64, converted-type-only
// timestamps, strings and small integers, the Hadoop framing of LZ4, gzip
// pages of several gzip members, and data pages (v2 and v1) that hold
// nothing: only nulls, or 0 values and 0 rows (spliced in by hand,
// emptypages.go). testdata/test_flight_types.py runs it into a
// temporary directory and compares what meshfeed delivers over Flight with
// pyarrow.parquet.read_table, value by value.
//
//	go run ./testdata/otherwriters -out DIR
//
// The output depends only on the seed (-seed, default 13).
package main

import (
	"bytes"
	"compress/gzip"
	"flag"
	"fmt"
	"io"
	"math/big"
	"math/rand/v2"
	"os"
	"path/filepath"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/apache/arrow-go/v18/parquet/schema"

	_ "github.com/meshfeed/meshfeed/loader" // registers the Hadoop LZ4 codec this writes with
)

const rows = 250 // per file: row groups of 100, 100, 50

func main() {
	out := flag.String("out", "", "directory to write into (created)")
	seed := flag.Uint64("seed", 13, "seed of the values")
	flag.Parse()
	if *out == "" {
		fmt.Fprintln(os.Stderr, "otherwriters: -out is required")
		os.Exit(2)
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fail(err)
	}
	rng := rand.New(rand.NewPCG(*seed, 1))
	write(filepath.Join(*out, "legacy_lists.parquet"), legacyLists(rng), nil)
	write(filepath.Join(*out, "legacy_annotations.parquet"), legacyAnnotations(rng), nil)
	arrowFile(filepath.Join(*out, "hadoop_lz4.parquet"), rng, compress.Codecs.Lz4)
	compress.RegisterCodec(compress.Codecs.Gzip, multiMemberGzip{})
	arrowFile(filepath.Join(*out, "gzip_multimember.parquet"), rng, compress.Codecs.Gzip)
	emptyPagesFile(filepath.Join(*out, "empty_pages_v2"), rng, true, compress.Codecs.Snappy)
	emptyPagesFile(filepath.Join(*out, "empty_pages_v1"), rng, false, compress.Codecs.Uncompressed)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "otherwriters:", err)
	os.Exit(1)
}

func must[T any](v T, err error) T {
	if err != nil {
		fail(err)
	}
	return v
}

// column is one leaf: its schema node and a function writing rows [lo, hi).
type column struct {
	node  schema.Node
	write func(cw file.ColumnChunkWriter, lo, hi int)
}

func write(path string, cols []column, props []parquet.WriterProperty) {
	f := must(os.Create(path))
	var nodes schema.FieldList
	for _, c := range cols {
		nodes = append(nodes, c.node)
	}
	root := must(schema.NewGroupNode("schema", parquet.Repetitions.Required, nodes, -1))
	props = append(props, parquet.WithCreatedBy("meshfeed testdata/otherwriters"))
	w := file.NewParquetWriter(f, root, file.WithWriterProps(parquet.NewWriterProperties(props...)))
	for lo := 0; lo < rows; lo += 100 {
		hi := min(lo+100, rows)
		rg := w.AppendRowGroup()
		for _, c := range cols {
			cw := must(rg.NextColumn())
			c.write(cw, lo, hi)
			if err := cw.Close(); err != nil {
				fail(err)
			}
		}
		if err := rg.Close(); err != nil {
			fail(err)
		}
	}
	if err := w.Close(); err != nil { // closes f
		fail(err)
	}
}

// lists of 0..3 int32 per row, some null: levels for a list whose null has
// definition level 0, empty 1, element 2 (two-level: elements required).
func listRows(rng *rand.Rand) [][]int32 {
	out := make([][]int32, rows)
	for i := range out {
		if rng.IntN(8) == 0 {
			continue // null
		}
		out[i] = []int32{}
		for j := rng.IntN(4); j > 0; j-- {
			out[i] = append(out[i], rng.Int32N(2000)-1000)
		}
	}
	return out
}

func levels(lists [][]int32, lo, hi int, nullable bool) (vals []int32, def, rep []int16) {
	base := int16(0)
	if nullable {
		base = 1
	}
	for _, l := range lists[lo:hi] {
		switch {
		case l == nil:
			def, rep = append(def, 0), append(rep, 0)
		case len(l) == 0:
			def, rep = append(def, base), append(rep, 0)
		default:
			for j, v := range l {
				r := int16(1)
				if j == 0 {
					r = 0
				}
				def, rep, vals = append(def, base+1), append(rep, r), append(vals, v)
			}
		}
	}
	return
}

func legacyLists(rng *rand.Rand) []column {
	two := listRows(rng)
	bare := listRows(rng)
	for i := range bare {
		if bare[i] == nil {
			bare[i] = []int32{} // a bare repeated field has no null, only empty
		}
	}
	strs := listRows(rng)
	elem := must(schema.NewPrimitiveNode("array", parquet.Repetitions.Repeated, parquet.Types.Int32, -1, -1))
	strElem := must(schema.NewPrimitiveNodeLogical("str", parquet.Repetitions.Repeated, schema.StringLogicalType{}, parquet.Types.ByteArray, -1, -1))
	return []column{
		{must(schema.NewGroupNodeLogical("two_level", parquet.Repetitions.Optional, schema.FieldList{elem}, schema.ListLogicalType{}, -1)),
			func(cw file.ColumnChunkWriter, lo, hi int) {
				v, d, r := levels(two, lo, hi, true)
				must(cw.(*file.Int32ColumnChunkWriter).WriteBatch(v, d, r))
			}},
		{must(schema.NewPrimitiveNode("bare_repeated", parquet.Repetitions.Repeated, parquet.Types.Int32, -1, -1)),
			func(cw file.ColumnChunkWriter, lo, hi int) {
				v, d, r := levels(bare, lo, hi, false)
				must(cw.(*file.Int32ColumnChunkWriter).WriteBatch(v, d, r))
			}},
		{must(schema.NewGroupNodeLogical("two_level_str", parquet.Repetitions.Optional, schema.FieldList{strElem}, schema.ListLogicalType{}, -1)),
			func(cw file.ColumnChunkWriter, lo, hi int) {
				v, d, r := levels(strs, lo, hi, true)
				bs := make([]parquet.ByteArray, len(v))
				for i, x := range v {
					bs[i] = parquet.ByteArray(fmt.Sprintf("s%d", x))
				}
				must(cw.(*file.ByteArrayColumnChunkWriter).WriteBatch(bs, d, r))
			}},
	}
}

// optional: definition levels with every seventh row null; present are the
// indexes of the rows that hold a value.
func optional(lo, hi int) (def []int16, present []int) {
	for i := lo; i < hi; i++ {
		if i%7 == 3 {
			def = append(def, 0)
		} else {
			def = append(def, 1)
			present = append(present, i)
		}
	}
	return
}

// twosComplement is v as a big-endian two's complement of n bytes.
func twosComplement(v *big.Int, n int) []byte {
	m := new(big.Int).Lsh(big.NewInt(1), uint(8*n))
	u := new(big.Int).Mod(v, m) // non-negative
	b := u.Bytes()
	out := make([]byte, n)
	copy(out[n-len(b):], b)
	return out
}

func legacyAnnotations(rng *rand.Rand) []column {
	big20 := make([]*big.Int, rows)
	for i := range big20 {
		v := new(big.Int).Mul(big.NewInt(rng.Int64()), big.NewInt(int64(rng.IntN(100))+1))
		if rng.IntN(2) == 0 {
			v.Neg(v)
		}
		big20[i] = v
	}
	i64 := make([]int64, rows)
	for i := range i64 {
		i64[i] = rng.Int64N(2e12) - 1e12
	}
	decBA := must(schema.NewPrimitiveNodeLogical("dec_byte_array", parquet.Repetitions.Optional, schema.NewDecimalLogicalType(22, 3), parquet.Types.ByteArray, -1, -1))
	decFLBA := must(schema.NewPrimitiveNodeLogical("dec_flba", parquet.Repetitions.Optional, schema.NewDecimalLogicalType(22, 4), parquet.Types.FixedLenByteArray, 10, -1))
	decI32 := must(schema.NewPrimitiveNodeConverted("dec_int32_converted", parquet.Repetitions.Optional, parquet.Types.Int32, schema.ConvertedTypes.Decimal, -1, 9, 2, -1))
	decI64 := must(schema.NewPrimitiveNodeConverted("dec_int64_converted", parquet.Repetitions.Required, parquet.Types.Int64, schema.ConvertedTypes.Decimal, -1, 18, 6, -1))
	tsMillis := must(schema.NewPrimitiveNodeConverted("ts_millis_converted", parquet.Repetitions.Optional, parquet.Types.Int64, schema.ConvertedTypes.TimestampMillis, -1, 0, 0, -1))
	utf8 := must(schema.NewPrimitiveNodeConverted("utf8_converted", parquet.Repetitions.Optional, parquet.Types.ByteArray, schema.ConvertedTypes.UTF8, -1, 0, 0, -1))
	int8c := must(schema.NewPrimitiveNodeConverted("int8_converted", parquet.Repetitions.Required, parquet.Types.Int32, schema.ConvertedTypes.Int8, -1, 0, 0, -1))
	uint16c := must(schema.NewPrimitiveNodeConverted("uint16_converted", parquet.Repetitions.Required, parquet.Types.Int32, schema.ConvertedTypes.Uint16, -1, 0, 0, -1))
	dateC := must(schema.NewPrimitiveNodeConverted("date_converted", parquet.Repetitions.Optional, parquet.Types.Int32, schema.ConvertedTypes.Date, -1, 0, 0, -1))
	return []column{
		{decBA, func(cw file.ColumnChunkWriter, lo, hi int) {
			d, p := optional(lo, hi)
			var vs []parquet.ByteArray
			for _, i := range p {
				b := twosComplement(big20[i], 10)
				for len(b) > 1 && ((b[0] == 0 && b[1]&0x80 == 0) || (b[0] == 0xff && b[1]&0x80 != 0)) {
					b = b[1:] // minimal length, as parquet-mr writes
				}
				vs = append(vs, b)
			}
			must(cw.(*file.ByteArrayColumnChunkWriter).WriteBatch(vs, d, nil))
		}},
		{decFLBA, func(cw file.ColumnChunkWriter, lo, hi int) {
			d, p := optional(lo, hi)
			var vs []parquet.FixedLenByteArray
			for _, i := range p {
				vs = append(vs, twosComplement(new(big.Int).Neg(big20[i]), 10))
			}
			must(cw.(*file.FixedLenByteArrayColumnChunkWriter).WriteBatch(vs, d, nil))
		}},
		{decI32, func(cw file.ColumnChunkWriter, lo, hi int) {
			d, p := optional(lo, hi)
			var vs []int32
			for _, i := range p {
				vs = append(vs, int32(i64[i]%999999999))
			}
			must(cw.(*file.Int32ColumnChunkWriter).WriteBatch(vs, d, nil))
		}},
		{decI64, func(cw file.ColumnChunkWriter, lo, hi int) {
			must(cw.(*file.Int64ColumnChunkWriter).WriteBatch(i64[lo:hi], nil, nil))
		}},
		{tsMillis, func(cw file.ColumnChunkWriter, lo, hi int) {
			d, p := optional(lo, hi)
			var vs []int64
			for _, i := range p {
				vs = append(vs, i64[i])
			}
			must(cw.(*file.Int64ColumnChunkWriter).WriteBatch(vs, d, nil))
		}},
		{utf8, func(cw file.ColumnChunkWriter, lo, hi int) {
			d, p := optional(lo, hi)
			var vs []parquet.ByteArray
			for _, i := range p {
				vs = append(vs, parquet.ByteArray(fmt.Sprintf("ü%d", i64[i])))
			}
			must(cw.(*file.ByteArrayColumnChunkWriter).WriteBatch(vs, d, nil))
		}},
		{int8c, func(cw file.ColumnChunkWriter, lo, hi int) {
			var vs []int32
			for i := lo; i < hi; i++ {
				vs = append(vs, int32(int8(i64[i])))
			}
			must(cw.(*file.Int32ColumnChunkWriter).WriteBatch(vs, nil, nil))
		}},
		{uint16c, func(cw file.ColumnChunkWriter, lo, hi int) {
			var vs []int32
			for i := lo; i < hi; i++ {
				vs = append(vs, int32(uint16(i64[i])))
			}
			must(cw.(*file.Int32ColumnChunkWriter).WriteBatch(vs, nil, nil))
		}},
		{dateC, func(cw file.ColumnChunkWriter, lo, hi int) {
			d, p := optional(lo, hi)
			var vs []int32
			for _, i := range p {
				vs = append(vs, int32(i64[i]%30000))
			}
			must(cw.(*file.Int32ColumnChunkWriter).WriteBatch(vs, d, nil))
		}},
	}
}

// arrowFile writes id int64, x float64 (with nulls), s string (with nulls)
// and l list<int32> through pqarrow with codec, data pages of 512 bytes.
func arrowFile(path string, rng *rand.Rand, codec compress.Compression) {
	mem := memory.NewGoAllocator()
	sch := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "x", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
		{Name: "s", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "l", Type: arrow.ListOf(arrow.PrimitiveTypes.Int32), Nullable: true},
	}, nil)
	b := array.NewRecordBuilder(mem, sch)
	defer b.Release()
	for i := 0; i < rows; i++ {
		b.Field(0).(*array.Int64Builder).Append(int64(i))
		if i%5 == 2 {
			b.Field(1).AppendNull()
			b.Field(2).AppendNull()
		} else {
			b.Field(1).(*array.Float64Builder).Append(rng.NormFloat64())
			b.Field(2).(*array.StringBuilder).Append(fmt.Sprintf("row %d", rng.IntN(50)))
		}
		lb := b.Field(3).(*array.ListBuilder)
		lb.Append(true)
		for j := rng.IntN(4); j > 0; j-- {
			lb.ValueBuilder().(*array.Int32Builder).Append(rng.Int32())
		}
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	f := must(os.Create(path))
	props := parquet.NewWriterProperties(parquet.WithCompression(codec), parquet.WithDataPageSize(512),
		parquet.WithMaxRowGroupLength(100), parquet.WithCreatedBy("meshfeed testdata/otherwriters"))
	w := must(pqarrow.NewFileWriter(sch, f, props, pqarrow.DefaultWriterProps()))
	if err := w.Write(rec); err != nil {
		fail(err)
	}
	if err := w.Close(); err != nil {
		fail(err)
	}
}

// multiMemberGzip writes each page as two gzip members (what concatenating
// writers produce); readers must read past the first member's end.
type multiMemberGzip struct{}

func (multiMemberGzip) Encode(dst, src []byte) []byte {
	var buf bytes.Buffer
	half := len(src) / 2
	for _, part := range [][]byte{src[:half], src[half:]} {
		zw := gzip.NewWriter(&buf)
		must(zw.Write(part))
		if err := zw.Close(); err != nil {
			fail(err)
		}
	}
	return append(dst[:0], buf.Bytes()...)
}

func (c multiMemberGzip) EncodeLevel(dst, src []byte, _ int) []byte { return c.Encode(dst, src) }

func (multiMemberGzip) CompressBound(n int64) int64 { return n + 64 + n/8 }

func (multiMemberGzip) Decode(dst, src []byte) []byte {
	zr := must(gzip.NewReader(bytes.NewReader(src)))
	return must(io.ReadAll(zr))
}
