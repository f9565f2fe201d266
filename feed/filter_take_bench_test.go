package feed

import (
	"math/rand/v2"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/meshfeed/meshfeed/filter"
)

// BenchmarkTakeRuns takes the kept rows of a 10,000-row record (id int64
// and 32 float32 features per row, 136 bytes a row) kept by a scattered
// filter (10% and 50% of the rows, in runs of about one row) or by one run.
// bytes/op is the kept rows' bytes.
//
//	go test ./feed -run '^$' -bench TakeRuns -benchtime 200x
func BenchmarkTakeRuns(b *testing.B) {
	mem := memory.NewGoAllocator()
	const n = 10_000
	bld := array.NewRecordBuilder(mem, arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "features", Type: arrow.FixedSizeListOf(32, arrow.PrimitiveTypes.Float32)},
	}, nil))
	for i := range n {
		bld.Field(0).(*array.Int64Builder).Append(int64(i))
		fl := bld.Field(1).(*array.FixedSizeListBuilder)
		fl.Append(true)
		for j := range 32 {
			fl.ValueBuilder().(*array.Float32Builder).Append(float32(i + j))
		}
	}
	rec := bld.NewRecordBatch()
	defer rec.Release()
	rng := rand.New(rand.NewPCG(1, 2))
	for _, frac := range []float64{0.1, 0.5} {
		keep := make([]bool, n)
		for i := range keep {
			keep[i] = rng.Float64() < frac
		}
		var runs []filter.Run
		for i := 0; i < n; i++ {
			if keep[i] {
				j := i
				for j < n && keep[j] {
					j++
				}
				runs = append(runs, filter.Run{Lo: int64(i), Hi: int64(j)})
				i = j
			}
		}
		kept := int64(0)
		for _, r := range runs {
			kept += r.Hi - r.Lo
		}
		b.Run(map[float64]string{0.1: "scattered-10pct", 0.5: "scattered-50pct"}[frac], func(b *testing.B) {
			b.SetBytes(kept * 136)
			b.ReportAllocs()
			for b.Loop() {
				out, err := takeRuns(rec, runs, mem)
				if err != nil {
					b.Fatal(err)
				}
				out.Release()
			}
		})
	}
}
