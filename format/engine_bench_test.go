package format

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	pq "github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/parquet-go/parquet-go"
)

// BenchmarkPageEngine compares parquet-go's page engine (decodeChunk) with
// arrow-go (decodeFallback) on the columns the engine serves and the fast
// path does not: dictionary-encoded ints and strings, nullable ints with a
// fill and kept as validity, booleans (PLAIN, v1 pages) and plain strings.
// One row group of 1<<18 rows, snappy, page cache warm (the file is read
// into memory once); MB/s counts the column chunk's uncompressed bytes.
//
//	go test -run '^$' -bench BenchmarkPageEngine -count 5 ./format
func BenchmarkPageEngine(b *testing.B) {
	const rows = 1 << 18
	dir := b.TempDir()
	path := filepath.Join(dir, "engine.parquet")
	writeEngineFile(b, path, rows)
	data, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name, col string
		opts      Options
	}{
		{"dictint", "dictint", testOptions()},
		{"dictstr", "dictstr", testOptions()},
		{"nullfill", "nullable", fillOptions(map[string]float64{"nullable": -1})},
		{"nullkeep", "nullable", validityOptions()},
		{"bool", "flag", testOptions()},
		{"plainstr", "plainstr", testOptions()},
	} {
		ctx := context.Background()
		d := mustOpen(b, path, []string{c.col}, c.opts).parquet()
		col := &d.cols[0]
		md := &d.pf.Metadata().RowGroups[0].Columns[col.leaf].MetaData
		if md.Codec != 1 { // SNAPPY
			b.Fatalf("column %q: codec %v", c.col, md.Codec)
		}
		fcc := d.pf.RowGroups()[0].ColumnChunks()[col.leaf].(*parquet.FileColumnChunk)
		ra := &memReaderAt{data}
		for _, engine := range []string{"engine", "arrowgo"} {
			b.Run(fmt.Sprintf("col=%s/%s", c.name, engine), func(b *testing.B) {
				b.SetBytes(md.TotalUncompressedSize)
				b.ReportAllocs()
				mem := memory.NewGoAllocator()
				for b.Loop() {
					var a arrow.Array
					var err error
					if engine == "engine" {
						a, err = col.decodeChunk(fcc, ra, rows, mem, d.maxBytes)
					} else {
						a, err = d.decodeFallback(ctx, col, 0, ra, mem)
					}
					if err != nil {
						b.Fatal(err)
					}
					if a.Len() != rows {
						b.Fatalf("%d rows", a.Len())
					}
					a.Release()
				}
			})
		}
	}
}

type memReaderAt struct{ b []byte }

func (m *memReaderAt) ReadAt(p []byte, off int64) (int, error) {
	if off >= int64(len(m.b)) {
		return 0, fmt.Errorf("read at %d past %d", off, len(m.b))
	}
	n := copy(p, m.b[off:])
	if n < len(p) {
		return n, fmt.Errorf("short read")
	}
	return n, nil
}

// writeEngineFile writes the columns of BenchmarkPageEngine: one row group,
// snappy, v1 pages, dictionaries on the dict* columns alone.
func writeEngineFile(b *testing.B, path string, rows int) {
	mem := memory.NewGoAllocator()
	sch := arrow.NewSchema([]arrow.Field{
		{Name: "dictint", Type: arrow.PrimitiveTypes.Int64},
		{Name: "dictstr", Type: arrow.BinaryTypes.String},
		{Name: "nullable", Type: arrow.PrimitiveTypes.Int32, Nullable: true},
		{Name: "flag", Type: arrow.FixedWidthTypes.Boolean},
		{Name: "plainstr", Type: arrow.BinaryTypes.String},
	}, nil)
	bld := array.NewRecordBuilder(mem, sch)
	defer bld.Release()
	for i := range rows {
		bld.Field(0).(*array.Int64Builder).Append(int64(i*7919%1000) * 1_000_003)
		bld.Field(1).(*array.StringBuilder).Append(fmt.Sprintf("category-%03d", i*31%500))
		if i%10 == 3 {
			bld.Field(2).AppendNull()
		} else {
			bld.Field(2).(*array.Int32Builder).Append(int32(i))
		}
		bld.Field(3).(*array.BooleanBuilder).Append(i%3 == 0)
		bld.Field(4).(*array.StringBuilder).Append(fmt.Sprintf("row %d of the file", i*2654435761%1_000_000_007))
	}
	rec := bld.NewRecordBatch()
	defer rec.Release()
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	w, err := pqarrow.NewFileWriter(sch, f, pq.NewWriterProperties(pq.WithCompression(compress.Codecs.Snappy), pq.WithDataPageVersion(pq.DataPageV1),
		pq.WithMaxRowGroupLength(int64(rows)), pq.WithDictionaryDefault(false),
		pq.WithDictionaryFor("dictint", true), pq.WithDictionaryFor("dictstr", true)), pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema()))
	if err != nil {
		b.Fatal(err)
	}
	if err := w.Write(rec); err != nil {
		b.Fatal(err)
	}
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
}
