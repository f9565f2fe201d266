package feed

import (
	"context"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/compute"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/meshfeed/meshfeed/batching"
	"github.com/meshfeed/meshfeed/filter"
	"github.com/meshfeed/meshfeed/internal/arrowmem"
	"github.com/meshfeed/meshfeed/loader"
)

// takeRuns returns the rows of rec in runs (sorted, disjoint, within rec):
// a view of rec when they are one run, else, per column, a copy of the
// runs' bytes (copyRuns: fixed-width columns and fixed-size lists of them,
// without nulls) or one arrow Take, allocated from mem. It does not release
// rec.
func takeRuns(rec arrow.RecordBatch, runs []filter.Run, mem memory.Allocator) (arrow.RecordBatch, error) {
	if len(runs) == 1 {
		return rec.NewSlice(runs[0].Lo, runs[0].Hi), nil
	}
	n := int64(0)
	for _, r := range runs {
		n += r.Hi - r.Lo
	}
	var ia *array.Int32 // the kept rows' indices, made for the first column copyRuns does not take
	defer func() {
		if ia != nil {
			ia.Release()
		}
	}()
	ctx := compute.WithAllocator(context.Background(), mem)
	cols := make([]arrow.Array, rec.NumCols())
	defer func() {
		for _, c := range cols {
			if c != nil {
				c.Release()
			}
		}
	}()
	for i, c := range rec.Columns() {
		if out, ok := copyRuns(c, runs, n, mem); ok {
			cols[i] = out
			continue
		}
		if ia == nil {
			ia = runIndices(runs, n)
		}
		out, err := compute.TakeArrayOpts(ctx, c, ia, *compute.DefaultTakeOptions())
		if err != nil {
			return nil, fmt.Errorf("filters: taking the kept rows of column %q (%s): %w", rec.Schema().Field(i).Name, c.DataType(), err)
		}
		cols[i] = out
	}
	return array.NewRecordBatch(rec.Schema(), cols, n), nil
}

// pieceRef returns the ref a slice reads for the plan's segment g: the
// whole row group, or a piece of it (keptRef).
func (pl *pipelinePlan) pieceRef(g batching.Segment) loader.RowGroupRef {
	return keptRef(pl.refs[g.RowGroup], pl.selection(g.RowGroup), g)
}

// keptRef returns the ref that reads segment g of the row group ref, whose
// kept rows are sel (nil: every row): the whole row group, or a piece of
// it. With a filter, the plan numbers the kept rows only, and the piece is
// the physical rows that hold the segment's rows (all of the row group's
// kept rows may lie in a part of it: a row group at the edge of a range of
// a sorted column).
func keptRef(ref loader.RowGroupRef, sel *filter.Selection, g batching.Segment) loader.RowGroupRef {
	start, end := g.Start, g.End
	if sel != nil {
		start, end = sel.Physical(g.Start, g.End)
		if g.Start == 0 && g.End == sel.Count() && 2*(end-start) > ref.Rows {
			// Every kept row, spread over most of the row group: read it
			// whole (a piece costs locating its pages, and saves little).
			start, end = 0, ref.Rows
		}
	}
	if start != 0 || end != ref.Rows {
		ref.Start, ref.End = start, end
	}
	return ref
}

// selection returns the kept rows of the plan's row group g, nil for all.
func (pl *pipelinePlan) selection(g int) *filter.Selection {
	if pl.sels == nil {
		return nil
	}
	return pl.sels[g]
}

// selectRows returns the kept rows of rg, the record read for the plan's
// segment seg by the ref read (a piece when piece is true: then rg holds the
// physical rows [read.Start, read.End) and seg's kept rows are taken; else
// rg is the whole row group and all its kept rows are). It releases rg when
// it returns another record.
func (s *pipelineStream) selectRows(rg arrow.RecordBatch, seg batching.Segment, read loader.RowGroupRef, piece bool) (arrow.RecordBatch, error) {
	return takeKept(rg, s.pl.selection(seg.RowGroup), seg, read, piece, s.mem)
}

// takeKept is selectRows for a row group whose kept rows are sel (nil:
// every row, rg returned as is), taken into mem: the take of the
// single-dataset stream and of a mixture's sources.
func takeKept(rg arrow.RecordBatch, sel *filter.Selection, seg batching.Segment, read loader.RowGroupRef, piece bool, mem memory.Allocator) (arrow.RecordBatch, error) {
	if sel == nil {
		return rg, nil
	}
	lo, hi, base := int64(0), sel.Count(), int64(0)
	if piece {
		lo, hi = seg.Start, seg.End
		if read.Start != 0 || read.End != 0 {
			base = read.Start
		}
	}
	if lo >= hi {
		rg.Release()
		return nil, fmt.Errorf("filters: empty segment [%d, %d) of a kept row group", lo, hi)
	}
	out, err := takeRuns(rg, sel.Slice(lo, hi, base), mem)
	rg.Release()
	return out, err
}

// runIndices returns the n rows of runs as an index array.
func runIndices(runs []filter.Run, n int64) *array.Int32 {
	idx := make([]int32, 0, n)
	for _, r := range runs {
		for i := r.Lo; i < r.Hi; i++ {
			idx = append(idx, int32(i))
		}
	}
	return array.NewInt32Data(array.NewData(arrow.PrimitiveTypes.Int32, len(idx),
		[]*memory.Buffer{nil, memory.NewBufferBytes(arrow.Int32Traits.CastToBytes(idx))}, nil, 0, 0))
}

// copyRuns copies the runs of a fixed-width column without nulls (or a
// fixed-size list of one) into a new array of n rows: one copy per run,
// about ten times arrow's Take on scattered rows. ok false for any other
// column.
func copyRuns(c arrow.Array, runs []filter.Run, n int64, mem memory.Allocator) (arrow.Array, bool) {
	d := c.Data()
	if d.NullN() != 0 {
		return nil, false
	}
	width, per := 0, int64(1) // bytes per value, values per row
	values := d
	switch t := c.DataType().(type) {
	case *arrow.FixedSizeListType:
		ch := d.Children()[0]
		fw, ok := ch.DataType().(arrow.FixedWidthDataType)
		if !ok || ch.NullN() != 0 || len(ch.Buffers()) != 2 || fw.BitWidth()%8 != 0 || ch.Buffers()[1] == nil {
			return nil, false
		}
		width, per, values = fw.BitWidth()/8, int64(t.Len()), ch
	case arrow.FixedWidthDataType:
		if t.BitWidth()%8 != 0 || len(d.Buffers()) != 2 || d.Buffers()[1] == nil {
			return nil, false
		}
		width = t.BitWidth() / 8
	default:
		return nil, false
	}
	rowBytes := int64(width) * per
	// The rows start at the values' offset, plus, for a list, the list's
	// offset in rows.
	src := values.Buffers()[1].Bytes()[int64(values.Offset())*int64(width):]
	if values != d {
		src = src[int64(d.Offset())*rowBytes:]
	}
	buf := arrowmem.NewOverwriteBuffer(mem, int(n*rowBytes))
	dst := buf.Bytes()
	at := int64(0)
	for _, r := range runs {
		at += int64(copy(dst[at:], src[r.Lo*rowBytes:r.Hi*rowBytes]))
	}
	if values == d {
		out := array.NewData(d.DataType(), int(n), []*memory.Buffer{nil, buf}, nil, 0, 0)
		buf.Release()
		defer out.Release()
		return array.MakeFromData(out), true
	}
	child := array.NewData(values.DataType(), int(n*per), []*memory.Buffer{nil, buf}, nil, 0, 0)
	buf.Release()
	out := array.NewData(d.DataType(), int(n), []*memory.Buffer{nil}, []arrow.ArrayData{child}, 0, 0)
	child.Release()
	defer out.Release()
	return array.MakeFromData(out), true
}
