package batching

import (
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// MixtureSliceSchema returns the schema of a mixture's slices whose sources
// deliver records of schema in: in, then the int32 source column (when
// sourceCol is not empty), then under Pad the boolean mask column. A name
// already taken is ErrMaskColumnExists.
func MixtureSliceSchema(in *arrow.Schema, policy Policy, sourceCol, mask string) (*arrow.Schema, error) {
	fields := in.Fields()
	if sourceCol != "" {
		if len(in.FieldIndices(sourceCol)) > 0 {
			return nil, fmt.Errorf("%w: the source column %q is a column of the sources", ErrMaskColumnExists, sourceCol)
		}
		fields = append(fields, arrow.Field{Name: sourceCol, Type: arrow.PrimitiveTypes.Int32})
	}
	if policy == Pad {
		if len(in.FieldIndices(mask)) > 0 || mask == sourceCol {
			return nil, fmt.Errorf("%w: %q", ErrMaskColumnExists, mask)
		}
		fields = append(fields, arrow.Field{Name: mask, Type: arrow.FixedWidthTypes.Boolean})
	}
	md := in.Metadata()
	return arrow.NewSchema(fields, &md), nil
}

// PadRecord returns rec (nil for no rows) of schema sch extended with zero
// values to n rows, as a Cutter pads under Pad: the padding rows of a
// mixture source whose first epoch ends inside the last step.
func PadRecord(mem memory.Allocator, sch *arrow.Schema, rec arrow.RecordBatch, n int) (arrow.RecordBatch, error) {
	cols := make([]arrow.Array, sch.NumFields())
	defer releaseAll(cols)
	for j := range cols {
		var col arrow.Array
		if rec != nil {
			col = rec.Column(j)
		}
		padded, err := padColumn(mem, sch.Field(j).Type, col, n)
		if err != nil {
			return nil, fmt.Errorf("batching: pad column %q: %w", sch.Field(j).Name, err)
		}
		cols[j] = padded
	}
	return array.NewRecordBatch(sch, cols, int64(n)), nil
}

// PartColumns hands a mixture's slices over as their parts instead of
// joining them into a copy: each part, a view of its source's records,
// extended with the columns out adds (the source column, the mask) as
// views of constant columns made once per stream. A consumer that needs
// one record per slice joins the parts where it copies them anyway (the
// shared-memory wire, into its slot) or virtually (Flight), so the step
// costs no copy of its own.
type PartColumns struct {
	in, out *arrow.Schema
	src     []arrow.Array // [i]: source i's int32 values; [len-1]: padding's (-1)
	mask    [2]arrow.Array
	rows    int64
	// heads are views of the first n rows of a constant column, kept for
	// the next part of n rows (most parts of a mixture's slices have one
	// of a few lengths: a view a part cost two allocations of its own).
	heads map[headKey]arrow.Array
	// cols and own are Parts's scratch, kept for the next part (a record
	// copies its columns).
	cols, own []arrow.Array
}

// headKey names a view of the first n rows of a constant column: source
// column i (mask false), or the mask (valid).
type headKey struct {
	col   int
	mask  bool
	valid bool
	n     int64
}

// maxHeads bounds the views PartColumns keeps.
const maxHeads = 256

// head returns a view of the first k.n rows of of, the constant column k
// names: one kept from an earlier part where there is one (PartColumns
// keeps its reference; the caller's record takes its own). owned: a view
// not kept, which the caller releases.
func (c *PartColumns) head(k headKey, of arrow.Array) (a arrow.Array, owned bool) {
	if a, ok := c.heads[k]; ok {
		return a, false
	}
	a = array.NewSlice(of, 0, k.n)
	if len(c.heads) >= maxHeads {
		return a, true
	}
	if c.heads == nil {
		c.heads = map[headKey]arrow.Array{}
	}
	c.heads[k] = a
	return a, false
}

// NewPartColumns makes the constant columns of the parts of slices of rows
// rows of a mixture of sources sources: in is the sources' schema, out
// MixtureSliceSchema's.
func NewPartColumns(mem memory.Allocator, in, out *arrow.Schema, sources int, rows int64) *PartColumns {
	c := &PartColumns{in: in, out: out, rows: rows}
	extra := out.NumFields() - in.NumFields()
	if extra > 0 && out.Field(in.NumFields()).Type.ID() == arrow.INT32 {
		for i := -1; i < sources; i++ {
			bld := array.NewInt32Builder(mem)
			bld.Reserve(int(rows))
			for range rows {
				bld.UnsafeAppend(int32(i))
			}
			c.src = append(c.src, bld.NewArray())
			bld.Release()
		}
		c.src = append(c.src[1:], c.src[0]) // padding's last
		extra--
	}
	if extra > 0 {
		for k, v := range []bool{false, true} {
			bld := array.NewBooleanBuilder(mem)
			bld.Reserve(int(rows))
			for range rows {
				bld.UnsafeAppend(v)
			}
			c.mask[k] = bld.NewArray()
			bld.Release()
		}
	}
	return c
}

// Release releases the constant columns (parts made from them keep theirs).
func (c *PartColumns) Release() {
	releaseAll(c.src)
	releaseAll(c.mask[:])
	for _, a := range c.heads {
		a.Release()
	}
	c.heads = nil
}

// Parts returns one slice of a mixture's step as records of schema out, in
// the slice's row order, from its parts (one per source with rows in the
// slice, in the slice's source order): the real
// rows of every part (its first real[j] rows) in part order, then the
// padding rows of every part, each run a view of its part with the source
// column (src[j], or -1 for padding) and the mask (true for real rows)
// added as views of the constant columns. Joined, they are joinParts's
// record. The caller keeps its references to parts and owns the result.
func (c *PartColumns) Parts(parts []arrow.RecordBatch, real []int64, src []int32) ([]arrow.RecordBatch, error) {
	var n int64
	for _, p := range parts {
		n += p.NumRows()
	}
	if n > c.rows {
		return nil, fmt.Errorf("batching: mixture slice of %d rows, more than the %d of a slice", n, c.rows)
	}
	out := make([]arrow.RecordBatch, 0, len(parts))
	add := func(p arrow.RecordBatch, lo, hi int64, srcIdx int, valid bool) {
		cols := c.cols[:0]
		view := p
		if lo > 0 || hi < p.NumRows() {
			view = p.NewSlice(lo, hi)
			defer view.Release()
		}
		cols = append(cols, view.Columns()...)
		own := c.own[:0]
		if c.src != nil {
			a, owned := c.head(headKey{col: srcIdx, n: hi - lo}, c.src[srcIdx])
			if cols = append(cols, a); owned {
				own = append(own, a)
			}
		}
		if m := c.mask[0]; m != nil {
			if valid {
				m = c.mask[1]
			}
			a, owned := c.head(headKey{mask: true, valid: valid, n: hi - lo}, m)
			if cols = append(cols, a); owned {
				own = append(own, a)
			}
		}
		out = append(out, array.NewRecordBatch(c.out, cols, hi-lo))
		releaseAll(own)
		clear(cols)
		clear(own)
		c.cols, c.own = cols[:0], own[:0]
	}
	for j, p := range parts {
		if real[j] > 0 {
			add(p, 0, real[j], int(src[j]), true)
		}
	}
	for j, p := range parts {
		if p.NumRows() > real[j] {
			add(p, real[j], p.NumRows(), len(c.src)-1, false)
		}
	}
	return out, nil
}
