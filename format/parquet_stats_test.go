package format

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	pq "github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
)

// statsFile writes 3 row groups of 10 rows (a string column of two values
// per row group, s{g} and s{g+2}, and an int64 column 10g..10g+9, with
// nulls every 7th row) with the writer properties given.
func statsFile(t *testing.T, props ...pq.WriterProperty) (*parquetFooter, Source) {
	t.Helper()
	mem := memory.NewGoAllocator()
	sb, ib := array.NewStringBuilder(mem), array.NewInt64Builder(mem)
	defer sb.Release()
	defer ib.Release()
	for i := range 30 {
		sb.Append(fmt.Sprintf("s%d", i/10+2*(i%2)))
		if i%7 == 3 {
			ib.AppendNull()
		} else {
			ib.Append(int64(i))
		}
	}
	sch := arrow.NewSchema([]arrow.Field{{Name: "s", Type: arrow.BinaryTypes.String}, {Name: "i", Type: arrow.PrimitiveTypes.Int64, Nullable: true}}, nil)
	s, i := sb.NewArray(), ib.NewArray()
	defer s.Release()
	defer i.Release()
	tbl := array.NewTableFromSlice(sch, [][]arrow.Array{{s}, {i}})
	defer tbl.Release()
	var buf bytes.Buffer
	if err := pqarrow.WriteTable(tbl, &buf, 10, pq.NewWriterProperties(props...), pqarrow.NewArrowWriterProperties()); err != nil {
		t.Fatal(err)
	}
	src := bytesSource{uri: "stats.parquet", b: buf.Bytes()}
	ft, err := ReadParquetFooter(context.Background(), src, testOptions())
	if err != nil {
		t.Fatal(err)
	}
	return ft.(*parquetFooter), src
}

// TestColumnStatsAndDictionary: a row group's bounds and null count come
// from the footer as the column's type; its dictionary page gives its
// distinct values when every data page is dictionary-encoded, and nothing
// when the writer wrote none.
func TestColumnStatsAndDictionary(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	ctx := context.Background()
	pf, src := statsFile(t, pq.WithDictionaryDefault(true))
	for rg := range 3 {
		st, ok := pf.ColumnStats(rg, "i", arrow.PrimitiveTypes.Int64, mem)
		if !ok || st.MinMax == nil || st.Rows != 10 || !st.NullsKnown {
			t.Fatalf("row group %d: ColumnStats(i) = %+v, %v", rg, st, ok)
		}
		lo, hi := st.MinMax.(*array.Int64).Value(0), st.MinMax.(*array.Int64).Value(1)
		var nulls int64
		for i := rg * 10; i < rg*10+10; i++ {
			if i%7 == 3 {
				nulls++
			}
		}
		if lo < int64(rg*10) || hi > int64(rg*10+9) || st.Nulls != nulls {
			t.Errorf("row group %d: i in [%d, %d] with %d nulls, want within [%d, %d] with %d", rg, lo, hi, st.Nulls, rg*10, rg*10+9, nulls)
		}
		st.MinMax.Release()
	}
	// arrow-go writes these chunks PLAIN: no dictionary to use.
	if dict, ok, err := pf.ColumnDictionary(ctx, src, 0, "s", arrow.BinaryTypes.String, mem); ok || err != nil || dict != nil {
		t.Errorf("ColumnDictionary of a chunk without a dictionary page = %v, %v, %v, want none", dict, ok, err)
	}
	// pyarrow's dictionary-encoded strings: the dictionary holds exactly the
	// distinct values the decoder reads.
	f := mustOpen(t, "../testdata/pyarrow/dictionary.parquet", []string{"city"}, validityOptions())
	rec, err := f.readRowGroup(ctx, 0, mem)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	col := rec.Column(0)
	for i := range col.Len() {
		if col.IsValid(i) {
			want[col.ValueStr(i)] = true
		}
	}
	rec.Release()
	dict, ok, err := f.ft.(*parquetFooter).ColumnDictionary(ctx, f.src, 0, "city", arrow.BinaryTypes.String, mem)
	if err != nil || !ok {
		t.Fatalf("ColumnDictionary(city) = %v, %v", ok, err)
	}
	got := map[string]bool{}
	for i := range dict.Len() {
		got[dict.ValueStr(i)] = true
	}
	dict.Release()
	if len(got) != len(want) || len(want) == 0 {
		t.Errorf("dictionary of city holds %d values, the column %d distinct ones", len(got), len(want))
	}
	for v := range want {
		if !got[v] {
			t.Errorf("value %q of city is not in its dictionary", v)
		}
	}
	noStats, _ := statsFile(t, pq.WithStats(false))
	if st, ok := noStats.ColumnStats(0, "i", arrow.PrimitiveTypes.Int64, mem); !ok || st.MinMax != nil {
		t.Errorf("ColumnStats of a file written without statistics: bounds %v, want none", st.MinMax)
	}
}
