package transport

import (
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// joinSlices returns a step's slices as one record of schema, taking over
// the caller's reference of every slice (released on error too): their
// virtual concatenation when every column allows it (multiRecord, no bytes
// copied), the slice itself when there is one, else one concatenation per
// column allocated from mem.
func joinSlices(schema *arrow.Schema, recs []arrow.RecordBatch, mem memory.Allocator) (arrow.RecordBatch, error) {
	if m := newMultiRecord(schema, recs, mem); m != nil {
		return m, nil
	}
	out, err := concatRecords(schema, recs, mem)
	for _, r := range recs {
		r.Release()
	}
	return out, err
}

// concatRecords returns the records as one record of schema: the record
// itself when there is one (no copy), else one concatenation per column.
func concatRecords(schema *arrow.Schema, recs []arrow.RecordBatch, mem memory.Allocator) (arrow.RecordBatch, error) {
	if len(recs) == 1 {
		r := recs[0]
		if !r.Schema().Equal(schema) {
			return nil, fmt.Errorf("slice schema %v differs from the stream's %v", r.Schema(), schema)
		}
		r.Retain()
		return r, nil
	}
	var rows int64
	for _, r := range recs {
		rows += r.NumRows()
	}
	cols := make([]arrow.Array, schema.NumFields())
	defer func() {
		for _, c := range cols {
			if c != nil {
				c.Release()
			}
		}
	}()
	arrs := make([]arrow.Array, len(recs))
	for j := range cols {
		for i, r := range recs {
			arrs[i] = r.Column(j)
		}
		c, err := array.Concatenate(arrs, mem)
		if err != nil {
			return nil, fmt.Errorf("column %q: %w", schema.Field(j).Name, err)
		}
		cols[j] = c
	}
	return array.NewRecordBatch(schema, cols, rows), nil
}
