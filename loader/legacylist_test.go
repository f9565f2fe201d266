package loader

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/parquet-go/parquet-go/deprecated"
	"github.com/parquet-go/parquet-go/encoding/thrift"
	"github.com/parquet-go/parquet-go/format"

	"github.com/meshfeed/meshfeed/objstore"
)

// writeLegacyList writes, byte by byte, the layout parquet-avro writes for
// a list of lists (parquet-testing's old_list_structure.parquet):
//
//	required group a (LIST) {
//	  repeated group array (LIST) {
//	    repeated int32 array;
//	  }
//	}
//
// holding the rows [[1,2],[3]], [], [[],[4,5]], [[6]] in one v1 page.
func writeLegacyList(t *testing.T, path string) {
	t.Helper()
	// Levels (bit width 2, one bit-packed run of 8): repetition
	// 0,2,1,0,0,1,2,0; definition 2,2,2,0,1,2,2,2.
	section := func(b0, b1 byte) []byte { return []byte{3, 0, 0, 0, 3, b0, b1} }
	body := append(section(0x18, 0x24), section(0x2a, 0xa9)...)
	for v := int32(1); v <= 6; v++ {
		body = binary.LittleEndian.AppendUint32(body, uint32(v))
	}
	h := format.PageHeader{Type: format.DataPage, UncompressedPageSize: int32(len(body)), CompressedPageSize: int32(len(body))}
	h.DataPageHeader = thrift.New(format.DataPageHeader{NumValues: 8, Encoding: format.Plain, DefinitionLevelEncoding: format.RLE, RepetitionLevelEncoding: format.RLE})
	page := append(pageHeader(t, h), body...)
	file := append([]byte("PAR1"), page...)
	list := deprecated.List
	meta := format.FileMetaData{
		Version: 1,
		Schema: []format.SchemaElement{
			{Name: "schema", NumChildren: thrift.New(int32(1))},
			{Name: "a", RepetitionType: thrift.New(format.Required), NumChildren: thrift.New(int32(1)), ConvertedType: thrift.New(list)},
			{Name: "array", RepetitionType: thrift.New(format.Repeated), NumChildren: thrift.New(int32(1)), ConvertedType: thrift.New(list)},
			{Name: "array", RepetitionType: thrift.New(format.Repeated), Type: thrift.New(format.Int32)},
		},
		NumRows: 4,
		RowGroups: []format.RowGroup{{
			Columns: []format.ColumnChunk{{FileOffset: 4, MetaData: format.ColumnMetaData{
				Type: format.Int32, Encoding: []format.Encoding{format.Plain, format.RLE}, PathInSchema: []string{"a", "array", "array"},
				Codec: format.Uncompressed, NumValues: 8, TotalUncompressedSize: int64(len(page)), TotalCompressedSize: int64(len(page)), DataPageOffset: 4,
			}}},
			TotalByteSize: int64(len(page)),
			NumRows:       4,
		}},
	}
	footer, err := thrift.Marshal(new(thrift.CompactProtocol), &meta)
	if err != nil {
		t.Fatal(err)
	}
	file = append(file, footer...)
	file = binary.LittleEndian.AppendUint32(file, uint32(len(footer)))
	file = append(file, "PAR1"...)
	if err := os.WriteFile(path, file, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestLegacyTwoLevelList: a legacy two-level list of lists is read as
// pyarrow reads it (checked by hand with pyarrow 17 on the file this test
// writes: list<array: list<array: int32 not null> not null> not null, rows
// [[[1, 2], [3]], [], [[], [4, 5]], [[6]]]), not as a list of structs.
func TestLegacyTwoLevelList(t *testing.T) {
	path := filepath.Join(t.TempDir(), "old_list.parquet")
	writeLegacyList(t, path)
	ctx := context.Background()
	store := objstore.NewLocalStore()
	defer store.Close()
	ds, err := Open(ctx, store, []string{path}, WithFooterCache(nil))
	if err != nil {
		t.Fatal(err)
	}
	want := arrow.ListOfField(arrow.Field{Name: "array", Nullable: false,
		Type: arrow.ListOfField(arrow.Field{Name: "array", Type: arrow.PrimitiveTypes.Int32, Nullable: false})})
	f := ds.Schema.Field(0)
	if !arrow.TypeEqual(f.Type, want) || f.Type.String() != want.String() || f.Nullable {
		t.Fatalf("column a: %v (nullable %v), want %v, not nullable", f.Type, f.Nullable, want)
	}
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	rd := ds.NewReader(ctx, ds.RowGroups(), mem)
	defer rd.Close()
	r, _, err := rd.Next()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Release()
	outer, ok := r.Column(0).(*array.List)
	if !ok || !arrow.TypeEqual(outer.DataType(), want) {
		t.Fatalf("column a decoded as %v, want %v", r.Column(0).DataType(), want)
	}
	inner := outer.ListValues().(*array.List)
	vals := inner.ListValues().(*array.Int32)
	var got [][][]int32
	for i := 0; i < outer.Len(); i++ {
		lo, hi := outer.ValueOffsets(i)
		row := [][]int32{}
		for j := lo; j < hi; j++ {
			a, b := inner.ValueOffsets(int(j))
			row = append(row, append([]int32{}, vals.Int32Values()[a:b]...))
		}
		got = append(got, row)
	}
	wantRows := [][][]int32{{{1, 2}, {3}}, {}, {{}, {4, 5}}, {{6}}}
	if fmt.Sprint(got) != fmt.Sprint(wantRows) {
		t.Fatalf("column a = %v, want %v", got, wantRows)
	}
}
