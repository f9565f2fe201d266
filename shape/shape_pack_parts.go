package shape

import (
	"errors"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// ApplyParts packs the rows of parts, in order, as Apply packs one record
// holding them all (the same output, byte for byte), without joining them
// first: each sequence is copied once, from its part into its packed row.
// It is for a packing Shaper only (a mixture's slice, whose rows arrive as
// one part per source block); a RowError's Row counts from the first row of
// parts[0].
func (s *Shaper) ApplyParts(parts []arrow.RecordBatch, mem memory.Allocator) (arrow.RecordBatch, error) {
	if !s.packing {
		return nil, fmt.Errorf("shape: ApplyParts needs a packing shaper (a column with PackRatio): %w", ErrShape)
	}
	if len(parts) == 0 {
		return nil, fmt.Errorf("shape: ApplyParts of no parts: %w", ErrShape)
	}
	for k, p := range parts {
		if !p.Schema().Equal(s.in) {
			return nil, fmt.Errorf("shape: part %d schema %s differs from the shaper's input schema %s: %w", k, p.Schema(), s.in, ErrShape)
		}
	}
	packed, err := s.applyPack(parts, mem)
	if err != nil {
		return nil, err
	}
	out := array.NewRecordBatch(s.out, packed, int64(packed[0].Len()))
	for _, a := range packed {
		a.Release()
	}
	return out, nil
}

// prepareInput is prepareList of in's list, or of each of its parts, read
// as one list (listRows.at).
func prepareInput(in packInput, mem memory.Allocator) (*listRows, error) {
	if in.parts == nil {
		return prepareList(in.name, in.list, in.to, in.cast, in.fillSet, mem)
	}
	all := &listRows{width: in.to.width()}
	for k, arr := range in.parts {
		lr, err := prepareList(in.name, arr, in.to, in.cast, in.fillSet, mem)
		if err != nil {
			all.release()
			var re *RowError
			if errors.As(err, &re) {
				return nil, rowError(re.Column, all.n+re.Row, re.Err)
			}
			return nil, err
		}
		all.parts = append(all.parts, lr)
		for r := 0; r < lr.n; r++ {
			all.partOf = append(all.partOf, int32(k))
			all.rowIn = append(all.rowIn, int32(r))
		}
		all.lens = append(all.lens, lr.lens...)
		all.n += lr.n
	}
	return all, nil
}
