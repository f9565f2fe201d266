package format

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
	pqformat "github.com/parquet-go/parquet-go/format"
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
	h := pqformat.PageHeader{Type: pqformat.DataPage, UncompressedPageSize: int32(len(body)), CompressedPageSize: int32(len(body))}
	h.DataPageHeader = thrift.New(pqformat.DataPageHeader{NumValues: 8, Encoding: pqformat.Plain, DefinitionLevelEncoding: pqformat.RLE, RepetitionLevelEncoding: pqformat.RLE})
	page := append(pageHeader(t, h), body...)
	file := append([]byte("PAR1"), page...)
	list := deprecated.List
	meta := pqformat.FileMetaData{
		Version: 1,
		Schema: []pqformat.SchemaElement{
			{Name: "schema", NumChildren: thrift.New(int32(1))},
			{Name: "a", RepetitionType: thrift.New(pqformat.Required), NumChildren: thrift.New(int32(1)), ConvertedType: thrift.New(list)},
			{Name: "array", RepetitionType: thrift.New(pqformat.Repeated), NumChildren: thrift.New(int32(1)), ConvertedType: thrift.New(list)},
			{Name: "array", RepetitionType: thrift.New(pqformat.Repeated), Type: thrift.New(pqformat.Int32)},
		},
		NumRows: 4,
		RowGroups: []pqformat.RowGroup{{
			Columns: []pqformat.ColumnChunk{{FileOffset: 4, MetaData: pqformat.ColumnMetaData{
				Type: pqformat.Int32, Encoding: []pqformat.Encoding{pqformat.Plain, pqformat.RLE}, PathInSchema: []string{"a", "array", "array"},
				Codec: pqformat.Uncompressed, NumValues: 8, TotalUncompressedSize: int64(len(page)), TotalCompressedSize: int64(len(page)), DataPageOffset: 4,
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
	file := mustOpen(t, path, nil, testOptions())
	want := arrow.ListOfField(arrow.Field{Name: "array", Nullable: false,
		Type: arrow.ListOfField(arrow.Field{Name: "array", Type: arrow.PrimitiveTypes.Int32, Nullable: false})})
	f := file.parquet().sch.Field(0)
	if !arrow.TypeEqual(f.Type, want) || f.Type.String() != want.String() || f.Nullable {
		t.Fatalf("column a: %v (nullable %v), want %v, not nullable", f.Type, f.Nullable, want)
	}
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	r, err := file.readRowGroup(ctx, 0, mem)
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
