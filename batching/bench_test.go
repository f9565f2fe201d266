package batching

import (
	"fmt"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// BenchmarkNewPlan plans datasets of many row groups and computes the shuffled
// order and every stream of one epoch (target: 100,000 row groups < 100 ms).
func BenchmarkNewPlan(b *testing.B) {
	for _, n := range []int{1_000, 100_000} {
		b.Run(fmt.Sprintf("rowgroups=%d", n), func(b *testing.B) {
			rgs := make([]RowGroup, n)
			for i := range rgs {
				rgs[i] = RowGroup{File: i / 16, Index: i % 16, Rows: int64(1000 + i%97), Bytes: 1 << 20}
			}
			cfg := Config{GlobalBatch: 4096, D: 64, Seed: 1, ShuffleRowGroups: true, Window: 65536, Policy: Pad}
			b.ReportAllocs()
			for b.Loop() {
				p, err := NewPlan(rgs, cfg)
				if err != nil {
					b.Fatal(err)
				}
				for d := 0; d < cfg.D; d++ {
					if len(p.Stream(0, d)) == 0 {
						b.Fatal("empty stream")
					}
				}
			}
		})
	}
}

// benchRecords builds nrg row groups of rows rows with one column of type dt.
func benchRecords(mem memory.Allocator, dt arrow.DataType, nrg, rows int) ([]arrow.RecordBatch, *arrow.Schema) {
	sch := arrow.NewSchema([]arrow.Field{{Name: "x", Type: dt}}, nil)
	recs := make([]arrow.RecordBatch, nrg)
	for i := range recs {
		bld := array.NewRecordBuilder(mem, sch)
		switch f := bld.Field(0).(type) {
		case *array.Int64Builder:
			for r := 0; r < rows; r++ {
				f.Append(int64(i*rows + r))
			}
		case *array.FixedSizeListBuilder:
			vb := f.ValueBuilder().(*array.Float32Builder)
			vals := make([]float32, dt.(*arrow.FixedSizeListType).Len())
			for r := 0; r < rows; r++ {
				f.Append(true)
				for j := range vals {
					vals[j] = float32(i*rows + r)
				}
				vb.AppendValues(vals, nil)
			}
		}
		recs[i] = bld.NewRecordBatch()
		bld.Release()
	}
	return recs, sch
}

// drain runs one cutter over stream 0 with the pre-built records.
func drain(tb testing.TB, p *Plan, recs []arrow.RecordBatch, mem memory.Allocator, perSlice func(arrow.RecordBatch)) int64 {
	c, err := NewCutter(p, 0, 0, 0, mem)
	if err != nil {
		tb.Fatal(err)
	}
	defer c.Release()
	for !c.Done() {
		rec, _, ok, err := c.Next()
		if err != nil {
			tb.Fatal(err)
		}
		if ok {
			if perSlice != nil {
				perSlice(rec)
			}
			rec.Release()
			continue
		}
		seg, _ := c.Wants()
		if err := c.Push(recs[seg.RowGroup], seg); err != nil {
			tb.Fatal(err)
		}
	}
	return c.CopiedBytes()
}

// BenchmarkCutNoShuffle cuts slices without a shuffle window where row groups
// are a multiple of b: every slice is a view, so no column memory is allocated
// (checked on the allocator), only small record headers.
func BenchmarkCutNoShuffle(b *testing.B) {
	for _, bs := range []int{256, 4096} {
		b.Run(fmt.Sprintf("b=%d", bs), func(b *testing.B) {
			mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
			recs, _ := benchRecords(mem, arrow.PrimitiveTypes.Int64, 8, 16384)
			defer func() {
				for _, r := range recs {
					r.Release()
				}
				mem.AssertSize(b, 0)
			}()
			rgs := make([]RowGroup, len(recs))
			for i := range rgs {
				rgs[i] = RowGroup{Index: i, Rows: 16384}
			}
			p, err := NewPlan(rgs, Config{GlobalBatch: bs, D: 1, Policy: Drop})
			if err != nil {
				b.Fatal(err)
			}
			base := mem.CurrentAlloc()
			b.SetBytes(int64(len(recs)) * 16384 * 8)
			b.ReportAllocs()
			for b.Loop() {
				if copied := drain(b, p, recs, mem, func(arrow.RecordBatch) {
					if mem.CurrentAlloc() != base {
						b.Fatalf("column memory allocated while cutting: %d bytes", mem.CurrentAlloc()-base)
					}
				}); copied != 0 {
					b.Fatalf("CopiedBytes = %d, want 0", copied)
				}
			}
		})
	}
}

// BenchmarkGatherShuffled gathers slices of a fixed_size_list<float32>[64]
// column (256 bytes a row) through a shuffle window (target: 2 GB/s per core).
func BenchmarkGatherShuffled(b *testing.B) {
	const rows, nrg = 8192, 8
	for _, bs := range []int{256, 4096} {
		b.Run(fmt.Sprintf("b=%d", bs), func(b *testing.B) {
			mem := memory.NewGoAllocator()
			recs, _ := benchRecords(mem, arrow.FixedSizeListOf(64, arrow.PrimitiveTypes.Float32), nrg, rows)
			defer func() {
				for _, r := range recs {
					r.Release()
				}
			}()
			rgs := make([]RowGroup, nrg)
			for i := range rgs {
				rgs[i] = RowGroup{Index: i, Rows: rows}
			}
			p, err := NewPlan(rgs, Config{GlobalBatch: bs, D: 1, Seed: 5, Window: 16384, Policy: Drop})
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(rows * nrg * 256)
			b.ReportAllocs()
			for b.Loop() {
				drain(b, p, recs, mem, nil)
			}
		})
	}
}
