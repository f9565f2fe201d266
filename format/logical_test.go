package format

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/decimal256"
	"github.com/apache/arrow-go/v18/arrow/float16"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
)

// logicalRecord holds one column of each logical type whose meaning a
// physical type alone loses: decimals (on INT32, INT64, FIXED_LEN_BYTE_ARRAY),
// timestamps with unit and zone, dates, times, float16, fixed-size binary.
func logicalRecord(t *testing.T, n int) arrow.RecordBatch {
	t.Helper()
	mem := memory.NewGoAllocator()
	d9 := &arrow.Decimal128Type{Precision: 9, Scale: 2}
	d18 := &arrow.Decimal128Type{Precision: 18, Scale: 4}
	d38 := &arrow.Decimal128Type{Precision: 38, Scale: 10}
	d50 := &arrow.Decimal256Type{Precision: 50, Scale: 5}
	fields := []arrow.Field{
		{Name: "dec9", Type: d9}, {Name: "dec18", Type: d18}, {Name: "dec38", Type: d38}, {Name: "dec50", Type: d50},
		{Name: "ts_ms_utc", Type: &arrow.TimestampType{Unit: arrow.Millisecond, TimeZone: "UTC"}},
		{Name: "ts_us", Type: &arrow.TimestampType{Unit: arrow.Microsecond}},
		{Name: "ts_ns_utc", Type: &arrow.TimestampType{Unit: arrow.Nanosecond, TimeZone: "UTC"}},
		{Name: "date", Type: arrow.FixedWidthTypes.Date32},
		{Name: "time_ms", Type: arrow.FixedWidthTypes.Time32ms},
		{Name: "time_ns", Type: arrow.FixedWidthTypes.Time64ns},
		{Name: "half", Type: arrow.FixedWidthTypes.Float16},
		{Name: "fsb", Type: &arrow.FixedSizeBinaryType{ByteWidth: 3}},
	}
	sch := arrow.NewSchema(fields, nil)
	b := array.NewRecordBuilder(mem, sch)
	defer b.Release()
	for i := 0; i < n; i++ {
		v := int64(i*7919 - 50000)
		b.Field(0).(*array.Decimal128Builder).Append(decimal128.FromI64(v))
		b.Field(1).(*array.Decimal128Builder).Append(decimal128.FromI64(v * 1000003))
		b.Field(2).(*array.Decimal128Builder).Append(decimal128.New(v, uint64(i)))
		b.Field(3).(*array.Decimal256Builder).Append(decimal256.New(0, 0, uint64(i), uint64(v)))
		b.Field(4).(*array.TimestampBuilder).Append(arrow.Timestamp(v * 1000))
		b.Field(5).(*array.TimestampBuilder).Append(arrow.Timestamp(v))
		b.Field(6).(*array.TimestampBuilder).Append(arrow.Timestamp(v * 999))
		b.Field(7).(*array.Date32Builder).Append(arrow.Date32(v / 10))
		b.Field(8).(*array.Time32Builder).Append(arrow.Time32(i * 1000))
		b.Field(9).(*array.Time64Builder).Append(arrow.Time64(int64(i) * 1e9))
		b.Field(10).(*array.Float16Builder).Append(float16.New(float32(v) / 100))
		b.Field(11).(*array.FixedSizeBinaryBuilder).Append([]byte{byte(i), byte(i >> 8), 7})
	}
	return b.NewRecordBatch()
}

// TestLogicalTypesKeepTheirMeaning: files from a writer that stores no
// ARROW:schema (arrow-go by default, Spark, parquet-mr) come back with their
// logical types (never as the unscaled integers or raw bytes of their
// physical types), values equal, decimals also when stored as integers.
func TestLogicalTypesKeepTheirMeaning(t *testing.T) {
	const n = 1000
	rec := logicalRecord(t, n)
	defer rec.Release()
	dir := t.TempDir()
	ctx := context.Background()
	for name, props := range map[string][]parquet.WriterProperty{
		"flba":    nil,
		"integer": {parquet.WithStoreDecimalAsInteger(true)},
		"plain":   {parquet.WithDictionaryDefault(false), parquet.WithStoreDecimalAsInteger(true)},
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(dir, name+".parquet")
			f, err := os.Create(path)
			if err != nil {
				t.Fatal(err)
			}
			props = append(props, parquet.WithMaxRowGroupLength(300))
			w, err := pqarrow.NewFileWriter(rec.Schema(), f, parquet.NewWriterProperties(props...), pqarrow.DefaultWriterProps())
			if err != nil {
				t.Fatal(err)
			}
			if err := w.Write(rec); err != nil {
				t.Fatal(err)
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
			defer mem.AssertSize(t, 0)
			ds, err := openDS(t, path, nil, testOptions())
			if err != nil {
				t.Fatal(err)
			}
			for i, f := range rec.Schema().Fields() {
				if got := ds.Schema.Field(i).Type; !arrow.TypeEqual(got, f.Type) {
					t.Errorf("column %q planned as %s, want %s", f.Name, got, f.Type)
				}
			}
			row := int64(0)
			for rg := range ds.Files[0].RowGroups {
				got, err := ds.ReadRowGroup(ctx, 0, rg, mem)
				if err != nil {
					t.Fatal(err)
				}
				want := rec.NewSlice(row, row+got.NumRows())
				for i := range rec.Schema().Fields() {
					if g, w := got.Column(i), want.Column(i); !array.Equal(g, w) {
						t.Errorf("row group %d column %q (%s) differs: first rows %v, want %v", rg, rec.Schema().Field(i).Name, g.DataType(), array.NewSlice(g, 0, 3), array.NewSlice(w, 0, 3))
					}
				}
				row += got.NumRows()
				want.Release()
				got.Release()
			}
			if row != n {
				t.Errorf("read %d rows, want %d", row, n)
			}
		})
	}
}

// TestFallbackMemoryLimit: columns arrow-go decodes are held to
// WithMaxRowGroupBytes like the others: a clear error, not an allocation.
func TestFallbackMemoryLimit(t *testing.T) {
	rec := logicalRecord(t, 1000)
	defer rec.Release()
	path := filepath.Join(t.TempDir(), "f.parquet")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := pqarrow.NewFileWriter(rec.Schema(), f, parquet.NewWriterProperties(parquet.WithDictionaryDefault(false)), pqarrow.DefaultWriterProps())
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(rec); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	o := testOptions()
	o.MaxBytes = 1000
	ds, err := openDS(t, path, []string{"dec38"}, o)
	if err != nil {
		t.Fatal(err)
	}
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	_, err = ds.ReadRowGroup(ctx, 0, 0, mem)
	if err == nil || !strings.Contains(err.Error(), "over the limit of 1000") || !strings.Contains(err.Error(), `"dec38"`) {
		t.Errorf("ReadRowGroup = %v, want the row group limit error naming dec38", err)
	}
}
