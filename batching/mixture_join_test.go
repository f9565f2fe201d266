package batching

import (
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// joinParts assembles one slice of a mixture's step from its parts (records
// of schema in, one per source that has rows in the slice, in the slice's
// source order): the real rows of every part (its first real[j] rows) in
// part order, then the padding rows of every part, then the source column
// (src[j] for part j's real rows, -1 for padding) when out has one, and the
// mask under Pad (true for real rows). out is MixtureSliceSchema's. A single
// part with no column to add is returned as it is (retained); otherwise
// fixed-width columns are copied by memcpy of runs, others concatenated.
// The stream hands the parts over instead (PartColumns); this join is the
// reference the tests hold the parts to.
func joinParts(mem memory.Allocator, in, out *arrow.Schema, parts []arrow.RecordBatch, real []int64, src []int32, pad bool) (arrow.RecordBatch, error) {
	var n, nReal int64
	for j, p := range parts {
		n += p.NumRows()
		nReal += real[j]
	}
	extra := out.NumFields() - in.NumFields()
	if len(parts) == 1 && extra == 0 {
		parts[0].Retain()
		return parts[0], nil
	}
	runs := make([]run, 0, 2*len(parts))
	for j := range parts {
		if real[j] > 0 {
			runs = append(runs, run{src: j, row: 0, n: real[j]})
		}
	}
	for j, p := range parts {
		if p.NumRows() > real[j] {
			runs = append(runs, run{src: j, row: real[j], n: p.NumRows() - real[j]})
		}
	}
	cols := make([]arrow.Array, out.NumFields())
	defer releaseAll(cols)
	arrs := make([]arrow.Array, len(parts))
	for c := 0; c < in.NumFields(); c++ {
		for j, p := range parts {
			arrs[j] = p.Column(c)
		}
		col, err := gatherColumn(mem, in.Field(c).Type, arrs, runs, n)
		if err != nil {
			return nil, fmt.Errorf("batching: mixture slice column %q: %w", in.Field(c).Name, err)
		}
		cols[c] = col
	}
	c := in.NumFields()
	if c < out.NumFields() && out.Field(c).Type.ID() == arrow.INT32 {
		bld := array.NewInt32Builder(mem)
		bld.Reserve(int(n))
		for j := range parts {
			for k := int64(0); k < real[j]; k++ {
				bld.UnsafeAppend(src[j])
			}
		}
		for k := nReal; k < n; k++ {
			bld.UnsafeAppend(-1)
		}
		cols[c] = bld.NewArray()
		bld.Release()
		c++
	}
	if pad {
		mb := array.NewBooleanBuilder(mem)
		mb.Reserve(int(n))
		for k := int64(0); k < n; k++ {
			mb.UnsafeAppend(k < nReal)
		}
		cols[c] = mb.NewArray()
		mb.Release()
	}
	return array.NewRecordBatch(out, cols, n), nil
}
