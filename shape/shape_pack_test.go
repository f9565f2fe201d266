package shape

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

func fslInt32(a *array.FixedSizeList) []int32 {
	return a.ListValues().(*array.Int32).Int32Values()
}

func TestPackExample(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	// Lengths 3, 2, 4, 1, 2 into rows of 5, first-fit by hand:
	// row 0: s0 (3) + s1 (2); row 1: s2 (4) + s3 (1); row 2: s4 (2) + padding.
	list := shapeList(arrow.PrimitiveTypes.Int32, [][]int32{{11, 12, 13}, {21, 22}, {31, 32, 33, 34}, {41}, {51, 52}})
	defer list.Release()
	tok, seg, pos, err := Pack(list, 5, 3, Reject, FillInt(-1), mem)
	if err != nil {
		t.Fatalf("Pack: %v", err)
	}
	defer tok.Release()
	defer seg.Release()
	defer pos.Release()
	for _, c := range []struct {
		name string
		got  []int32
		want string
	}{
		{"tokens", fslInt32(tok), "[11 12 13 21 22 31 32 33 34 41 51 52 -1 -1 -1]"},
		{"segment ids", fslInt32(seg), "[1 1 1 2 2 1 1 1 1 2 1 1 0 0 0]"},
		{"positions", fslInt32(pos), "[0 1 2 0 1 0 1 2 3 0 0 1 0 0 0]"},
	} {
		if got := fmt.Sprint(c.got); got != c.want {
			t.Errorf("Pack %s = %s, want %s", c.name, got, c.want)
		}
	}
	if tok.Len() != 3 || seg.Len() != 3 || pos.Len() != 3 {
		t.Errorf("Pack rows = %d, %d, %d, want 3", tok.Len(), seg.Len(), pos.Len())
	}

	// Two rows are not enough: first-fit needs three; nothing is dropped.
	_, _, _, err = Pack(list, 5, 2, Reject, Fill{}, mem)
	wantErr(t, "Pack(rows=2)", err, ErrPackOverflow, "needs 3 rows", "only 2", "lower the packing ratio", "at most 1.667")

	// Too long: rejected, or truncated.
	_, _, _, err = Pack(list, 3, 5, Reject, Fill{}, mem)
	wantErr(t, "Pack(L=3)", err, ErrTooLong, "row 2", "4 elements", "Length 3")
	tok, seg, pos, err = Pack(list, 3, 5, Truncate, Fill{}, mem)
	if err != nil {
		t.Fatalf("Pack(truncate): %v", err)
	}
	// row 0: s0 (3); row 1: s1 (2) + s3 (1); row 2: s2 cut to 3; row 3: s4 (2).
	if got, want := fmt.Sprint(fslInt32(tok)), "[11 12 13 21 22 41 31 32 33 51 52 0 0 0 0]"; got != want {
		t.Errorf("Pack(truncate) tokens = %s, want %s", got, want)
	}
	tok.Release()
	seg.Release()
	pos.Release()
}

func TestPackAlignedMismatch(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	a := shapeList(arrow.PrimitiveTypes.Int32, [][]int32{{1, 2}, {3}})
	b := shapeList(arrow.PrimitiveTypes.Float32, [][]float32{{1, 1}, {1, 1}})
	defer a.Release()
	defer b.Release()
	_, _, _, err := PackAligned([]PackInput{{Name: "tokens", List: a}, {Name: "weights", List: b}}, 4, 2, Reject, mem)
	wantErr(t, "PackAligned(mismatch)", err, ErrShape, `"tokens"`, `"weights"`, "row 1", "1 vs 2")
}

// firstFitReference places sequences the slow way: scan rows from the first.
func firstFitReference(lens []int, length, rows int) (row []int, ok bool) {
	used := make([]int, rows)
	row = make([]int, len(lens))
	for i, k := range lens {
		row[i] = -1
		if k == 0 {
			continue
		}
		for r := range used {
			if used[r]+k <= length {
				row[i], used[r] = r, used[r]+k
				break
			}
		}
		if row[i] < 0 {
			return nil, false
		}
	}
	return row, true
}

// TestPackProperties: random sequences of unique tokens, packed; every token
// appears exactly once, in order, contiguous within one segment whose
// positions count 0, 1, ...; segment ids per row run 1..m; padding is fill with
// segment 0 and position 0; placement is first-fit; overflow is an error
// exactly when first-fit fails.
func TestPackProperties(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	rng := rand.New(rand.NewPCG(shapeSeed(t), 4))
	const fill = -1
	for iter := 0; iter < 300; iter++ {
		n, L := rng.IntN(60), 1+rng.IntN(32)
		rows := rng.IntN(n + 2)
		rule := ListRule(rng.IntN(2))
		seqs := make([][]int32, n)
		next := int32(0)
		for i := range seqs {
			k := rng.IntN(L + 1)
			if rule == Truncate && rng.IntN(5) == 0 {
				k = L + 1 + rng.IntN(L)
			}
			seqs[i] = make([]int32, k)
			for j := range seqs[i] {
				seqs[i][j] = next
				next++
			}
		}
		lens := make([]int, n)
		for i, s := range seqs {
			lens[i] = min(len(s), L)
		}
		refRow, fits := firstFitReference(lens, L, rows)

		list := shapeList(arrow.PrimitiveTypes.Int32, seqs)
		tok, seg, pos, err := Pack(list, L, rows, rule, FillInt(fill), mem)
		list.Release()
		if !fits {
			wantErr(t, fmt.Sprintf("iter %d: Pack(n=%d, L=%d, rows=%d)", iter, n, L, rows), err, ErrPackOverflow)
			continue
		}
		if err != nil {
			t.Fatalf("iter %d: Pack(n=%d, L=%d, rows=%d) = %v", iter, n, L, rows, err)
		}
		if tok.Len() != rows || seg.Len() != rows || pos.Len() != rows || int(tok.DataType().(*arrow.FixedSizeListType).Len()) != L {
			t.Fatalf("iter %d: shapes %d/%d/%d rows of %s, want %d rows of %d", iter, tok.Len(), seg.Len(), pos.Len(), tok.DataType(), rows, L)
		}
		tv, sv, pv := fslInt32(tok), fslInt32(seg), fslInt32(pos)
		where := make(map[int32]int, len(tv)) // token -> slot
		for slot, v := range tv {
			if sv[slot] == 0 {
				if v != fill || pv[slot] != 0 {
					t.Fatalf("iter %d: padding slot %d = token %d position %d, want %d, 0", iter, slot, v, pv[slot], fill)
				}
				continue
			}
			if _, dup := where[v]; dup {
				t.Fatalf("iter %d: token %d appears twice", iter, v)
			}
			where[v] = slot
		}
		placed := 0
		for i, s := range seqs {
			for j, v := range s {
				slot, ok := where[v]
				if j >= L {
					if ok {
						t.Fatalf("iter %d: truncated token %d (seq %d pos %d) was packed", iter, v, i, j)
					}
					continue
				}
				if !ok {
					t.Fatalf("iter %d: token %d (seq %d pos %d) missing", iter, v, i, j)
				}
				first := where[s[0]]
				if slot != first+j || slot/L != refRow[i] || sv[slot] != sv[first] || pv[slot] != int32(j) {
					t.Fatalf("iter %d: seq %d token %d at slot %d (row %d, seg %d, pos %d), want slot %d row %d seg %d pos %d",
						iter, i, j, slot, slot/L, sv[slot], pv[slot], first+j, refRow[i], sv[first], j)
				}
				placed++
			}
		}
		if placed != len(where) {
			t.Fatalf("iter %d: %d tokens placed, %d in the output", iter, placed, len(where))
		}
		for r := 0; r < rows; r++ { // segment ids run 1, 2, ... then padding
			want := int32(0)
			for j := 0; j < L; j++ {
				s := sv[r*L+j]
				if s == 0 {
					for ; j < L; j++ {
						if sv[r*L+j] != 0 {
							t.Fatalf("iter %d: row %d has a segment after padding", iter, r)
						}
					}
					break
				}
				if s != want && s != want+1 || (s == want+1) != (pv[r*L+j] == 0) {
					t.Fatalf("iter %d: row %d segment ids %v positions %v not 1-based consecutive", iter, r, sv[r*L:(r+1)*L], pv[r*L:(r+1)*L])
				}
				want = s
			}
		}
		tok.Release()
		seg.Release()
		pos.Release()
	}
}

func TestApplyPacking(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	tokens := shapeList(arrow.PrimitiveTypes.Int64, [][]int64{{1, 2, 3}, {4, 5}, {6}, {7, 8, 9, 10}, {11}})
	weights := shapeList(arrow.PrimitiveTypes.Float32, [][]float32{{1, 1, 1}, {0.5, 0.5}, {2}, {1, 1, 1, 1}, {3}})
	rec := shapeRecord(t, []string{"tokens", "weights"}, tokens, weights)
	defer rec.Release()
	cols := []Column{
		{Name: "tokens", DType: Int32, Length: 6, PackRatio: 2},
		{Name: "weights", DType: BFloat16, Length: 6, PackRatio: 2},
	}
	out, err := Apply(rec, cols, mem)
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	defer out.Release()
	schema, _ := OutputSchema(rec.Schema(), cols)
	if !out.Schema().Equal(schema) {
		t.Errorf("schema = %v, want %v", out.Schema(), schema)
	}
	var names []string
	for _, f := range out.Schema().Fields() {
		names = append(names, f.Name)
	}
	if got, want := fmt.Sprint(names), "[tokens tokens_segment_ids tokens_positions weights]"; got != want {
		t.Errorf("columns = %s, want %s", got, want)
	}
	if out.NumRows() != 3 { // ceil(5 / 2)
		t.Fatalf("rows = %d, want 3", out.NumRows())
	}
	// rows: [1 2 3 4 5 6] [7 8 9 10 11 0] [0 ...]
	if got, want := fmt.Sprint(fslInt32(out.Column(0).(*array.FixedSizeList))), "[1 2 3 4 5 6 7 8 9 10 11 0 0 0 0 0 0 0]"; got != want {
		t.Errorf("tokens = %s, want %s", got, want)
	}
	if got, want := fmt.Sprint(fslInt32(out.Column(1).(*array.FixedSizeList))), "[1 1 1 2 2 3 1 1 1 1 2 0 0 0 0 0 0 0]"; got != want {
		t.Errorf("segment ids = %s, want %s", got, want)
	}
	w := out.Column(3).(*array.FixedSizeList).ListValues().(*array.Uint16).Uint16Values()
	if w[3] != 0x3F00 || w[10] != 0x4040 || w[11] != 0 { // 0.5, 3, padding
		t.Errorf("weights (bfloat16 bits) = %#04x", w)
	}

	// The first packed column in []Column order leads, wherever it sits in the
	// schema.
	rev := []Column{cols[1], cols[0]}
	out2, err := Apply(rec, rev, mem)
	if err != nil {
		t.Fatalf("Apply(reversed): %v", err)
	}
	defer out2.Release()
	schema2, _ := OutputSchema(rec.Schema(), rev)
	names = names[:0]
	for _, f := range out2.Schema().Fields() {
		names = append(names, f.Name)
	}
	if got, want := fmt.Sprint(names), "[tokens weights weights_segment_ids weights_positions]"; got != want || !out2.Schema().Equal(schema2) {
		t.Errorf("columns (reversed) = %s, want %s", got, want)
	}
	if got, want := fmt.Sprint(fslInt32(out2.Column(2).(*array.FixedSizeList))), "[1 1 1 2 2 3 1 1 1 1 2 0 0 0 0 0 0 0]"; got != want {
		t.Errorf("segment ids (reversed) = %s, want %s", got, want)
	}

	// Too high a ratio: an error naming the ratio, never dropped rows.
	cols[0].PackRatio, cols[1].PackRatio = 5, 5
	_, err = Apply(rec, cols, mem)
	wantErr(t, "Apply(ratio 5)", err, ErrPackOverflow, `"tokens"`, "PackRatio 5", "needs 2 rows")
}

func TestPackedRows(t *testing.T) {
	tests := []struct {
		b     int
		ratio float64
		want  int
	}{
		{0, 2, 0}, {1, 2, 1}, {10, 1, 10}, {10, 2, 5}, {11, 2, 6}, {10, 2.5, 4}, {10, 3, 4}, {1024, 1.5, 683}, {7, 0.5, 7},
	}
	for _, tt := range tests {
		if got := PackedRows(tt.b, tt.ratio); got != tt.want {
			t.Errorf("PackedRows(%d, %v) = %d, want %d", tt.b, tt.ratio, got, tt.want)
		}
	}
}
