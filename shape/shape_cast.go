package shape

// Element-wise dtype casts over whole buffers: one typed loop per (source,
// target) pair, no per-element reflection or allocation.

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/bitutil"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/decimal256"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// castTarget is the output element type of a shaped column.
type castTarget struct {
	dt   arrow.DataType // the Arrow type of the output elements
	bf16 bool           // dt is uint16 carrying bfloat16 bits
}

// field returns f with the target's type.
func (t castTarget) field(f arrow.Field) arrow.Field {
	f.Type = t.dt
	return f
}

// width is the byte width of one element, 0 for types that are not
// fixed-width numbers.
func (t castTarget) width() int {
	switch t.dt.ID() {
	case arrow.INT8, arrow.UINT8:
		return 1
	case arrow.INT16, arrow.UINT16, arrow.FLOAT16:
		return 2
	case arrow.INT32, arrow.UINT32, arrow.FLOAT32:
		return 4
	case arrow.INT64, arrow.UINT64, arrow.FLOAT64:
		return 8
	}
	return 0
}

func (t castTarget) fixedWidth() bool { return t.width() > 0 }

func (t castTarget) String() string {
	if t.bf16 {
		return "bfloat16"
	}
	return t.dt.String()
}

// castTargetFor returns the output element type for source element type src
// and target d, and whether values need converting.
func castTargetFor(src arrow.DataType, d DType) (castTarget, bool, error) {
	id := src.ID()
	isInt := shapeIsInt(id)
	isFloat := id == arrow.FLOAT32 || id == arrow.FLOAT64
	same := castTarget{dt: src}
	switch d {
	case Keep:
		return same, false, nil
	case BFloat16:
		if !isFloat {
			return same, false, fmt.Errorf("bfloat16 needs float32 or float64 values, not %s", src)
		}
		return castTarget{dt: arrow.PrimitiveTypes.Uint16, bf16: true}, true, nil
	case Float16:
		if id == arrow.FLOAT16 {
			return same, false, nil
		}
		if !isFloat {
			return same, false, fmt.Errorf("float16 needs float32 or float64 values, not %s", src)
		}
		return castTarget{dt: arrow.FixedWidthTypes.Float16}, true, nil
	case Float32:
		if id == arrow.FLOAT32 {
			return same, false, nil
		}
		if !isInt && id != arrow.FLOAT64 && id != arrow.DECIMAL128 && id != arrow.DECIMAL256 {
			return same, false, fmt.Errorf("float32 needs float64, integer or decimal values, not %s", src)
		}
		if p, s, ok := decimalDigits(src); ok && p-s > 38 {
			return same, false, fmt.Errorf("%s values may exceed float32's range (%d digits before the point, float32 holds 38): ask for float64", src, p-s)
		}
		return castTarget{dt: arrow.PrimitiveTypes.Float32}, true, nil
	case Float64:
		if id == arrow.FLOAT64 {
			return same, false, nil
		}
		if id != arrow.DECIMAL128 && id != arrow.DECIMAL256 {
			return same, false, fmt.Errorf("float64 needs decimal or float64 values, not %s", src)
		}
		return castTarget{dt: arrow.PrimitiveTypes.Float64}, true, nil
	case Int32, Int16, Int8, Uint32, Uint16, Uint8:
		dt := map[DType]arrow.DataType{
			Int32: arrow.PrimitiveTypes.Int32, Int16: arrow.PrimitiveTypes.Int16, Int8: arrow.PrimitiveTypes.Int8,
			Uint32: arrow.PrimitiveTypes.Uint32, Uint16: arrow.PrimitiveTypes.Uint16, Uint8: arrow.PrimitiveTypes.Uint8,
		}[d]
		if !isInt {
			return same, false, fmt.Errorf("%s needs integer values, not %s", d, src)
		}
		if dt.ID() == id {
			return same, false, nil
		}
		return castTarget{dt: dt}, true, nil
	}
	return same, false, fmt.Errorf("unknown DType %d", uint8(d))
}

func shapeIsInt(id arrow.Type) bool {
	switch id {
	case arrow.INT8, arrow.INT16, arrow.INT32, arrow.INT64, arrow.UINT8, arrow.UINT16, arrow.UINT32, arrow.UINT64:
		return true
	}
	return false
}

// castIntRange is the range of integer type id.
func castIntRange(id arrow.Type) (lo int64, hi uint64) {
	switch id {
	case arrow.INT8:
		return math.MinInt8, math.MaxInt8
	case arrow.INT16:
		return math.MinInt16, math.MaxInt16
	case arrow.INT32:
		return math.MinInt32, math.MaxInt32
	case arrow.INT64:
		return math.MinInt64, math.MaxInt64
	case arrow.UINT8:
		return 0, math.MaxUint8
	case arrow.UINT16:
		return 0, math.MaxUint16
	case arrow.UINT32:
		return 0, math.MaxUint32
	}
	return 0, math.MaxUint64
}

// fillBytes encodes f as one element of the target type (zeros when f is
// unset), or explains why the target cannot hold it.
func (t castTarget) fillBytes(f Fill) ([]byte, error) {
	w := t.width()
	if w == 0 {
		if f.IsSet() {
			return nil, fmt.Errorf("Fill %s is not supported for %s values", f, t)
		}
		return nil, nil
	}
	b := make([]byte, w)
	if !f.IsSet() {
		return b, nil
	}
	ne := binary.NativeEndian
	bad := func() ([]byte, error) { return nil, fmt.Errorf("Fill %s does not fit %s", f, t) }
	id := t.dt.ID()
	switch {
	case shapeIsInt(id) && !t.bf16:
		lo, hi := castIntRange(id)
		if v, ok := f.asInt64(); ok && v >= lo && (v < 0 || uint64(v) <= hi) {
			shapePutUint(b, uint64(v))
			return b, nil
		}
		if v, ok := f.asUint64(); ok && v <= hi {
			shapePutUint(b, v)
			return b, nil
		}
		return bad()
	}
	v := f.asFloat64()
	finite := !math.IsInf(v, 0) && !math.IsNaN(v)
	switch {
	case id == arrow.FLOAT64:
		ne.PutUint64(b, math.Float64bits(v))
	case id == arrow.FLOAT32:
		x := float32(v)
		if finite && math.IsInf(float64(x), 0) {
			return bad()
		}
		ne.PutUint32(b, math.Float32bits(x))
	case t.bf16 || id == arrow.FLOAT16:
		x, inf := float16FromBits(float32RoundOdd(v)), uint16(0x7c00)
		if t.bf16 {
			x, inf = bfloat16FromBits(float32RoundOdd(v)), 0x7f80
		}
		if finite && x&0x7fff == inf {
			return bad()
		}
		ne.PutUint16(b, x)
	default:
		return bad()
	}
	return b, nil
}

// shapePutUint stores the low len(b) bytes of v in native byte order.
func shapePutUint(b []byte, v uint64) {
	ne := binary.NativeEndian
	switch len(b) {
	case 1:
		b[0] = byte(v)
	case 2:
		ne.PutUint16(b, uint16(v))
	case 4:
		ne.PutUint32(b, uint32(v))
	case 8:
		ne.PutUint64(b, v)
	}
}

func (f Fill) asInt64() (int64, bool) {
	switch f.kind {
	case fillInt:
		return f.i, true
	case fillUint:
		return int64(f.u), f.u <= math.MaxInt64
	case fillFloat:
		if f.f == math.Trunc(f.f) && f.f >= -(1<<63) && f.f < 1<<63 {
			return int64(f.f), true
		}
	}
	return 0, false
}

func (f Fill) asUint64() (uint64, bool) {
	switch f.kind {
	case fillInt:
		return uint64(f.i), f.i >= 0
	case fillUint:
		return f.u, true
	case fillFloat:
		if f.f == math.Trunc(f.f) && f.f >= 0 && f.f < 1<<64 {
			return uint64(f.f), true
		}
	}
	return 0, false
}

func (f Fill) asFloat64() float64 {
	switch f.kind {
	case fillInt:
		return float64(f.i)
	case fillUint:
		return float64(f.u)
	}
	return f.f
}

type shapeSigned interface {
	~int8 | ~int16 | ~int32 | ~int64
}

type shapeUnsigned interface {
	~uint8 | ~uint16 | ~uint32 | ~uint64
}

type shapeInteger interface {
	shapeSigned | shapeUnsigned
}

// castFromSigned converts in[from:] to out, stopping at the first valid value
// out of [lo, hi]; it returns that index, or -1. Out-of-range values under a
// null slot become 0.
func castFromSigned[S shapeSigned, D shapeInteger](in []S, out []D, lo int64, hi uint64, valid []byte, voff, from int) int {
	h := int64(math.MaxInt64)
	if hi < math.MaxInt64 {
		h = int64(hi)
	}
	for i := from; i < len(in); i++ {
		v := int64(in[i])
		if v < lo || v > h {
			if valid == nil || bitutil.BitIsSet(valid, voff+i) {
				return i
			}
			v = 0
		}
		out[i] = D(v)
	}
	return -1
}

// castFromUnsigned is castFromSigned for unsigned sources.
func castFromUnsigned[S shapeUnsigned, D shapeInteger](in []S, out []D, hi uint64, valid []byte, voff, from int) int {
	for i := from; i < len(in); i++ {
		v := uint64(in[i])
		if v > hi {
			if valid == nil || bitutil.BitIsSet(valid, voff+i) {
				return i
			}
			v = 0
		}
		out[i] = D(v)
	}
	return -1
}

func castIntToFloat32[S shapeInteger](in []S, out []float32) {
	for i, v := range in {
		out[i] = float32(v)
	}
}

// castKernel returns the conversion of src's values into out (a buffer of
// src.Len() target elements): a function that converts from index `from` on
// and returns the index of the first value that does not fit, or -1.
func castKernel(src arrow.ArrayData, to castTarget, out []byte) func(from int) int {
	var valid []byte
	voff := src.Offset()
	if shapeNullN(src) > 0 && src.Buffers()[0] != nil {
		valid = src.Buffers()[0].Bytes()
	}
	lo, hi := castIntRange(to.dt.ID())
	switch src.DataType().ID() {
	case arrow.FLOAT32:
		in := arrow.GetValues[float32](src, 1)
		return castFloat32Kernel(in, to, out)
	case arrow.FLOAT64:
		in := arrow.GetValues[float64](src, 1)
		return castFloat64Kernel(in, to, out)
	case arrow.INT8:
		return castSignedKernel(arrow.GetValues[int8](src, 1), to, out, lo, hi, valid, voff)
	case arrow.INT16:
		return castSignedKernel(arrow.GetValues[int16](src, 1), to, out, lo, hi, valid, voff)
	case arrow.INT32:
		return castSignedKernel(arrow.GetValues[int32](src, 1), to, out, lo, hi, valid, voff)
	case arrow.INT64:
		return castSignedKernel(arrow.GetValues[int64](src, 1), to, out, lo, hi, valid, voff)
	case arrow.UINT8:
		return castUnsignedKernel(arrow.GetValues[uint8](src, 1), to, out, hi, valid, voff)
	case arrow.UINT16:
		return castUnsignedKernel(arrow.GetValues[uint16](src, 1), to, out, hi, valid, voff)
	case arrow.UINT32:
		return castUnsignedKernel(arrow.GetValues[uint32](src, 1), to, out, hi, valid, voff)
	case arrow.UINT64:
		return castUnsignedKernel(arrow.GetValues[uint64](src, 1), to, out, hi, valid, voff)
	case arrow.DECIMAL128:
		// The scale applied: the value, rounded to the nearest float.
		in, scale := arrow.GetValues[decimal128.Num](src, 1), src.DataType().(*arrow.Decimal128Type).Scale
		return decimalKernel(in, scale, to, out, decimal128Int64, decimal128String)
	case arrow.DECIMAL256:
		in, scale := arrow.GetValues[decimal256.Num](src, 1), src.DataType().(*arrow.Decimal256Type).Scale
		return decimalKernel(in, scale, to, out, decimal256Int64, decimal256String)
	}
	return nil
}

func castFloat32Kernel(in []float32, to castTarget, out []byte) func(int) int {
	switch {
	case to.bf16:
		o := arrow.GetData[uint16](out)
		return func(int) int {
			for i, v := range in {
				o[i] = bfloat16FromBits(math.Float32bits(v))
			}
			return -1
		}
	case to.dt.ID() == arrow.FLOAT16:
		o := arrow.GetData[uint16](out)
		return func(int) int {
			for i, v := range in {
				o[i] = float16FromBits(math.Float32bits(v))
			}
			return -1
		}
	}
	return nil
}

func castFloat64Kernel(in []float64, to castTarget, out []byte) func(int) int {
	switch {
	case to.bf16:
		o := arrow.GetData[uint16](out)
		return func(int) int {
			for i, v := range in {
				o[i] = bfloat16FromBits(float32RoundOdd(v))
			}
			return -1
		}
	case to.dt.ID() == arrow.FLOAT16:
		o := arrow.GetData[uint16](out)
		return func(int) int {
			for i, v := range in {
				o[i] = float16FromBits(float32RoundOdd(v))
			}
			return -1
		}
	case to.dt.ID() == arrow.FLOAT32:
		o := arrow.GetData[float32](out)
		return func(int) int {
			for i, v := range in {
				o[i] = float32(v)
			}
			return -1
		}
	}
	return nil
}

func castSignedKernel[S shapeSigned](in []S, to castTarget, out []byte, lo int64, hi uint64, valid []byte, voff int) func(int) int {
	switch to.dt.ID() {
	case arrow.INT8:
		o := arrow.GetData[int8](out)
		return func(from int) int { return castFromSigned(in, o, lo, hi, valid, voff, from) }
	case arrow.INT16:
		o := arrow.GetData[int16](out)
		return func(from int) int { return castFromSigned(in, o, lo, hi, valid, voff, from) }
	case arrow.INT32:
		o := arrow.GetData[int32](out)
		return func(from int) int { return castFromSigned(in, o, lo, hi, valid, voff, from) }
	case arrow.UINT8:
		o := arrow.GetData[uint8](out)
		return func(from int) int { return castFromSigned(in, o, lo, hi, valid, voff, from) }
	case arrow.UINT16:
		o := arrow.GetData[uint16](out)
		return func(from int) int { return castFromSigned(in, o, lo, hi, valid, voff, from) }
	case arrow.UINT32:
		o := arrow.GetData[uint32](out)
		return func(from int) int { return castFromSigned(in, o, lo, hi, valid, voff, from) }
	case arrow.FLOAT32:
		o := arrow.GetData[float32](out)
		return func(int) int { castIntToFloat32(in, o); return -1 }
	}
	return nil
}

func castUnsignedKernel[S shapeUnsigned](in []S, to castTarget, out []byte, hi uint64, valid []byte, voff int) func(int) int {
	switch to.dt.ID() {
	case arrow.INT8:
		o := arrow.GetData[int8](out)
		return func(from int) int { return castFromUnsigned(in, o, hi, valid, voff, from) }
	case arrow.INT16:
		o := arrow.GetData[int16](out)
		return func(from int) int { return castFromUnsigned(in, o, hi, valid, voff, from) }
	case arrow.INT32:
		o := arrow.GetData[int32](out)
		return func(from int) int { return castFromUnsigned(in, o, hi, valid, voff, from) }
	case arrow.UINT8:
		o := arrow.GetData[uint8](out)
		return func(from int) int { return castFromUnsigned(in, o, hi, valid, voff, from) }
	case arrow.UINT16:
		o := arrow.GetData[uint16](out)
		return func(from int) int { return castFromUnsigned(in, o, hi, valid, voff, from) }
	case arrow.UINT32:
		o := arrow.GetData[uint32](out)
		return func(from int) int { return castFromUnsigned(in, o, hi, valid, voff, from) }
	case arrow.FLOAT32:
		o := arrow.GetData[float32](out)
		return func(int) int { castIntToFloat32(in, o); return -1 }
	}
	return nil
}

// shapeBuffer allocates a buffer of n bytes from mem. Its contents are
// undefined: callers write every byte.
func shapeBuffer(mem memory.Allocator, n int) *memory.Buffer {
	b := memory.NewResizableBuffer(mem)
	b.Resize(n)
	return b
}

// shapeNullN returns the null count of d, counting the validity bits when d
// does not know it (slices).
func shapeNullN(d arrow.ArrayData) int {
	if n := d.NullN(); n >= 0 {
		return n
	}
	if d.Buffers()[0] == nil {
		return 0
	}
	return d.Len() - bitutil.CountSetBits(d.Buffers()[0].Bytes(), d.Offset(), d.Len())
}

// shapeValidity returns a copy of src's validity bitmap starting at bit 0, or
// nil when src has no nulls.
func shapeValidity(src arrow.ArrayData, mem memory.Allocator) *memory.Buffer {
	if shapeNullN(src) == 0 || src.Buffers()[0] == nil {
		return nil
	}
	n := src.Len()
	bm := shapeBuffer(mem, int(bitutil.BytesForBits(int64(n))))
	clear(bm.Bytes())
	bitutil.CopyBitmap(src.Buffers()[0].Bytes(), src.Offset(), n, bm.Bytes(), 0)
	return bm
}

// shapeNewData builds array data that takes over the given buffer and child
// references (they are released here; the data holds its own).
func shapeNewData(dt arrow.DataType, n int, bufs []*memory.Buffer, children []arrow.ArrayData, nulls int) arrow.ArrayData {
	d := array.NewData(dt, n, bufs, children, nulls, 0)
	for _, b := range bufs {
		if b != nil {
			b.Release()
		}
	}
	for _, c := range children {
		c.Release()
	}
	return d
}

// shapeMakeArray turns data into an array and drops the data reference.
func shapeMakeArray(d arrow.ArrayData) arrow.Array {
	defer d.Release()
	return array.MakeFromData(d)
}

// castData casts src's values to `to`. On a value that does not fit, it
// returns that value's index (and no data) unless skip(index) says the slot
// is to be ignored (a value under a null parent), in which case it becomes 0.
func castData(src arrow.ArrayData, to castTarget, mem memory.Allocator, skip func(int) bool) (arrow.ArrayData, int) {
	n := src.Len()
	vb := shapeBuffer(mem, n*to.width())
	kernel := castKernel(src, to, vb.Bytes())
	if kernel == nil { // unreachable: castTargetFor admits only pairs with a kernel
		vb.Release()
		return nil, -2
	}
	for from := 0; ; {
		bad := kernel(from)
		if bad < 0 {
			break
		}
		if skip == nil || !skip(bad) {
			vb.Release()
			return nil, bad
		}
		clear(vb.Bytes()[bad*to.width() : (bad+1)*to.width()])
		from = bad + 1
	}
	bm := shapeValidity(src, mem)
	nulls := 0
	if bm != nil {
		nulls = shapeNullN(src)
	}
	return shapeNewData(to.dt, n, []*memory.Buffer{bm, vb}, nil, nulls), -1
}

// castFault describes the value at index i of src that does not fit `to`.
func castFault(name string, src arrow.ArrayData, to castTarget, bad int, where string) error {
	if bad == -2 {
		return fmt.Errorf("shape: column %q: no cast from %s to %s: %w", name, src.DataType(), to, ErrShape)
	}
	a := array.MakeFromData(src)
	defer a.Release()
	lo, hi := castIntRange(to.dt.ID())
	return fmt.Errorf("shape: column %q %s: value %s does not fit %s [%d, %d]: %w", name, where, a.ValueStr(bad), to, lo, hi, ErrOverflow)
}

// castArray casts a primitive column.
func castArray(name string, arr arrow.Array, to castTarget, mem memory.Allocator) (arrow.Array, error) {
	src := arr.Data()
	d, bad := castData(src, to, mem, nil)
	if bad != -1 {
		return nil, rowError(name, bad, castFault(name, src, to, bad, fmt.Sprintf("row %d", bad)))
	}
	return shapeMakeArray(d), nil
}
