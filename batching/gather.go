package batching

// Column kernels of the cutters: gathering runs of rows from several records
// into one column, and padding a column with zero rows.

import (
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/bitutil"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/meshfeed/meshfeed/internal/arrowmem"
)

// fixedWidth reports whether values of dt are byte-aligned fixed-width rows that
// gatherFixed can copy: a primitive-layout type ([validity, values]) or a
// fixed_size_list of one. elem is the byte width of one (child) value, size the
// list size (1 for a primitive).
func fixedWidth(dt arrow.DataType) (elem, size int, isList, ok bool) {
	if l, isFSL := dt.(*arrow.FixedSizeListType); isFSL {
		e, _, nested, ok := fixedWidth(l.Elem())
		if !ok || nested {
			return 0, 0, false, false
		}
		return e, int(l.Len()), true, true
	}
	if dt.ID() == arrow.EXTENSION || dt.ID() == arrow.DICTIONARY {
		return 0, 0, false, false
	}
	if _, nested := dt.(arrow.NestedType); nested {
		return 0, 0, false, false
	}
	lay := dt.Layout()
	if lay.HasDict || lay.VariadicSpec != nil || len(lay.Buffers) != 2 || lay.Buffers[0].Kind != arrow.KindBitmap ||
		lay.Buffers[1].Kind != arrow.KindFixedWidth || lay.Buffers[1].ByteWidth <= 0 {
		return 0, 0, false, false
	}
	return lay.Buffers[1].ByteWidth, 1, false, true
}

// gatherColumn copies the runs of arrs into one n-row array: memcpy per run for
// fixed-width types, concatenation of views otherwise.
func gatherColumn(mem memory.Allocator, dt arrow.DataType, arrs []arrow.Array, runs []run, n int64) (arrow.Array, error) {
	if elem, size, isList, ok := fixedWidth(dt); ok {
		childNulls := false
		if isList {
			for _, r := range runs {
				if arrs[r.src].(*array.FixedSizeList).ListValues().NullN() > 0 {
					childNulls = true
					break
				}
			}
		}
		if !childNulls {
			return gatherFixed(mem, dt, elem, size, isList, arrs, runs, n), nil
		}
	}
	views := make([]arrow.Array, len(runs))
	defer releaseAll(views)
	for i, r := range runs {
		views[i] = array.NewSlice(arrs[r.src], r.row, r.row+r.n)
	}
	return array.Concatenate(views, mem)
}

// gatherFixed is gatherColumn's memcpy path.
func gatherFixed(mem memory.Allocator, dt arrow.DataType, elem, size int, isList bool, arrs []arrow.Array, runs []run, n int64) arrow.Array {
	rowBytes := int64(elem * size)
	vals := arrowmem.NewOverwriteBuffer(mem, int(n*rowBytes)) // the runs below write every byte
	defer vals.Release()
	dst := vals.Bytes()
	// Per source: its values bytes and the index of its row 0 in rows.
	srcBytes := make([][]byte, len(arrs))
	srcBase := make([]int64, len(arrs))
	anyNull := false
	for i, a := range arrs {
		d := a.Data()
		if a.Len() == 0 {
			continue
		}
		if a.NullN() > 0 {
			anyNull = true
		}
		if isList {
			ch := d.Children()[0]
			srcBytes[i] = ch.Buffers()[1].Bytes()
			// Child offsets need not be multiples of size: address in values.
			srcBase[i] = int64(ch.Offset()) + int64(d.Offset())*int64(size)
		} else {
			srcBytes[i] = d.Buffers()[1].Bytes()
			srcBase[i] = int64(d.Offset())
		}
	}
	var out int64
	for _, r := range runs {
		var start int64
		if isList {
			start = (srcBase[r.src] + r.row*int64(size)) * int64(elem)
		} else {
			start = (srcBase[r.src] + r.row) * rowBytes
		}
		m := r.n * rowBytes
		copy(dst[out:out+m], srcBytes[r.src][start:start+m])
		out += m
	}
	var valid *memory.Buffer
	nulls := 0
	if anyNull {
		valid = memory.NewResizableBuffer(mem)
		defer valid.Release()
		valid.Resize(int(bitutil.BytesForBits(n)))
		bm := valid.Bytes()
		clear(bm)
		out = 0
		for _, r := range runs {
			a := arrs[r.src]
			for i := int64(0); i < r.n; i++ {
				if a.IsValid(int(r.row + i)) {
					bitutil.SetBit(bm, int(out+i))
				}
			}
			out += r.n
		}
		nulls = int(n) - bitutil.CountSetBits(bm, 0, int(n))
	}
	var data *array.Data
	if isList {
		elemType := dt.(*arrow.FixedSizeListType).Elem()
		child := array.NewData(elemType, int(n)*size, []*memory.Buffer{nil, vals}, nil, 0, 0)
		defer child.Release()
		data = array.NewData(dt, int(n), []*memory.Buffer{valid}, []arrow.ArrayData{child}, nulls, 0)
	} else {
		data = array.NewData(dt, int(n), []*memory.Buffer{valid, vals}, nil, nulls, 0)
	}
	defer data.Release()
	return array.MakeFromData(data)
}

// padColumn returns col (nil for none) extended with zero values to n rows.
func padColumn(mem memory.Allocator, dt arrow.DataType, col arrow.Array, n int) (arrow.Array, error) {
	have := 0
	if col != nil {
		have = col.Len()
	}
	if have == n {
		col.Retain()
		return col, nil
	}
	bld := array.NewBuilder(mem, dt)
	defer bld.Release()
	bld.AppendEmptyValues(n - have)
	zeros := bld.NewArray()
	if col == nil {
		return zeros, nil
	}
	defer zeros.Release()
	return array.Concatenate([]arrow.Array{col, zeros}, mem)
}
