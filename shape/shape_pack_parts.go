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
// parts[0]. With a tag name (one of tags per part), the output also has, last,
// the column TaggedSchema names: per token of the leading packed column its
// part's tag, -1 for padding (a mixture's source per token).
func (s *Shaper) ApplyParts(parts []arrow.RecordBatch, tag string, tags []int32, mem memory.Allocator) (arrow.RecordBatch, error) {
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
	sch := s.out
	if tag != "" {
		if len(tags) != len(parts) {
			return nil, fmt.Errorf("shape: %d tags for %d parts: %w", len(tags), len(parts), ErrShape)
		}
		sch = s.TaggedSchema(tag)
	} else {
		tags = nil
	}
	packed, err := s.applyPack(parts, tags, mem)
	if err != nil {
		return nil, err
	}
	out := array.NewRecordBatch(sch, packed, int64(packed[0].Len()))
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

// TaggedSchema is the schema of ApplyParts with a tag: the Shaper's schema
// and, last, tag as fixed_size_list<int32>[Length], aligned with the packed
// tokens. A packing Shaper only.
func (s *Shaper) TaggedSchema(tag string) *arrow.Schema {
	fields := append(s.out.Fields(), arrow.Field{Name: tag, Type: arrow.FixedSizeListOfNonNullable(int32(s.pack.Length), arrow.PrimitiveTypes.Int32)})
	md := s.out.Metadata()
	return arrow.NewSchema(fields, &md)
}

// packTags returns, per token of the packed rows laid out by lay, the tag of
// the part its sequence came from (head's parts; one part when head has
// none), -1 for padding, as fixed_size_list<int32>[length].
func packTags(head *listRows, lens []int, lay packLayout, tags []int32, length, rows int, mem memory.Allocator) arrow.Array {
	buf := shapeBuffer(mem, rows*length*4)
	out := arrow.GetData[int32](buf.Bytes())
	for i := range out {
		out[i] = -1
	}
	for i, r := range lay.row {
		if r < 0 {
			continue
		}
		part := 0
		if head.partOf != nil {
			part = int(head.partOf[i])
		}
		base := int(r)*length + int(lay.pos[i])
		seg := out[base : base+lens[i]]
		for j := range seg {
			seg[j] = tags[part]
		}
	}
	typ := arrow.FixedSizeListOfNonNullable(int32(length), arrow.PrimitiveTypes.Int32)
	child := shapeNewData(arrow.PrimitiveTypes.Int32, rows*length, []*memory.Buffer{nil, buf}, nil, 0)
	return shapeMakeArray(shapeNewData(typ, rows, []*memory.Buffer{nil}, []arrow.ArrayData{child}, 0))
}
