package format

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/bitutil"
	"github.com/apache/arrow-go/v18/arrow/float16"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/encoding"
)

// Page by page: how one column chunk's data pages become the buffers of one
// Arrow array (values, validity, offsets), for the columns the fast path
// (fastpath.go) does not take.

// page appends one data page.
func (st *colState) page(page parquet.Page, rows int64) error {
	c := st.c
	if d := page.Dictionary(); d != nil {
		st.hasDict, st.dict, st.dictN = true, d.Page().Data(), d.Len()
	} else {
		st.hasDict, st.dict, st.dictN = false, encoding.Values{}, 0
	}
	if i := levelsAbove(page.DefinitionLevels(), c.maxDef); i >= 0 {
		return fmt.Errorf("definition level %d at value %d of a page, max %d: %w", page.DefinitionLevels()[i], i, c.maxDef, ErrCorrupt)
	}
	if i := levelsAbove(page.RepetitionLevels(), c.maxRep); i >= 0 {
		return fmt.Errorf("repetition level %d at value %d of a page, max %d: %w", page.RepetitionLevels()[i], i, c.maxRep, ErrCorrupt)
	}
	vals := page.Data()
	n := int(page.NumValues()) // levels, nulls included
	nn := int(page.NumNulls())
	switch c.kind {
	case kindBinary:
		return st.binaryPage(page, vals, n, rows)
	case kindList:
		return st.listPage(page, vals, rows)
	}
	limit := int(rows)
	if c.kind == kindFixedList {
		limit *= c.listSize
	}
	if nn > 0 {
		if c.kind == kindFixedList {
			return fmt.Errorf("%d nulls or empty lists inside fixed_size_list[%d] values: %w; every row must hold exactly %d values", nn, c.listSize, ErrNull, c.listSize)
		}
		if c.fill == nil && !(c.keep && c.kind == kindPrimitive) {
			row := st.nvals + firstBelow(page.DefinitionLevels(), c.maxDef)
			return fmt.Errorf("null at row %d (%d nulls in this page): %w; give the column a fill value or clean the data", row, nn, ErrNull)
		}
		if st.nvals+n > limit {
			return fmt.Errorf("pages hold more than the footer's %d values: %w", limit, ErrCorrupt)
		}
		return st.scatterWithFill(page.DefinitionLevels(), vals, n)
	}
	if st.nvals+n > limit {
		return fmt.Errorf("pages hold more than the footer's %d values: %w", limit, ErrCorrupt)
	}
	return st.appendValues(vals, n)
}

func firstBelow(levels []byte, max int) int {
	for i, l := range levels {
		if int(l) < max {
			return i
		}
	}
	return 0
}

// appendValues appends n non-null values from a page (through the dictionary
// when the page is dictionary-encoded) to st.values at st.nvals.
func (st *colState) appendValues(vals encoding.Values, n int) error {
	c := st.c
	src := vals
	if st.hasDict {
		idx := vals.Int32()
		if len(idx) < n {
			return fmt.Errorf("page has %d dictionary indexes, want %d: %w", len(idx), n, ErrCorrupt)
		}
		g, err := st.gather(idx[:n])
		if err != nil {
			return err
		}
		src = g
	}
	raw, _ := src.Data()
	dst := st.values.Bytes()
	if c.elemSize == 0 { // bool: bit-packed in both
		if len(raw)*8 < n {
			return fmt.Errorf("boolean page has %d bits, want %d: %w", len(raw)*8, n, ErrCorrupt)
		}
		bitutil.CopyBitmap(raw, 0, n, dst, st.nvals)
		st.nvals += n
		return nil
	}
	if err := convertInto(dst[st.nvals*c.elemSize:], c.elem.ID(), raw, c.phys, n); err != nil {
		return err
	}
	st.nvals += n
	return nil
}

// gather looks dictionary indexes up in the dictionary's plain values.
func (st *colState) gather(idx []int32) (encoding.Values, error) {
	raw, _ := st.dict.Data()
	w := physWidth(st.c.phys)
	if w == 0 {
		return encoding.Values{}, fmt.Errorf("dictionary-encoded %s pages: %w", st.c.phys, ErrUnsupported)
	}
	need := len(idx) * w
	if cap(st.scratch) < need {
		st.scratch = make([]byte, need)
	}
	out := st.scratch[:need]
	limit := uint32(len(raw) / w)
	switch w {
	case 4:
		d := unsafe.Slice((*uint32)(unsafe.Pointer(unsafe.SliceData(raw))), limit)
		o := unsafe.Slice((*uint32)(unsafe.Pointer(unsafe.SliceData(out))), len(idx))
		for i, k := range idx {
			if uint32(k) >= limit {
				return encoding.Values{}, fmt.Errorf("dictionary index %d out of range [0, %d): %w", k, limit, ErrCorrupt)
			}
			o[i] = d[k]
		}
	case 8:
		d := unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(raw))), limit)
		o := unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(out))), len(idx))
		for i, k := range idx {
			if uint32(k) >= limit {
				return encoding.Values{}, fmt.Errorf("dictionary index %d out of range [0, %d): %w", k, limit, ErrCorrupt)
			}
			o[i] = d[k]
		}
	default:
		for i, k := range idx {
			if uint32(k) >= limit {
				return encoding.Values{}, fmt.Errorf("dictionary index %d out of range [0, %d): %w", k, limit, ErrCorrupt)
			}
			copy(out[i*w:(i+1)*w], raw[int(k)*w:(int(k)+1)*w])
		}
	}
	return encoding.FixedLenByteArrayValues(out, w), nil
}

func physWidth(k parquet.Kind) int {
	switch k {
	case parquet.Int32, parquet.Float:
		return 4
	case parquet.Int64, parquet.Double:
		return 8
	case parquet.FixedLenByteArray:
		return 2 // float16, the only FLBA format decodes
	}
	return 0
}

// convertInto writes n values of physical kind k from raw into dst as Arrow
// type t. Same-width types are one copy; narrower integers are a checked
// narrowing loop (the writer guarantees the range; a value outside it means
// a corrupt file).
func convertInto(dst []byte, t arrow.Type, raw []byte, k parquet.Kind, n int) error {
	w := physWidth(k)
	if len(raw) < n*w {
		return fmt.Errorf("page holds %d bytes of values, want %d: %w", len(raw), n*w, ErrCorrupt)
	}
	switch t {
	case arrow.INT8, arrow.UINT8, arrow.INT16, arrow.UINT16:
		src := unsafe.Slice((*int32)(unsafe.Pointer(unsafe.SliceData(raw))), n)
		var bad int
		switch t {
		case arrow.INT8:
			bad = narrow(unsafe.Slice((*int8)(unsafe.Pointer(unsafe.SliceData(dst))), n), src, -math.MinInt8, math.MaxUint8)
		case arrow.UINT8:
			bad = narrow(dst[:n], src, 0, math.MaxUint8)
		case arrow.INT16:
			bad = narrow(unsafe.Slice((*int16)(unsafe.Pointer(unsafe.SliceData(dst))), n), src, -math.MinInt16, math.MaxUint16)
		case arrow.UINT16:
			bad = narrow(unsafe.Slice((*uint16)(unsafe.Pointer(unsafe.SliceData(dst))), n), src, 0, math.MaxUint16)
		}
		if bad >= 0 {
			return fmt.Errorf("value %d at index %d does not fit %s: %w", src[bad], bad, strings.ToLower(t.String()), ErrCorrupt)
		}
		return nil
	}
	copy(dst[:n*w], raw[:n*w])
	return nil
}

// narrow writes src into o, narrowed (o[i] = T(src[i])), and returns the
// index of the first value outside T's range, or -1. The range check is
// branch-free: v fits when uint32(v + bias) <= mask (mask being all ones,
// T's width), so OR-ing those over a block of 8 finds any value that does
// not; the block is then scanned for the index.
func narrow[T int8 | uint8 | int16 | uint16](o []T, src []int32, bias int32, mask uint32) int {
	o = o[:len(src)]
	i := 0
	for ; i+8 <= len(src); i += 8 {
		s := src[i : i+8 : i+8]
		d := o[i : i+8 : i+8]
		or := uint32(s[0]+bias) | uint32(s[1]+bias) | uint32(s[2]+bias) | uint32(s[3]+bias) |
			uint32(s[4]+bias) | uint32(s[5]+bias) | uint32(s[6]+bias) | uint32(s[7]+bias)
		if or > mask {
			break
		}
		d[0], d[1], d[2], d[3] = T(s[0]), T(s[1]), T(s[2]), T(s[3])
		d[4], d[5], d[6], d[7] = T(s[4]), T(s[5]), T(s[6]), T(s[7])
	}
	for ; i < len(src); i++ {
		if uint32(src[i]+bias) > mask {
			return i
		}
		o[i] = T(src[i])
	}
	return -1
}

// scatterWithFill writes n slots of a page with nulls: present values where
// the definition level is maxDef, the fill value elsewhere.
func (st *colState) scatterWithFill(def []byte, vals encoding.Values, n int) error {
	c := st.c
	present := 0
	for _, l := range def[:n] {
		if int(l) == c.maxDef {
			present++
		}
	}
	// Decode the present values into scratch space at the end, then spread.
	tmp := &colState{c: c, hasDict: st.hasDict, dict: st.dict, dictN: st.dictN}
	size := elemBytes(c.elemSize, present)
	tmp.values = memory.NewBufferBytes(make([]byte, size))
	if err := tmp.appendValues(vals, present); err != nil {
		return err
	}
	src := tmp.values.Bytes()
	dst := st.values.Bytes()
	j := 0
	for i, l := range def[:n] {
		pos := st.nvals + i
		if int(l) == c.maxDef {
			if c.elemSize == 0 {
				bitutil.SetBitTo(dst, pos, bitutil.BitIsSet(src, j))
			} else {
				copy(dst[pos*c.elemSize:(pos+1)*c.elemSize], src[j*c.elemSize:(j+1)*c.elemSize])
			}
			j++
		} else if c.fill != nil {
			putFill(dst, pos, c.elem.ID(), c.elemSize, *c.fill)
		} else {
			// Kept as a null (WithNullsAsValidity): a zero value, its
			// validity bit cleared.
			putFill(dst, pos, c.elem.ID(), c.elemSize, 0)
			if st.valid == nil {
				st.valid = newBuf(st.mem, int(bitutil.BytesForBits(st.nrows)))
				bitutil.SetBitsTo(st.valid.Bytes(), 0, st.nrows, true)
			}
			bitutil.ClearBit(st.valid.Bytes(), pos)
			st.nulls++
		}
	}
	st.nvals += n
	return nil
}

// putFill writes the fill value at element pos of dst.
func putFill(dst []byte, pos int, t arrow.Type, size int, v float64) {
	if size == 0 {
		bitutil.SetBitTo(dst, pos, v != 0)
		return
	}
	b := dst[pos*size : (pos+1)*size]
	switch t {
	case arrow.INT8:
		b[0] = byte(int8(v))
	case arrow.UINT8:
		b[0] = byte(v)
	case arrow.INT16:
		binary.LittleEndian.PutUint16(b, uint16(int16(v)))
	case arrow.UINT16:
		binary.LittleEndian.PutUint16(b, uint16(v))
	case arrow.FLOAT16:
		binary.LittleEndian.PutUint16(b, float16.New(float32(v)).Uint16())
	case arrow.INT32, arrow.DATE32:
		binary.LittleEndian.PutUint32(b, uint32(int32(v)))
	case arrow.UINT32:
		binary.LittleEndian.PutUint32(b, uint32(v))
	case arrow.FLOAT32:
		binary.LittleEndian.PutUint32(b, math.Float32bits(float32(v)))
	case arrow.INT64, arrow.TIMESTAMP, arrow.DATE64:
		binary.LittleEndian.PutUint64(b, uint64(int64(v)))
	case arrow.UINT64:
		binary.LittleEndian.PutUint64(b, uint64(v))
	case arrow.FLOAT64:
		binary.LittleEndian.PutUint64(b, math.Float64bits(v))
	}
}

// listPage appends a page of a variable-length list column: offsets from the
// levels, values as one block.
func (st *colState) listPage(page parquet.Page, vals encoding.Values, rows int64) error {
	c := st.c
	rep, def := page.RepetitionLevels(), page.DefinitionLevels()
	if len(rep) != len(def) {
		return fmt.Errorf("page has %d repetition and %d definition levels: %w", len(rep), len(def), ErrCorrupt)
	}
	offs := unsafe.Slice((*int32)(unsafe.Pointer(unsafe.SliceData(st.offsets.Bytes()))), int(rows)+1)
	count := st.nvals
	if c.elemDef <= math.MaxUint8 && bytes.Count(def, []byte{byte(c.elemDef)}) == len(def) {
		// No null or empty list and no null element (the common case):
		// every level is a value, and a row starts at every repetition
		// level 0, found with a vectorized byte search instead of a branch
		// per value.
		for i := 0; i < len(rep); {
			j := bytes.IndexByte(rep[i:], 0)
			if j < 0 {
				break
			}
			if st.rows >= int(rows) {
				return fmt.Errorf("pages hold more than the footer's %d rows: %w", rows, ErrCorrupt)
			}
			offs[st.rows] = int32(count + i + j)
			st.rows++
			i += j + 1
		}
		if len(def) > 0 {
			return st.appendValues(vals, len(def))
		}
		return nil
	}
	present, nullElems := 0, 0
	for i, r := range rep {
		if r == 0 {
			if st.rows >= int(rows) {
				return fmt.Errorf("pages hold more than the footer's %d rows: %w", rows, ErrCorrupt)
			}
			offs[st.rows] = int32(count)
			st.rows++
		}
		l := int(def[i])
		switch {
		case l == c.elemDef:
			count++
			present++
		case l > c.listDef: // a null element: the fill stands in for it
			if c.fill == nil {
				return fmt.Errorf("null element in list at row %d: %w; give the column a fill value (null elements become it), read it over Flight without one (nulls arrive as Arrow nulls), or clean the data", st.rows-1, ErrNull)
			}
			count++
			nullElems++
		case l == c.listDef: // an empty list
		default: // null list
			if c.fill == nil {
				return fmt.Errorf("null list at row %d: %w; give the column a fill value (null lists become empty) or clean the data", st.rows-1, ErrNull)
			}
		}
	}
	if nullElems > 0 {
		// The element slots' levels, values where present, the fill elsewhere.
		elems := make([]byte, 0, present+nullElems)
		for _, l := range def {
			if int(l) > c.listDef {
				elems = append(elems, l)
			}
		}
		return st.scatterWithFill(elems, vals, len(elems))
	}
	if present > 0 {
		if err := st.appendValues(vals, present); err != nil {
			return err
		}
	}
	return nil
}

// binaryPage appends a page of a string or binary column.
func (st *colState) binaryPage(page parquet.Page, vals encoding.Values, n int, rows int64) error {
	c := st.c
	if st.rows+n > int(rows) {
		return fmt.Errorf("pages hold more than the footer's %d rows: %w", rows, ErrCorrupt)
	}
	var data []byte
	var offsets []uint32
	if st.hasDict {
		idx := vals.Int32()
		dd, doff := st.dict.ByteArray()
		// Materialize through the dictionary.
		present := len(idx)
		tmpOff := make([]uint32, present+1)
		total := 0
		for i, k := range idx {
			if k < 0 || int(k) >= st.dictN {
				return fmt.Errorf("dictionary index %d out of range [0, %d): %w", k, st.dictN, ErrCorrupt)
			}
			total += int(doff[k+1] - doff[k])
			tmpOff[i+1] = uint32(total)
		}
		buf := make([]byte, total)
		for i, k := range idx {
			copy(buf[tmpOff[i]:], dd[doff[k]:doff[k+1]])
		}
		data, offsets = buf, tmpOff
	} else {
		data, offsets = vals.ByteArray()
	}
	present := len(offsets) - 1
	if present < 0 {
		present = 0
	}
	offs := unsafe.Slice((*int32)(unsafe.Pointer(unsafe.SliceData(st.offsets.Bytes()))), int(rows)+1)
	base := st.values.Len()
	if present > 0 {
		block := data[offsets[0]:offsets[present]]
		if int64(base)+int64(len(block)) > math.MaxInt32 {
			return fmt.Errorf("more than 2 GiB of string data in one row group: %w; write smaller row groups", ErrUnsupported)
		}
		grow(st.values, base+len(block))
		copy(st.values.Bytes()[base:], block)
	}
	def := page.DefinitionLevels()
	if page.NumNulls() == 0 || len(def) == 0 {
		for i := 0; i < present; i++ {
			offs[st.rows+i] = int32(base + int(offsets[i]-offsets[0]))
		}
		st.rows += present
		return nil
	}
	if st.valid == nil {
		// Every row valid until a page says otherwise: later pages
		// without nulls set no bit.
		st.valid = newBuf(st.mem, int(bitutil.BytesForBits(rows)))
		bitutil.SetBitsTo(st.valid.Bytes(), 0, rows, true)
	}
	j := 0
	for _, l := range def[:n] {
		offs[st.rows] = int32(base + int(offsets[j]-offsets[0]))
		if int(l) == c.maxDef {
			bitutil.SetBit(st.valid.Bytes(), st.rows)
			j++
		} else {
			bitutil.ClearBit(st.valid.Bytes(), st.rows)
			st.nulls++
		}
		st.rows++
	}
	return nil
}

func grow(b *memory.Buffer, n int) {
	if n > b.Cap() {
		c := b.Cap() * 2
		if c < n {
			c = n
		}
		b.Reserve(c)
	}
	b.ResizeNoShrink(n)
}

// finish checks counts against the footer and assembles the Arrow array.
func (st *colState) finish(rows int64) (arrow.Array, error) {
	c := st.c
	switch c.kind {
	case kindPrimitive:
		if st.nvals != int(rows) {
			return nil, fmt.Errorf("pages hold %d values, footer says %d rows: %w", st.nvals, rows, ErrCorrupt)
		}
		data := array.NewData(c.field.Type, int(rows), []*memory.Buffer{st.valid, st.values}, nil, st.nulls, 0)
		defer data.Release()
		return array.MakeFromData(data), nil
	case kindFixedList:
		if st.nvals != int(rows)*c.listSize {
			return nil, fmt.Errorf("pages hold %d values, want %d rows x %d: %w; every row of a fixed_size_list must hold exactly %d values",
				st.nvals, rows, c.listSize, ErrCorrupt, c.listSize)
		}
		child := array.NewData(c.elem, st.nvals, []*memory.Buffer{nil, st.values}, nil, 0, 0)
		defer child.Release()
		data := array.NewData(c.field.Type, int(rows), []*memory.Buffer{nil}, []arrow.ArrayData{child}, 0, 0)
		defer data.Release()
		return array.MakeFromData(data), nil
	case kindList:
		if st.rows != int(rows) {
			return nil, fmt.Errorf("pages hold %d rows, footer says %d: %w", st.rows, rows, ErrCorrupt)
		}
		offs := unsafe.Slice((*int32)(unsafe.Pointer(unsafe.SliceData(st.offsets.Bytes()))), int(rows)+1)
		offs[rows] = int32(st.nvals)
		st.values.ResizeNoShrink(elemBytes(c.elemSize, st.nvals))
		child := array.NewData(c.elem, st.nvals, []*memory.Buffer{nil, st.values}, nil, 0, 0)
		defer child.Release()
		data := array.NewData(c.field.Type, int(rows), []*memory.Buffer{nil, st.offsets}, []arrow.ArrayData{child}, 0, 0)
		defer data.Release()
		return array.MakeFromData(data), nil
	case kindBinary:
		if st.rows != int(rows) {
			return nil, fmt.Errorf("pages hold %d rows, footer says %d: %w", st.rows, rows, ErrCorrupt)
		}
		offs := unsafe.Slice((*int32)(unsafe.Pointer(unsafe.SliceData(st.offsets.Bytes()))), int(rows)+1)
		offs[rows] = int32(st.values.Len())
		data := array.NewData(c.field.Type, int(rows), []*memory.Buffer{st.valid, st.offsets, st.values}, nil, st.nulls, 0)
		defer data.Release()
		return array.MakeFromData(data), nil
	}
	return nil, errors.New("unreachable column kind")
}
