package batching

import (
	"math/rand/v2"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// TestPartColumnsjoinParts: a slice handed over as its parts
// (PartColumns.Parts) is, joined, exactly the record joinParts builds, with
// and without the source column and the mask, for random parts (real rows
// first, padding, parts that are part real); and making the parts
// allocates no column memory (views, no copy of the slice's rows).
func TestPartColumnsjoinParts(t *testing.T) {
	seed := testSeed(t)
	rng := rand.New(rand.NewPCG(seed, 7))
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	for round := range 200 {
		sourceCol := []string{"", "source"}[rng.IntN(2)]
		policy := []Policy{Drop, Pad}[rng.IntN(2)]
		out, err := MixtureSliceSchema(idOnlySchema, policy, sourceCol, "valid")
		if err != nil {
			t.Fatal(err)
		}
		sources, rows := 1+rng.IntN(4), int64(1+rng.IntN(40))
		cols := NewPartColumns(mem, idOnlySchema, out, sources, rows)
		var parts []arrow.RecordBatch
		var real []int64
		var src []int32
		for left := rows; left > 0 && len(parts) < 2*sources; {
			n := min(left, 1+rng.Int64N(rows))
			parts = append(parts, makeRecord(mem, idOnlySchema, int64(round)<<20+rows-left, n))
			real = append(real, rng.Int64N(n+1))
			src = append(src, int32(rng.IntN(sources)))
			left -= n
		}
		before := mem.CurrentAlloc()
		first, err := cols.Parts(parts, real, src)
		if err != nil {
			t.Fatal(err)
		}
		got, err := cols.Parts(parts, real, src) // again: the constant columns' views kept
		if err != nil {
			t.Fatal(err)
		}
		if mem.CurrentAlloc() != before {
			t.Fatalf("Parts allocated %d bytes: want views only", mem.CurrentAlloc()-before)
		}
		for i, r := range got {
			for c := idOnlySchema.NumFields(); c < out.NumFields(); c++ {
				if r.Column(c) != first[i].Column(c) {
					t.Fatalf("round %d part %d column %s: a new view of the constant column, want the one the first call made", round, i, out.Field(c).Name)
				}
			}
			first[i].Release()
		}
		want, err := joinParts(mem, idOnlySchema, out, parts, real, src, policy == Pad)
		if err != nil {
			t.Fatal(err)
		}
		for c := range out.NumFields() {
			var arrs []arrow.Array
			for _, r := range got {
				if !r.Schema().Equal(out) {
					t.Fatalf("part schema %v, want %v", r.Schema(), out)
				}
				arrs = append(arrs, r.Column(c))
			}
			joined, err := array.Concatenate(arrs, mem)
			if err != nil {
				t.Fatal(err)
			}
			if !array.Equal(joined, want.Column(c)) {
				t.Fatalf("seed %d round %d column %s: parts joined %v, joinParts %v", seed, round, out.Field(c).Name, joined, want.Column(c))
			}
			joined.Release()
		}
		want.Release()
		for _, r := range got {
			r.Release()
		}
		for _, p := range parts {
			p.Release()
		}
		cols.Release()
	}
}

// TestPartColumnsHeadsBounded: past maxHeads lengths, the constant columns'
// views are made per part and released with it (the checked allocator
// sees every buffer back), and the parts still read right.
func TestPartColumnsHeadsBounded(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	out, err := MixtureSliceSchema(idOnlySchema, Pad, "source", "valid")
	if err != nil {
		t.Fatal(err)
	}
	const rows = 2 * maxHeads
	cols := NewPartColumns(mem, idOnlySchema, out, 1, rows)
	defer cols.Release()
	for n := int64(1); n <= rows; n++ {
		part := makeRecord(mem, idOnlySchema, n<<20, n)
		got, err := cols.Parts([]arrow.RecordBatch{part}, []int64{n}, []int32{0})
		part.Release()
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || got[0].NumRows() != n || got[0].Column(1).Len() != int(n) || got[0].Column(2).Len() != int(n) {
			t.Fatalf("a part of %d rows: %d records, %v", n, len(got), got)
		}
		if v := got[0].Column(1).(*array.Int32).Value(int(n - 1)); v != 0 {
			t.Fatalf("a part of %d rows: source %d, want 0", n, v)
		}
		got[0].Release()
	}
	if len(cols.heads) != maxHeads {
		t.Errorf("%d views kept, want at most (and here exactly) %d", len(cols.heads), maxHeads)
	}
}
