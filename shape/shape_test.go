package shape

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/bitutil"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/meshfeed/meshfeed/internal/testseed"
)

// shapeSeed returns the seed of a randomized test: $MESHFEED_SEED when set,
// else the clock. It is logged so a failure can be replayed.
func shapeSeed(t testing.TB) uint64 { return testseed.Get(t, 0, "") }

// shapeBitmap returns a validity bitmap for n slots with the given null slots,
// or nil when there are none.
func shapeBitmap(n int, nulls []int) *memory.Buffer {
	if len(nulls) == 0 {
		return nil
	}
	bm := make([]byte, bitutil.BytesForBits(int64(n)))
	bitutil.SetBitsTo(bm, 0, int64(n), true)
	for _, i := range nulls {
		bitutil.ClearBit(bm, i)
	}
	return memory.NewBufferBytes(bm)
}

// shapePrim builds a primitive array of vals (null slots keep their value
// underneath, as garbage would be).
func shapePrim[T arrow.FixedWidthType](dt arrow.DataType, vals []T, nulls ...int) arrow.Array {
	d := array.NewData(dt, len(vals), []*memory.Buffer{shapeBitmap(len(vals), nulls), memory.NewBufferBytes(arrow.GetBytes(vals))}, nil, len(nulls), 0)
	defer d.Release()
	return array.MakeFromData(d)
}

// shapeList builds a list<dt> array of rows; null rows are empty.
func shapeList[T arrow.FixedWidthType](dt arrow.DataType, rows [][]T, nulls ...int) arrow.Array {
	offs := make([]int32, len(rows)+1)
	var vals []T
	for i, r := range rows {
		vals = append(vals, r...)
		offs[i+1] = int32(len(vals))
	}
	child := array.NewData(dt, len(vals), []*memory.Buffer{nil, memory.NewBufferBytes(arrow.GetBytes(append(vals, *new(T))))}, nil, 0, 0)
	defer child.Release()
	d := array.NewData(arrow.ListOf(dt), len(rows), []*memory.Buffer{shapeBitmap(len(rows), nulls), memory.NewBufferBytes(arrow.GetBytes(offs))}, []arrow.ArrayData{child}, len(nulls), 0)
	defer d.Release()
	return array.MakeFromData(d)
}

func shapeRecord(t *testing.T, names []string, cols ...arrow.Array) arrow.RecordBatch {
	t.Helper()
	fields := make([]arrow.Field, len(cols))
	for i, c := range cols {
		fields[i] = arrow.Field{Name: names[i], Type: c.DataType(), Nullable: true}
	}
	rec := array.NewRecordBatch(arrow.NewSchema(fields, nil), cols, -1)
	for _, c := range cols {
		c.Release()
	}
	return rec
}

// wantErr checks err against the sentinel and substrings.
func wantErr(t *testing.T, what string, err, sentinel error, subs ...string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s = nil error, want %v", what, sentinel)
		return
	}
	if !errors.Is(err, sentinel) {
		t.Errorf("%s = %v, want errors.Is %v", what, err, sentinel)
	}
	for _, s := range subs {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("%s = %q, want it to contain %q", what, err, s)
		}
	}
}

func TestColumnValidate(t *testing.T) {
	tests := []struct {
		col  Column
		subs []string // each must appear; none: valid
	}{
		{Column{Name: "x"}, nil},
		{Column{Name: "x", DType: BFloat16, Length: 8, Overflow: Truncate, Fill: FillFloat(-1), PackRatio: 0}, nil},
		{Column{Name: "t", Length: 8, PackRatio: 2.5}, nil},
		{Column{}, []string{"empty column name"}},
		{Column{Name: "x", DType: DType(99)}, []string{`"x"`, "unknown DType 99"}},
		{Column{Name: "x", Length: -3}, []string{`"x"`, "Length -3"}},
		{Column{Name: "x", Overflow: Truncate}, []string{"needs a Length"}},
		{Column{Name: "x", Length: 4, PackRatio: 0.5}, []string{"PackRatio 0.5"}},
		{Column{Name: "x", Length: 4, PackRatio: math.NaN()}, []string{"PackRatio NaN"}},
		{Column{Name: "x", PackRatio: 2}, []string{"PackRatio 2 needs a Length"}},
		// Every problem at once.
		{Column{Name: "y", DType: DType(42), Length: -1, Overflow: ListRule(7), PackRatio: -1}, []string{"unknown DType 42", "Length -1", "unknown Overflow rule 7", "PackRatio -1"}},
	}
	for _, tt := range tests {
		err := tt.col.Validate()
		if tt.subs == nil {
			if err != nil {
				t.Errorf("Validate(%+v) = %v, want nil", tt.col, err)
			}
			continue
		}
		wantErr(t, fmt.Sprintf("Validate(%+v)", tt.col), err, ErrShape, tt.subs...)
	}
}

func TestValidateColumns(t *testing.T) {
	err := ValidateColumns([]Column{
		{Name: "a"}, {Name: "a"},
		{Name: "t", Length: 8, PackRatio: 2}, {Name: "w", Length: 16, PackRatio: 2},
	})
	wantErr(t, "ValidateColumns", err, ErrShape, `"a" listed twice`, `"t"`, `"w"`, "must agree")
}

func TestParseDType(t *testing.T) {
	for d := Keep; d < numDTypes; d++ {
		got, err := ParseDType(d.String())
		if err != nil || got != d {
			t.Errorf("ParseDType(%q) = %v, %v, want %v", d.String(), got, err, d)
		}
	}
	if _, err := ParseDType("fp8"); !errors.Is(err, ErrShape) {
		t.Errorf("ParseDType(%q) = %v, want ErrShape", "fp8", err)
	}
}

func TestOutputSchema(t *testing.T) {
	in := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "x", Type: arrow.PrimitiveTypes.Float32, Metadata: arrow.NewMetadata([]string{"unit"}, []string{"m"})},
		{Name: "tok", Type: arrow.ListOf(arrow.PrimitiveTypes.Int64)},
		{Name: "emb", Type: arrow.FixedSizeListOf(4, arrow.PrimitiveTypes.Float64)},
		{Name: "s", Type: arrow.BinaryTypes.String},
	}, nil)
	got, err := OutputSchema(in, []Column{
		{Name: "x", DType: BFloat16},
		{Name: "tok", DType: Int32, Length: 16},
		{Name: "emb", DType: Float16},
		{Name: "id", DType: Int32},
	})
	if err != nil {
		t.Fatalf("OutputSchema: %v", err)
	}
	want := []struct {
		name string
		typ  arrow.DataType
		md   string
	}{
		{"id", arrow.PrimitiveTypes.Int32, ""},
		{"x", arrow.PrimitiveTypes.Uint16, "bfloat16"},
		{"tok", arrow.FixedSizeListOfNonNullable(16, arrow.PrimitiveTypes.Int32), ""},
		{"tok_length", arrow.PrimitiveTypes.Int32, ""},
		{"emb", arrow.FixedSizeListOf(4, arrow.FixedWidthTypes.Float16), ""},
		{"s", arrow.BinaryTypes.String, ""},
	}
	if got.NumFields() != len(want) {
		t.Fatalf("OutputSchema = %v, want %d fields", got, len(want))
	}
	for i, w := range want {
		f := got.Field(i)
		md, _ := f.Metadata.GetValue(DTypeMetadataKey)
		if f.Name != w.name || !arrow.TypeEqual(f.Type, w.typ) || md != w.md {
			t.Errorf("field %d = %s %s %s=%q, want %s %s %q", i, f.Name, f.Type, DTypeMetadataKey, md, w.name, w.typ, w.md)
		}
	}
	if u, _ := got.Field(1).Metadata.GetValue("unit"); u != "m" {
		t.Errorf("field x lost its metadata: %v", got.Field(1).Metadata)
	}

	// Errors, each naming the column and its type; all reported at once.
	_, err = OutputSchema(in, []Column{
		{Name: "nope"},
	})
	wantErr(t, "OutputSchema(unknown)", err, ErrShape, `"nope"`, "not in the input schema")
	_, err = OutputSchema(in, []Column{
		{Name: "id", DType: BFloat16},
		{Name: "x", Length: 8},
		{Name: "s", DType: Int8},
		{Name: "emb", Length: 8},
		{Name: "tok", DType: Int8, Fill: FillInt(300), Length: 4},
	})
	wantErr(t, "OutputSchema(mismatch)", err, ErrShape,
		`"id" (int64)`, "bfloat16 needs float32",
		`"x" (float32)`, "Length 8 needs a list",
		`"s" (utf8)`,
		`"emb" (fixed_size_list<item: float64, nullable>[4])`, "Length 8 differs",
		`"tok"`, "Fill 300 does not fit int8")
	// Added columns must not collide.
	in2 := arrow.NewSchema([]arrow.Field{{Name: "tok", Type: arrow.ListOf(arrow.PrimitiveTypes.Int32)}, {Name: "tok_length", Type: arrow.PrimitiveTypes.Int32}}, nil)
	_, err = OutputSchema(in2, []Column{{Name: "tok", Length: 4}})
	wantErr(t, "OutputSchema(collision)", err, ErrShape, `"tok_length" appears twice`)
	// Packing needs every column packed.
	_, err = OutputSchema(in, []Column{{Name: "tok", Length: 4, PackRatio: 2}})
	wantErr(t, "OutputSchema(pack partial)", err, ErrShape, `"id"`, `"s"`, "not packed")
}

func TestApplyKeepsAndShapes(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)

	ids := shapePrim(arrow.PrimitiveTypes.Int64, []int64{7, 8, 9})
	xs := shapePrim(arrow.PrimitiveTypes.Float32, []float32{1, float32(math.Pi), -2})
	tok := shapeList(arrow.PrimitiveTypes.Int64, [][]int64{{1, 2, 3}, {}, {4, 5, 6, 7, 8}})
	rec := shapeRecord(t, []string{"id", "x", "tok"}, ids, xs, tok)
	defer rec.Release()

	cols := []Column{{Name: "x", DType: BFloat16}, {Name: "tok", DType: Int32, Length: 4, Overflow: Truncate, Fill: FillInt(-1)}}
	out, err := Apply(rec, cols, mem)
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	defer out.Release()
	schema, err := OutputSchema(rec.Schema(), cols)
	if err != nil {
		t.Fatal(err)
	}
	if !out.Schema().Equal(schema) {
		t.Errorf("Apply schema = %v, want OutputSchema %v", out.Schema(), schema)
	}
	if out.Column(0) != rec.Column(0) {
		t.Errorf("unshaped column id was not passed through as the same array")
	}
	if got, want := out.Column(1).(*array.Uint16).Values(), []uint16{0x3F80, 0x4049, 0xC000}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("x as bfloat16 = %#04x, want %#04x", got, want)
	}
	fsl := out.Column(2).(*array.FixedSizeList)
	if got, want := fsl.ListValues().(*array.Int32).Int32Values(), []int32{1, 2, 3, -1, -1, -1, -1, -1, 4, 5, 6, 7}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("tok = %v, want %v", got, want)
	}
	if got, want := out.Column(3).(*array.Int32).Int32Values(), []int32{3, 0, 4}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("tok_length = %v, want %v", got, want)
	}
	if err := out.Column(2).(*array.FixedSizeList).ValidateFull(); err != nil {
		t.Errorf("tok is not a valid array: %v", err)
	}

	// A schema that differs from the Shaper's is refused.
	s, err := NewShaper(arrow.NewSchema([]arrow.Field{{Name: "x", Type: arrow.PrimitiveTypes.Float64}}, nil), []Column{{Name: "x", DType: Float32}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Apply(rec, mem)
	wantErr(t, "Shaper.Apply(other schema)", err, ErrShape, "differs")
}

func TestApplyErrorsReleaseEverything(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	xs := shapePrim(arrow.PrimitiveTypes.Float32, []float32{1, 2})
	big := shapePrim(arrow.PrimitiveTypes.Int64, []int64{1, 1 << 40})
	rec := shapeRecord(t, []string{"x", "big"}, xs, big)
	defer rec.Release()
	_, err := Apply(rec, []Column{{Name: "x", DType: Float16}, {Name: "big", DType: Int32}}, mem)
	wantErr(t, "Apply(overflow)", err, ErrOverflow, `"big"`, "row 1", "1099511627776")
}
