package shape

// List shaping: variable-length lists padded or truncated to a static length,
// and element casts inside list and fixed_size_list columns. Rows are moved with
// one copy each, straight from the list's offsets; no builders.

import (
	"fmt"
	"sort"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/bitutil"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// listRows is a list column prepared for padding or packing: every row's
// elements, already in the output element type, contiguous in vals.
type listRows struct {
	n      int
	starts []int64 // first element of each row, as an element index into vals
	lens   []int   // each row's length; 0 for a null row read as empty
	vals   []byte  // the elements, in the output element type
	width  int     // bytes per element
	valid  []byte  // element validity (bit voff+i), nil when no element is null
	voff   int
	hold   arrow.ArrayData // the data behind vals
	// With parts (Shaper.ApplyParts): row r is row rowIn[r] of parts[partOf[r]];
	// lens and n are the parts' together, the other fields unused.
	parts  []*listRows
	partOf []int32
	rowIn  []int32
}

func (lr *listRows) release() {
	if lr.hold != nil {
		lr.hold.Release()
		lr.hold = nil
	}
	for _, p := range lr.parts {
		p.release()
	}
	lr.parts = nil
}

// at returns the listRows holding row r and r's row in it.
func (lr *listRows) at(r int) (*listRows, int) {
	if lr.partOf == nil {
		return lr, r
	}
	return lr.parts[lr.partOf[r]], int(lr.rowIn[r])
}

// listElemField returns the element field of a list, large_list or
// fixed_size_list type.
func listElemField(dt arrow.DataType) (arrow.Field, bool) {
	switch t := dt.(type) {
	case *arrow.ListType:
		return t.ElemField(), true
	case *arrow.LargeListType:
		return t.ElemField(), true
	case *arrow.FixedSizeListType:
		return t.ElemField(), true
	}
	return arrow.Field{}, false
}

// shapeFixedType is the output type of a padded or packed list column.
func shapeFixedType(elem arrow.Field, to castTarget, length int) arrow.DataType {
	f := to.field(elem)
	f.Nullable = false
	f.Metadata = arrow.Metadata{}
	return arrow.FixedSizeListOfField(int32(length), f)
}

func listBounds[O int32 | int64](offs []O, starts []int64, lens []int) {
	for r := range lens {
		starts[r] = int64(offs[r])
		lens[r] = int(offs[r+1] - offs[r])
	}
}

// nullElement returns the error for the first null element inside a list
// that is not itself null (isNull), or nil.
func (lr *listRows) nullElement(name string, isNull func(int) bool) error {
	for r := 0; r < lr.n; r++ {
		if isNull(r) {
			continue
		}
		for j := 0; j < lr.lens[r]; j++ {
			if !bitutil.BitIsSet(lr.valid, lr.voff+int(lr.starts[r])+j) {
				return rowError(name, r, fmt.Errorf("shape: column %q row %d element %d: null element inside a list; set a Fill to stand in for it: %w", name, r, j, ErrNullList))
			}
		}
	}
	return nil
}

// prepareList reads the rows of a list or large_list column, casting its
// elements to `to` when cast is set. Null list entries become empty rows when
// fillSet, else they are ErrNullList; so are null elements inside lists.
func prepareList(name string, arr arrow.Array, to castTarget, cast, fillSet bool, mem memory.Allocator) (*listRows, error) {
	data := arr.Data()
	n := data.Len()
	lr := &listRows{n: n, starts: make([]int64, n), lens: make([]int, n), width: to.width()}
	if lr.width == 0 {
		return nil, fmt.Errorf("shape: column %q (%s): elements of type %s cannot be shaped: %w", name, data.DataType(), to, ErrShape)
	}
	if n == 0 {
		return lr, nil
	}
	var end int64
	switch data.DataType().ID() {
	case arrow.LIST:
		offs := arrow.GetOffsets[int32](data, 1)
		listBounds(offs, lr.starts, lr.lens)
		end = int64(offs[n])
	case arrow.LARGE_LIST:
		offs := arrow.GetOffsets[int64](data, 1)
		listBounds(offs, lr.starts, lr.lens)
		end = offs[n]
	default:
		return nil, fmt.Errorf("shape: column %q (%s): not a variable-length list: %w", name, data.DataType(), ErrShape)
	}
	base := lr.starts[0]
	for r := range lr.starts {
		lr.starts[r] -= base
	}

	var listValid []byte
	if shapeNullN(data) > 0 && data.Buffers()[0] != nil {
		listValid = data.Buffers()[0].Bytes()
	}
	isNull := func(r int) bool { return listValid != nil && !bitutil.BitIsSet(listValid, data.Offset()+r) }
	if listValid != nil && !fillSet {
		for r := 0; r < n; r++ {
			if isNull(r) {
				return nil, rowError(name, r, fmt.Errorf("shape: column %q row %d: null list entry; set a Fill to read null lists as empty: %w", name, r, ErrNullList))
			}
		}
	}
	// rowOf maps an element index (relative to base) to its row.
	rowOf := func(e int64) int {
		return sort.Search(n, func(r int) bool { return lr.starts[r]+int64(lr.lens[r]) > e })
	}

	elems := array.NewSliceData(data.Children()[0], base, end)
	if cast {
		casted, bad := castData(elems, to, mem, func(e int) bool { return isNull(rowOf(int64(e))) })
		if bad != -1 {
			defer elems.Release()
			r := rowOf(int64(bad))
			return nil, rowError(name, r, castFault(name, elems, to, bad, fmt.Sprintf("row %d element %d", r, int64(bad)-lr.starts[r])))
		}
		elems.Release()
		elems = casted
	}
	lr.hold = elems
	w := int64(lr.width)
	if buf := elems.Buffers()[1]; buf != nil {
		off := int64(elems.Offset())
		lr.vals = buf.Bytes()[off*w : (off+int64(elems.Len()))*w]
	}

	if shapeNullN(elems) > 0 && elems.Buffers()[0] != nil {
		lr.valid, lr.voff = elems.Buffers()[0].Bytes(), elems.Offset()
		if !fillSet {
			if err := lr.nullElement(name, isNull); err != nil {
				lr.release()
				return nil, err
			}
		}
	}
	for r := 0; r < n; r++ {
		if isNull(r) {
			lr.lens[r] = 0
		}
	}
	return lr, nil
}

// fillNulls writes fill over the null elements of row r, which was copied to
// dst (its first k elements).
func (lr *listRows) fillNulls(r, k int, dst, fill []byte) {
	if lr.valid == nil {
		return
	}
	w := lr.width
	for j := 0; j < k; j++ {
		if !bitutil.BitIsSet(lr.valid, lr.voff+int(lr.starts[r])+j) {
			copy(dst[j*w:(j+1)*w], fill)
		}
	}
}

// checkLength applies rule to rows longer than length: with Reject the first
// such row is ErrTooLong, naming it and the longest row of the slice.
func (lr *listRows) checkLength(name string, length int, rule ListRule) error {
	first, longest, longestRow := -1, 0, -1
	for r, k := range lr.lens {
		if k > length {
			if first < 0 {
				first = r
			}
			if k > longest {
				longest, longestRow = k, r
			}
		}
	}
	if first < 0 || rule == Truncate {
		return nil
	}
	return rowError(name, first, fmt.Errorf("shape: column %q row %d: list of %d elements is longer than Length %d (longest in this slice: %d elements, row %d); set Overflow to Truncate to keep the first %d elements, or raise Length to at least %d: %w",
		name, first, lr.lens[first], length, longest, longestRow, length, longest, ErrTooLong))
}

// shapeFillPattern returns count copies of the one-element fill, or nil when
// the fill is all zero bytes (callers clear instead).
func shapeFillPattern(fill []byte, count int) []byte {
	zero := true
	for _, b := range fill {
		zero = zero && b == 0
	}
	if zero {
		return nil
	}
	p := make([]byte, len(fill)*count)
	for i := 0; i < count; i++ {
		copy(p[i*len(fill):], fill)
	}
	return p
}

// shapePad writes fill (pattern from shapeFillPattern) over dst.
func shapePad(dst, pattern []byte) {
	if pattern == nil {
		clear(dst)
		return
	}
	copy(dst, pattern)
}

// padList turns a list column into fixed_size_list[Length] plus its int32
// length column (original lengths capped at Length).
func padList(name string, arr arrow.Array, st shapeStep, mem memory.Allocator) (arrow.Array, arrow.Array, error) {
	length := st.col.Length
	lr, err := prepareList(name, arr, st.to, st.cast, st.col.Fill.IsSet(), mem)
	if err != nil {
		return nil, nil, err
	}
	defer lr.release()
	if err := lr.checkLength(name, length, st.col.Overflow); err != nil {
		return nil, nil, err
	}
	n, w := lr.n, lr.width
	rowBytes := length * w
	vb := shapeBuffer(mem, n*rowBytes)
	lb := shapeBuffer(mem, n*4)
	out, lens := vb.Bytes(), arrow.GetData[int32](lb.Bytes())
	pattern := shapeFillPattern(st.fill, length)
	for r := 0; r < n; r++ {
		k := min(lr.lens[r], length)
		dst := out[r*rowBytes : (r+1)*rowBytes]
		s := int(lr.starts[r]) * w
		copy(dst[:k*w], lr.vals[s:s+k*w])
		shapePad(dst[k*w:], pattern)
		lr.fillNulls(r, k, dst, st.fill)
		lens[r] = int32(k)
	}
	child := shapeNewData(st.to.dt, n*length, []*memory.Buffer{nil, vb}, nil, 0)
	fsl := shapeMakeArray(shapeNewData(st.outType, n, []*memory.Buffer{nil}, []arrow.ArrayData{child}, 0))
	lengths := shapeMakeArray(shapeNewData(arrow.PrimitiveTypes.Int32, n, []*memory.Buffer{nil, lb}, nil, 0))
	return fsl, lengths, nil
}

// castFixedSizeList casts the elements of a fixed_size_list column, keeping
// its shape and validity.
func castFixedSizeList(name string, arr arrow.Array, st shapeStep, mem memory.Allocator) (arrow.Array, error) {
	data := arr.Data()
	n := data.Len()
	size := int64(st.outType.(*arrow.FixedSizeListType).Len())
	off := int64(data.Offset())
	elems := array.NewSliceData(data.Children()[0], off*size, (off+int64(n))*size)
	defer elems.Release()
	var valid []byte
	if shapeNullN(data) > 0 && data.Buffers()[0] != nil {
		valid = data.Buffers()[0].Bytes()
	}
	casted, bad := castData(elems, st.to, mem, func(e int) bool {
		return valid != nil && !bitutil.BitIsSet(valid, int(off)+e/int(size))
	})
	if bad != -1 {
		return nil, rowError(name, bad/int(size), castFault(name, elems, st.to, bad, fmt.Sprintf("row %d element %d", bad/int(size), bad%int(size))))
	}
	bm := shapeValidity(data, mem)
	nulls := 0
	if bm != nil {
		nulls = shapeNullN(data)
	}
	return shapeMakeArray(shapeNewData(st.outType, n, []*memory.Buffer{bm}, []arrow.ArrayData{casted}, nulls)), nil
}

func rebaseOffsets[O int32 | int64](src []O, dst []O) {
	base := src[0]
	for i, o := range src {
		dst[i] = o - base
	}
}

// castList casts the elements of a list or large_list column, keeping it
// variable-length: offsets are rebased to 0, validity kept.
func castList(name string, arr arrow.Array, st shapeStep, mem memory.Allocator) (arrow.Array, error) {
	data := arr.Data()
	n := data.Len()
	var start, end int64
	var ob *memory.Buffer
	switch data.DataType().ID() {
	case arrow.LIST:
		ob = shapeBuffer(mem, (n+1)*4)
		if n == 0 {
			clear(ob.Bytes())
			break
		}
		offs := arrow.GetOffsets[int32](data, 1)
		rebaseOffsets(offs, arrow.GetData[int32](ob.Bytes()))
		start, end = int64(offs[0]), int64(offs[n])
	default:
		ob = shapeBuffer(mem, (n+1)*8)
		if n == 0 {
			clear(ob.Bytes())
			break
		}
		offs := arrow.GetOffsets[int64](data, 1)
		rebaseOffsets(offs, arrow.GetData[int64](ob.Bytes()))
		start, end = offs[0], offs[n]
	}
	elems := array.NewSliceData(data.Children()[0], start, end)
	defer elems.Release()
	var valid []byte
	if shapeNullN(data) > 0 && data.Buffers()[0] != nil {
		valid = data.Buffers()[0].Bytes()
	}
	rel := arrow.GetData[int32](ob.Bytes())
	rel64 := arrow.GetData[int64](ob.Bytes())
	rowOf := func(e int) int {
		return sort.Search(n, func(r int) bool {
			if data.DataType().ID() == arrow.LIST {
				return int(rel[r+1]) > e
			}
			return int(rel64[r+1]) > e
		})
	}
	casted, bad := castData(elems, st.to, mem, func(e int) bool {
		return valid != nil && !bitutil.BitIsSet(valid, data.Offset()+rowOf(e))
	})
	if bad != -1 {
		ob.Release()
		r := rowOf(bad)
		first := int(rel64At(rel, rel64, data.DataType().ID(), r))
		return nil, rowError(name, r, castFault(name, elems, st.to, bad, fmt.Sprintf("row %d element %d", r, bad-first)))
	}
	bm := shapeValidity(data, mem)
	nulls := 0
	if bm != nil {
		nulls = shapeNullN(data)
	}
	return shapeMakeArray(shapeNewData(st.outType, n, []*memory.Buffer{bm, ob}, []arrow.ArrayData{casted}, nulls)), nil
}

func rel64At(rel []int32, rel64 []int64, id arrow.Type, r int) int64 {
	if id == arrow.LIST {
		return int64(rel[r])
	}
	return rel64[r]
}
