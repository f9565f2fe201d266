package shape

import (
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// TestApplyPartsMatchesApply: packing a record's rows given as parts (random
// cuts, with a cast and truncation) is Apply of the whole record, byte for byte,
// and its errors name the row of the whole.
func TestApplyPartsMatchesApply(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	rng := rand.New(rand.NewPCG(shapeSeed(t), 9))
	for iter := 0; iter < 200; iter++ {
		n, L := 1+rng.IntN(40), 1+rng.IntN(16)
		seqs := make([][]int64, n)
		ws := make([][]float32, n)
		for i := range seqs {
			k := rng.IntN(L + 1)
			if rng.IntN(8) == 0 {
				k = L + 1 + rng.IntN(4) // too long: truncated
			}
			for j := 0; j < k; j++ {
				seqs[i] = append(seqs[i], rng.Int64N(1000))
				ws[i] = append(ws[i], float32(j))
			}
		}
		rec := shapeRecord(t, []string{"tokens", "w"}, shapeList(arrow.PrimitiveTypes.Int64, seqs), shapeList(arrow.PrimitiveTypes.Float32, ws))
		cols := []Column{
			{Name: "tokens", DType: Int32, Length: L, PackRatio: 1 + rng.Float64(), Overflow: Truncate, Fill: FillInt(-1)},
			{Name: "w", Length: L, Overflow: Truncate},
		}
		cols[1].PackRatio = cols[0].PackRatio
		sh, err := NewShaper(rec.Schema(), cols)
		if err != nil {
			t.Fatal(err)
		}
		want, wantErr := sh.Apply(rec, mem)
		var parts []arrow.RecordBatch
		for lo := int64(0); lo < rec.NumRows(); {
			hi := min(rec.NumRows(), lo+1+rng.Int64N(8))
			parts = append(parts, rec.NewSlice(lo, hi))
			lo = hi
		}
		got, gotErr := sh.ApplyParts(parts, mem)
		if (wantErr == nil) != (gotErr == nil) || (wantErr != nil && wantErr.Error() != gotErr.Error()) {
			t.Fatalf("iter %d: ApplyParts error %v, Apply error %v", iter, gotErr, wantErr)
		}
		if wantErr == nil {
			if !array.RecordEqual(want, got) {
				t.Fatalf("iter %d (%d parts): ApplyParts\n%v\nwant Apply's\n%v", iter, len(parts), got, want)
			}
			want.Release()
			got.Release()
		}
		for _, p := range parts {
			p.Release()
		}
		rec.Release()
	}
}

// TestApplyPartsRowError: a row error of a later part counts rows from the
// first part's first row.
func TestApplyPartsRowError(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	a := shapeRecord(t, []string{"tokens"}, shapeList(arrow.PrimitiveTypes.Int64, [][]int64{{1}, {2}}))
	defer a.Release()
	b := shapeRecord(t, []string{"tokens"}, shapeList(arrow.PrimitiveTypes.Int64, [][]int64{{3}, {1 << 40}}))
	defer b.Release()
	sh, err := NewShaper(a.Schema(), []Column{{Name: "tokens", DType: Int32, Length: 4, PackRatio: 2}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = sh.ApplyParts([]arrow.RecordBatch{a, b}, mem)
	var re *RowError
	if !errors.As(err, &re) || re.Row != 3 {
		t.Fatalf("err = %v (row error %+v), want a RowError of row 3", err, re)
	}
	if _, err := sh.ApplyParts(nil, mem); err == nil {
		t.Fatal("ApplyParts of no parts: no error")
	}
}
