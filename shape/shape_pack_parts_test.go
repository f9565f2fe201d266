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
		got, gotErr := sh.ApplyParts(parts, "", nil, mem)
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
	_, err = sh.ApplyParts([]arrow.RecordBatch{a, b}, "", nil, mem)
	var re *RowError
	if !errors.As(err, &re) || re.Row != 3 {
		t.Fatalf("err = %v (row error %+v), want a RowError of row 3", err, re)
	}
	if _, err := sh.ApplyParts(nil, "", nil, mem); err == nil {
		t.Fatal("ApplyParts of no parts: no error")
	}
}

// TestApplyPartsTags: the tag column is, token by token, what packing an
// aligned column holding each row's part's tag (fill -1) gives.
func TestApplyPartsTags(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	rng := rand.New(rand.NewPCG(shapeSeed(t), 10))
	packed := 0
	for iter := 0; iter < 200; iter++ {
		n, L := 1+rng.IntN(40), 1+rng.IntN(16)
		var cuts []int64 // part k holds rows cuts[k]..cuts[k+1]-1
		for lo := int64(0); lo < int64(n); lo = min(int64(n), lo+1+rng.Int64N(8)) {
			cuts = append(cuts, lo)
		}
		cuts = append(cuts, int64(n))
		tags := make([]int32, len(cuts)-1)
		seqs := make([][]int32, n)
		srcs := make([][]int32, n)
		for k := range tags {
			tags[k] = rng.Int32N(5)
			for r := cuts[k]; r < cuts[k+1]; r++ {
				m := rng.IntN(L + 3)
				for j := 0; j < m; j++ {
					seqs[r] = append(seqs[r], rng.Int32N(100))
					srcs[r] = append(srcs[r], tags[k])
				}
			}
		}
		ratio := 1 + 2*rng.Float64()
		rec := shapeRecord(t, []string{"tokens"}, shapeList(arrow.PrimitiveTypes.Int32, seqs))
		ref := shapeRecord(t, []string{"tokens", "src"}, shapeList(arrow.PrimitiveTypes.Int32, seqs), shapeList(arrow.PrimitiveTypes.Int32, srcs))
		sh, err := NewShaper(rec.Schema(), []Column{{Name: "tokens", Length: L, PackRatio: ratio, Overflow: Truncate}})
		if err != nil {
			t.Fatal(err)
		}
		want, wantErr := Apply(ref, []Column{{Name: "tokens", Length: L, PackRatio: ratio, Overflow: Truncate},
			{Name: "src", Length: L, PackRatio: ratio, Overflow: Truncate, Fill: FillInt(-1)}}, mem)
		var parts []arrow.RecordBatch
		for k := range tags {
			parts = append(parts, rec.NewSlice(cuts[k], cuts[k+1]))
		}
		got, gotErr := sh.ApplyParts(parts, "source", tags, mem)
		if (wantErr == nil) != (gotErr == nil) {
			t.Fatalf("iter %d: ApplyParts error %v, reference error %v", iter, gotErr, wantErr)
		}
		if wantErr == nil {
			if got.Schema().Field(3).Name != "source" || !array.Equal(got.Column(3), want.Column(3)) || !array.Equal(got.Column(0), want.Column(0)) {
				t.Fatalf("iter %d: tagged\n%v\nwant the packed aligned column\n%v", iter, got, want)
			}
			if !got.Schema().Equal(sh.TaggedSchema("source")) {
				t.Fatalf("schema %v, want %v", got.Schema(), sh.TaggedSchema("source"))
			}
			packed++
			want.Release()
			got.Release()
		}
		for _, p := range parts {
			p.Release()
		}
		rec.Release()
		ref.Release()
	}
	if packed < 50 {
		t.Fatalf("only %d of 200 slices packed without overflow: the test checks too little", packed)
	}
}
