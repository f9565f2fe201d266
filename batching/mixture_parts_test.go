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
		got, err := cols.Parts(parts, real, src)
		if err != nil {
			t.Fatal(err)
		}
		if mem.CurrentAlloc() != before {
			t.Fatalf("Parts allocated %d bytes: want views only", mem.CurrentAlloc()-before)
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
