package shape

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// shapeListWithNullElems builds list<int64> with null elements (given as
// row, element) using the builder.
func shapeListWithNullElems(mem memory.Allocator, rows [][]int64, nullElems map[[2]int]bool) arrow.Array {
	b := array.NewListBuilder(mem, arrow.PrimitiveTypes.Int64)
	defer b.Release()
	vb := b.ValueBuilder().(*array.Int64Builder)
	for r, row := range rows {
		b.Append(true)
		for j, v := range row {
			if nullElems[[2]int{r, j}] {
				vb.AppendNull()
			} else {
				vb.Append(v)
			}
		}
	}
	return b.NewArray()
}

func TestPadList(t *testing.T) {
	i64 := arrow.PrimitiveTypes.Int64
	tests := []struct {
		name      string
		in        func(mem memory.Allocator) arrow.Array
		col       Column
		want      string // tokens, flattened
		wantLen   string
		sentinel  error
		errSubstr []string
	}{
		{"pad zero", func(memory.Allocator) arrow.Array { return shapeList(i64, [][]int64{{1, 2}, {}, {3, 4, 5}}) },
			Column{Length: 3}, "[1 2 0 0 0 0 3 4 5]", "[2 0 3]", nil, nil},
		{"pad fill", func(memory.Allocator) arrow.Array { return shapeList(i64, [][]int64{{1}, {2, 3}}) },
			Column{Length: 4, Fill: FillInt(-7)}, "[1 -7 -7 -7 2 3 -7 -7]", "[1 2]", nil, nil},
		{"truncate", func(memory.Allocator) arrow.Array { return shapeList(i64, [][]int64{{1, 2, 3, 4, 5}, {6}}) },
			Column{Length: 2, Overflow: Truncate}, "[1 2 6 0]", "[2 1]", nil, nil},
		{"reject", func(memory.Allocator) arrow.Array {
			return shapeList(i64, [][]int64{{1}, {1, 2, 3, 4, 5}, {1, 2, 3, 4, 5, 6, 7}})
		},
			Column{Length: 3}, "", "", ErrTooLong, []string{`"reject"`, "row 1", "5 elements", "Length 3", "longest in this slice: 7 elements, row 2", "Truncate", "at least 7"}},
		{"null entry without fill", func(memory.Allocator) arrow.Array { return shapeList(i64, [][]int64{{1}, {2}, {}}, 2) },
			Column{Length: 2}, "", "", ErrNullList, []string{`"null entry without fill"`, "row 2", "Fill"}},
		{"null entry with fill", func(memory.Allocator) arrow.Array { return shapeList(i64, [][]int64{{1}, {}, {2}}, 1) },
			Column{Length: 2, Fill: FillInt(9)}, "[1 9 9 9 2 9]", "[1 0 1]", nil, nil},
		{"null element without fill", func(mem memory.Allocator) arrow.Array {
			return shapeListWithNullElems(mem, [][]int64{{1, 2}, {3, 4}}, map[[2]int]bool{{1, 1}: true})
		}, Column{Length: 2}, "", "", ErrNullList, []string{"row 1 element 1"}},
		{"null element with fill", func(mem memory.Allocator) arrow.Array {
			return shapeListWithNullElems(mem, [][]int64{{1, 2}, {3, 4}}, map[[2]int]bool{{1, 0}: true})
		}, Column{Length: 3, Fill: FillInt(-1)}, "[1 2 -1 -1 4 -1]", "[2 2]", nil, nil},
		{"cast inside", func(memory.Allocator) arrow.Array { return shapeList(i64, [][]int64{{1, -2}, {127}}) },
			Column{Length: 2, DType: Int8}, "[1 -2 127 0]", "[2 1]", nil, nil},
		{"cast inside overflow", func(memory.Allocator) arrow.Array { return shapeList(i64, [][]int64{{1}, {2, 3, 300}}) },
			Column{Length: 4, DType: Int8}, "", "", ErrOverflow, []string{`"cast inside overflow"`, "row 1 element 2", "300"}},
		{"sliced", func(memory.Allocator) arrow.Array {
			full := shapeList(i64, [][]int64{{9, 9}, {1, 2, 3}, {4}, {9}})
			defer full.Release()
			return array.NewSlice(full, 1, 3)
		}, Column{Length: 2, Overflow: Truncate}, "[1 2 4 0]", "[2 1]", nil, nil},
		{"large list", func(mem memory.Allocator) arrow.Array {
			b := array.NewLargeListBuilder(mem, i64)
			defer b.Release()
			vb := b.ValueBuilder().(*array.Int64Builder)
			b.Append(true)
			vb.AppendValues([]int64{5, 6, 7}, nil)
			b.Append(true)
			return b.NewArray()
		}, Column{Length: 4}, "[5 6 7 0 0 0 0 0]", "[3 0]", nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
			defer mem.AssertSize(t, 0)
			rec := shapeRecord(t, []string{tt.name}, tt.in(mem))
			defer rec.Release()
			col := tt.col
			col.Name = tt.name
			out, err := Apply(rec, []Column{col}, mem)
			if tt.sentinel != nil {
				wantErr(t, fmt.Sprintf("Apply(%s)", tt.name), err, tt.sentinel, tt.errSubstr...)
				if out != nil {
					out.Release()
				}
				return
			}
			if err != nil {
				t.Fatalf("Apply(%s) = %v", tt.name, err)
			}
			defer out.Release()
			fsl := out.Column(0).(*array.FixedSizeList)
			if err := fsl.ValidateFull(); err != nil {
				t.Errorf("output invalid: %v", err)
			}
			var got string
			switch v := fsl.ListValues().(type) {
			case *array.Int64:
				got = fmt.Sprint(v.Int64Values())
			case *array.Int8:
				got = fmt.Sprint(v.Int8Values())
			}
			if got != tt.want {
				t.Errorf("Apply(%s) tokens = %s, want %s", tt.name, got, tt.want)
			}
			if got := fmt.Sprint(out.Column(1).(*array.Int32).Int32Values()); got != tt.wantLen {
				t.Errorf("Apply(%s) lengths = %s, want %s", tt.name, got, tt.wantLen)
			}
			if name := out.Schema().Field(1).Name; name != tt.name+"_length" {
				t.Errorf("length column name = %q, want %q", name, tt.name+"_length")
			}
		})
	}
}

// TestPadRoundTrip: random lists padded to L, read back through the lengths
// column, give the original lists (truncated to L).
func TestPadRoundTrip(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	rng := rand.New(rand.NewPCG(shapeSeed(t), 3))
	for iter := 0; iter < 50; iter++ {
		n, L := rng.IntN(40), 1+rng.IntN(20)
		rows := make([][]float32, n)
		for r := range rows {
			rows[r] = make([]float32, rng.IntN(2*L))
			for j := range rows[r] {
				rows[r][j] = float32(rng.NormFloat64())
			}
		}
		rec := shapeRecord(t, []string{"v"}, shapeList(arrow.PrimitiveTypes.Float32, rows))
		out, err := Apply(rec, []Column{{Name: "v", Length: L, Overflow: Truncate, Fill: FillFloat(-1)}}, mem)
		if err != nil {
			t.Fatalf("Apply: %v", err)
		}
		vals := out.Column(0).(*array.FixedSizeList).ListValues().(*array.Float32).Float32Values()
		lens := out.Column(1).(*array.Int32).Int32Values()
		for r, row := range rows {
			k := min(len(row), L)
			if int(lens[r]) != k {
				t.Fatalf("row %d length = %d, want %d", r, lens[r], k)
			}
			for j := 0; j < L; j++ {
				want := float32(-1)
				if j < k {
					want = row[j]
				}
				if got := vals[r*L+j]; got != want {
					t.Fatalf("row %d element %d = %v, want %v", r, j, got, want)
				}
			}
		}
		out.Release()
		rec.Release()
	}
}

func TestCastFixedSizeList(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	b := array.NewFixedSizeListBuilder(mem, 2, arrow.PrimitiveTypes.Float32)
	vb := b.ValueBuilder().(*array.Float32Builder)
	for r, pair := range [][2]float32{{1, 2}, {3, 4}, {0, 0}, {-1, 0.5}} {
		if r == 2 {
			b.AppendNull() // appends two null children too
			continue
		}
		b.Append(true)
		vb.AppendValues(pair[:], nil)
	}
	full := b.NewArray()
	b.Release()
	sl := array.NewSlice(full, 1, 4)
	full.Release()
	rec := shapeRecord(t, []string{"emb"}, sl)
	defer rec.Release()
	out, err := Apply(rec, []Column{{Name: "emb", DType: BFloat16, Length: 2}}, mem)
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	defer out.Release()
	fsl := out.Column(0).(*array.FixedSizeList)
	if md, _ := out.Schema().Field(0).Metadata.GetValue(DTypeMetadataKey); md != "bfloat16" {
		t.Errorf("metadata %s = %q, want bfloat16", DTypeMetadataKey, md)
	}
	if fsl.Len() != 3 || !fsl.IsNull(1) || fsl.IsNull(0) || fsl.IsNull(2) {
		t.Errorf("validity = %v, want [valid null valid]", []bool{fsl.IsValid(0), fsl.IsValid(1), fsl.IsValid(2)})
	}
	vals := fsl.ListValues().(*array.Uint16).Uint16Values()
	want := []uint16{bf16Reference(3), bf16Reference(4), 0, 0, bf16Reference(-1), bf16Reference(0.5)}
	if fmt.Sprint(vals) != fmt.Sprint(want) {
		t.Errorf("values = %#04x, want %#04x", vals, want)
	}

	// Overflow inside a fixed_size_list names row and element.
	ib := array.NewFixedSizeListBuilder(mem, 3, arrow.PrimitiveTypes.Int32)
	ib.AppendValues([]bool{true, true})
	ib.ValueBuilder().(*array.Int32Builder).AppendValues([]int32{1, 2, 3, 4, 70000, 6}, nil)
	ints := ib.NewArray()
	ib.Release()
	rec2 := shapeRecord(t, []string{"ids"}, ints)
	defer rec2.Release()
	_, err = Apply(rec2, []Column{{Name: "ids", DType: Int16}}, mem)
	wantErr(t, "Apply(fsl overflow)", err, ErrOverflow, `"ids"`, "row 1 element 1", "70000")
}

func TestCastListKeepsVariableLength(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	full := shapeList(arrow.PrimitiveTypes.Int64, [][]int64{{1000}, {1, 2}, {}, {500, 3, 4}, {5}}, 3)
	sl := array.NewSlice(full, 1, 5)
	full.Release()
	rec := shapeRecord(t, []string{"l"}, sl)
	defer rec.Release()
	out, err := Apply(rec, []Column{{Name: "l", DType: Int8}}, mem) // 500 sits under a null row
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	defer out.Release()
	l := out.Column(0).(*array.List)
	if err := l.ValidateFull(); err != nil {
		t.Fatalf("output invalid: %v", err)
	}
	if got, want := l.String(), "[[1 2] [] (null) [5]]"; got != want {
		t.Errorf("cast list = %s, want %s", got, want)
	}
	if !arrow.TypeEqual(l.DataType(), arrow.ListOf(arrow.PrimitiveTypes.Int8)) {
		t.Errorf("type = %s, want list<int8>", l.DataType())
	}
}
