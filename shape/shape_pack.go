package shape

// Sequence packing for LLM training; the contract is in Pack's doc comment.

import (
	"fmt"
	"math"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// PackedRows returns the number of output rows that packing gives a slice of b
// source rows: ceil(b / ratio). A ratio below 1, NaN or infinite (rejected by
// Column.Validate) counts as 1.
func PackedRows(b int, ratio float64) int {
	if b <= 0 {
		return 0
	}
	if !(ratio >= 1) || math.IsInf(ratio, 0) {
		return b
	}
	return int(math.Ceil(float64(b) / ratio))
}

// PackInput is one list column for PackAligned.
type PackInput struct {
	// Name names the column in errors.
	Name string
	// List is a list or large_list array of fixed-width numbers.
	List arrow.Array
	// Fill is the padding value; with a Fill, null entries are empty.
	Fill Fill
}

// Pack packs the sequences of a list (or large_list) array of fixed-width
// numbers first-fit into `rows` rows of `length` tokens. It returns the tokens
// as fixed_size_list<T>[length] and the int32 segment ids and positions, each
// with `rows` rows; the caller releases all three.
//
// # Contract
//
// With packing (Column.PackRatio), a slice of b source rows (sequences)
// becomes rows = PackedRows(b, ratio) = ceil(b / ratio) output rows of Length
// tokens, ratio >= 1. The output row count depends only on b and the ratio,
// never on the data, so steps per epoch stay computable from metadata alone
// and every process agrees on them.
//
// Sequences are placed first-fit in input order: each goes into the first
// output row with room for all of it, after the sequences already there. Per
// output row, segment ids count the sequences from 1 (0 marks padding) and
// positions restart at 0 for every sequence (0 for padding); padding tokens
// are the Fill (default 0). Empty sequences (and null entries, read as empty
// when a Fill is given) contribute nothing and get no segment. A sequence
// longer than length is cut to its first length tokens (Truncate) or is
// ErrTooLong (Reject).
//
// Packing never drops data silently: when the sequences do not fit into the
// rows, the error (ErrPackOverflow) says how many rows first-fit would need and
// the largest ratio that would have worked for that slice.
func Pack(list arrow.Array, length, rows int, rule ListRule, fill Fill, mem memory.Allocator) (tokens, segmentIDs, positions *array.FixedSizeList, err error) {
	packed, seg, pos, err := PackAligned([]PackInput{{List: list, Fill: fill}}, length, rows, rule, mem)
	if err != nil {
		return nil, nil, nil, err
	}
	return packed[0], seg, pos, nil
}

// PackAligned packs a tokens column (in[0]) and aligned columns (loss weights,
// ...) with one layout: the layout is computed from in[0] and every column must
// have the same length as in[0] in every row. It returns one packed
// fixed_size_list per input, plus segment ids and positions; the caller
// releases them all.
func PackAligned(in []PackInput, length, rows int, rule ListRule, mem memory.Allocator) (packed []*array.FixedSizeList, segmentIDs, positions *array.FixedSizeList, err error) {
	ins := make([]packInput, len(in))
	for i, p := range in {
		if p.List == nil {
			return nil, nil, nil, fmt.Errorf("shape: pack input %d (%q): nil list: %w", i, p.Name, ErrShape)
		}
		elem, ok := listElemField(p.List.DataType())
		id := p.List.DataType().ID()
		if !ok || (id != arrow.LIST && id != arrow.LARGE_LIST) {
			return nil, nil, nil, fmt.Errorf("shape: column %q (%s): packing needs a list or large_list column: %w", p.Name, p.List.DataType(), ErrShape)
		}
		to := castTarget{dt: elem.Type}
		fill, err := to.fillBytes(p.Fill)
		if err != nil || !to.fixedWidth() {
			return nil, nil, nil, fmt.Errorf("shape: column %q (%s): cannot pack: %v: %w", p.Name, p.List.DataType(), err, ErrShape)
		}
		if length < 1 || length > math.MaxInt32 {
			return nil, nil, nil, fmt.Errorf("shape: column %q: Length %d out of range [1, %d]: %w", p.Name, length, math.MaxInt32, ErrShape)
		}
		ins[i] = packInput{name: p.Name, list: p.List, to: to, fill: fill, fillSet: p.Fill.IsSet(), outType: shapeFixedType(elem, to, length)}
	}
	out, seg, pos, _, err := packColumns(ins, nil, length, rows, rule, mem)
	if err != nil {
		return nil, nil, nil, err
	}
	packed = make([]*array.FixedSizeList, len(out))
	for i, a := range out {
		packed[i] = a.(*array.FixedSizeList)
	}
	return packed, seg.(*array.FixedSizeList), pos.(*array.FixedSizeList), nil
}

// packInput is one compiled packed column.
type packInput struct {
	name    string
	list    arrow.Array
	parts   []arrow.Array // instead of list: its rows in parts, in order (ApplyParts)
	to      castTarget
	cast    bool
	fill    []byte
	fillSet bool
	outType arrow.DataType
}

// packLayout places each source sequence: output row and start position.
type packLayout struct {
	row  []int32 // per source row: output row, -1 for an empty sequence
	pos  []int32 // per source row: first position in the output row
	seg  []int32 // per source row: 1-based segment id in the output row
	used []int32 // per output row: tokens placed
}

// packFirstFit places sequences of the given lengths (each <= length) first-fit
// into `rows` rows; ok is false when one does not fit. A max-tree over the rows'
// free space finds the first row with room in O(log rows).
func packFirstFit(lens []int, length, rows int) (lay packLayout, ok bool) {
	lay = packLayout{row: make([]int32, len(lens)), pos: make([]int32, len(lens)), seg: make([]int32, len(lens)), used: make([]int32, rows)}
	size := 1
	for size < rows {
		size <<= 1
	}
	free := make([]int32, 2*size)
	for i := 0; i < size; i++ {
		free[size+i] = -1
		if i < rows {
			free[size+i] = int32(length)
		}
	}
	for i := size - 1; i >= 1; i-- {
		free[i] = max(free[2*i], free[2*i+1])
	}
	segs := make([]int32, rows)
	for i, k := range lens {
		if k == 0 {
			lay.row[i] = -1
			continue
		}
		need := int32(k)
		if rows == 0 || free[1] < need {
			return lay, false
		}
		j := 1
		for j < size {
			if free[2*j] >= need {
				j = 2 * j
			} else {
				j = 2*j + 1
			}
		}
		r := j - size
		segs[r]++
		lay.row[i], lay.pos[i], lay.seg[i] = int32(r), lay.used[r], segs[r]
		lay.used[r] += need
		free[j] -= need
		for j > 1 {
			j /= 2
			free[j] = max(free[2*j], free[2*j+1])
		}
	}
	return lay, true
}

// aligned checks that the columns packed with ins[0] have its number of rows
// and, row by row, its number of elements.
func aligned(ins []packInput, lrs []*listRows) error {
	head := lrs[0]
	for c, lr := range lrs[1:] {
		if lr.n != head.n {
			return fmt.Errorf("shape: packed columns %q (%d rows) and %q (%d rows) differ in row count: %w", ins[0].name, head.n, ins[c+1].name, lr.n, ErrShape)
		}
		for r := range lr.lens {
			if lr.lens[r] != head.lens[r] {
				return fmt.Errorf("shape: packed columns %q and %q differ at row %d (%d vs %d elements); aligned columns need identical lengths in every row: %w",
					ins[0].name, ins[c+1].name, r, head.lens[r], lr.lens[r], ErrShape)
			}
		}
	}
	return nil
}

// packColumns packs ins[0] and its aligned columns into rows of length.
// With tags (one per part of ins[0].parts, or one for its list), it also
// returns each token's part's tag, -1 for padding (packTags).
//
// Length: the steps of packing in order (prepare, check, place, report an
// overflow, materialize, segment ids and positions), each short.
func packColumns(ins []packInput, tags []int32, length, rows int, rule ListRule, mem memory.Allocator) (packed []arrow.Array, segmentIDs, positions, tagged arrow.Array, err error) {
	if len(ins) == 0 {
		return nil, nil, nil, nil, fmt.Errorf("shape: nothing to pack: %w", ErrShape)
	}
	if rows < 0 {
		return nil, nil, nil, nil, fmt.Errorf("shape: column %q: negative row count %d: %w", ins[0].name, rows, ErrShape)
	}
	lrs := make([]*listRows, 0, len(ins))
	defer func() {
		for _, lr := range lrs {
			lr.release()
		}
	}()
	for _, in := range ins {
		lr, err := prepareInput(in, mem)
		if err != nil {
			return nil, nil, nil, nil, err
		}
		lrs = append(lrs, lr)
	}
	head := lrs[0]
	if err := aligned(ins, lrs); err != nil {
		return nil, nil, nil, nil, err
	}
	if err := head.checkLength(ins[0].name, length, rule); err != nil {
		return nil, nil, nil, nil, err
	}
	lens := make([]int, head.n)
	tokens, nonEmpty := 0, 0
	for r, k := range head.lens {
		lens[r] = min(k, length)
		tokens += lens[r]
		if lens[r] > 0 {
			nonEmpty++
		}
	}
	lay, ok := packFirstFit(lens, length, rows)
	if !ok {
		all, _ := packFirstFit(lens, length, nonEmpty)
		needed := 0
		for needed < len(all.used) && all.used[needed] > 0 {
			needed++
		}
		return nil, nil, nil, nil, fmt.Errorf("shape: column %q: packing %d sequences (%d tokens) first-fit into rows of Length %d needs %d rows, but only %d are available; lower the packing ratio (rows = ceil(b / ratio)) to at most %.4g for this slice of b=%d rows, or raise Length: %w",
			ins[0].name, nonEmpty, tokens, length, needed, rows, float64(head.n)/float64(needed), head.n, ErrPackOverflow)
	}

	out := make([]arrow.Array, 0, len(ins))
	for c, lr := range lrs {
		out = append(out, packMaterialize(lr, lens, lay, length, rows, ins[c], mem))
	}
	sb, pb := shapeBuffer(mem, rows*length*4), shapeBuffer(mem, rows*length*4)
	seg, pos := arrow.GetData[int32](sb.Bytes()), arrow.GetData[int32](pb.Bytes())
	clear(seg)
	clear(pos)
	for i, r := range lay.row {
		if r < 0 {
			continue
		}
		base := int(r)*length + int(lay.pos[i])
		id := lay.seg[i]
		for j := 0; j < lens[i]; j++ {
			seg[base+j] = id
			pos[base+j] = int32(j)
		}
	}
	idsType := arrow.FixedSizeListOfNonNullable(int32(length), arrow.PrimitiveTypes.Int32)
	segData := shapeNewData(arrow.PrimitiveTypes.Int32, rows*length, []*memory.Buffer{nil, sb}, nil, 0)
	posData := shapeNewData(arrow.PrimitiveTypes.Int32, rows*length, []*memory.Buffer{nil, pb}, nil, 0)
	segmentIDs = shapeMakeArray(shapeNewData(idsType, rows, []*memory.Buffer{nil}, []arrow.ArrayData{segData}, 0))
	positions = shapeMakeArray(shapeNewData(idsType, rows, []*memory.Buffer{nil}, []arrow.ArrayData{posData}, 0))
	if tags != nil {
		tagged = packTags(head, lens, lay, tags, length, rows, mem)
	}
	return out, segmentIDs, positions, tagged, nil
}

// packMaterialize writes one column's packed tokens: one copy per sequence,
// then padding after each row's last sequence.
func packMaterialize(lr *listRows, lens []int, lay packLayout, length, rows int, in packInput, mem memory.Allocator) arrow.Array {
	w := lr.width
	rowBytes := length * w
	vb := shapeBuffer(mem, rows*rowBytes)
	out := vb.Bytes()
	pattern := shapeFillPattern(in.fill, length)
	for r := 0; r < rows; r++ {
		shapePad(out[r*rowBytes+int(lay.used[r])*w:(r+1)*rowBytes], pattern)
	}
	for i, r := range lay.row {
		if r < 0 {
			continue
		}
		k := lens[i]
		dst := out[int(r)*rowBytes+int(lay.pos[i])*w:]
		src, j := lr.at(i)
		s := int(src.starts[j]) * w
		copy(dst[:k*w], src.vals[s:s+k*w])
		src.fillNulls(j, k, dst, in.fill)
	}
	child := shapeNewData(in.to.dt, rows*length, []*memory.Buffer{nil, vb}, nil, 0)
	return shapeMakeArray(shapeNewData(in.outType, rows, []*memory.Buffer{nil}, []arrow.ArrayData{child}, 0))
}
