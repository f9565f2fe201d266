package filter

import (
	"bytes"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
)

// Evaluation of a term on a decoded column: typed loops over the array's
// values (one loop per column type and op, no call per row), then its
// validity bitmap (a null row takes nullMatches); a dictionary array's
// dictionary is evaluated once and its indices gathered. The meaning is
// match's, row for row (eval_test.go holds the two to each other on random
// arrays of every type).

type signedInt interface {
	~int8 | ~int16 | ~int32 | ~int64
}

type unsignedInt interface {
	~uint8 | ~uint16 | ~uint32 | ~uint64
}

type floating interface{ ~float32 | ~float64 }

type number interface {
	signedInt | unsignedInt | floating
}

// eval sets out[i] to whether row i of arr matches.
func (m *ordMatcher[T]) eval(arr arrow.Array, out []bool) error {
	if len(out) == 0 {
		return nil
	}
	if d, ok := arr.(*array.Dictionary); ok {
		if err := m.evalDict(d, out); err != nil {
			return err
		}
	} else if !m.evalValues(arr, out) {
		return fmt.Errorf("column %q: %s is not a type this filter reads", m.col, arr.DataType())
	}
	if arr.NullN() > 0 {
		applyNulls(arr, m.nullMatches(), out)
	}
	return nil
}

// evalDict evaluates d's dictionary once (its null values taking
// nullMatches) and gathers the result by d's indices; a null index is left
// to the caller.
func (m *ordMatcher[T]) evalDict(d *array.Dictionary, out []bool) error {
	dict := d.Dictionary()
	dm := make([]bool, dict.Len())
	if err := m.eval(dict, dm); err != nil {
		return err
	}
	switch ix := d.Indices().(type) {
	case *array.Int8:
		gather(ix.Int8Values(), dm, out)
	case *array.Int16:
		gather(ix.Int16Values(), dm, out)
	case *array.Int32:
		gather(ix.Int32Values(), dm, out)
	case *array.Int64:
		gather(ix.Int64Values(), dm, out)
	case *array.Uint8:
		gather(ix.Uint8Values(), dm, out)
	case *array.Uint16:
		gather(ix.Uint16Values(), dm, out)
	case *array.Uint32:
		gather(ix.Uint32Values(), dm, out)
	case *array.Uint64:
		gather(ix.Uint64Values(), dm, out)
	default:
		return fmt.Errorf("column %q: dictionary indices of type %s are not read", m.col, d.Indices().DataType())
	}
	return nil
}

// gather sets out[i] = dm[idx[i]]; an index outside dm (a null slot's
// undefined value) gives false.
func gather[I signedInt | unsignedInt](idx []I, dm, out []bool) {
	n := uint64(len(dm))
	for i, x := range idx[:len(out)] {
		if j := uint64(x); j < n {
			out[i] = dm[j]
		} else {
			out[i] = false
		}
	}
}

// applyNulls sets out[i] = nm for every null row of arr.
func applyNulls(arr arrow.Array, nm bool, out []bool) {
	bm := arr.NullBitmapBytes()
	if len(bm) == 0 {
		return
	}
	off := arr.Data().Offset()
	for i := range out {
		k := off + i
		if bm[k>>3]&(1<<(k&7)) == 0 {
			out[i] = nm
		}
	}
}

// evalValues sets out from arr's values, nulls aside; false when arr is not
// a type m reads.
func (m *ordMatcher[T]) evalValues(arr arrow.Array, out []bool) bool {
	if m.set == nil && m.konst >= 0 {
		if _, ok := m.get(arr); !ok {
			return false
		}
		fill(out, m.konst == 1)
		return true
	}
	switch mm := any(m).(type) {
	case *ordMatcher[int64]:
		return evalSigned(mm, arr, out)
	case *ordMatcher[uint64]:
		return evalUnsigned(mm, arr, out)
	case *ordMatcher[float64]:
		return evalFloat(mm, arr, out)
	case *ordMatcher[string]:
		return evalString(mm, arr, out)
	case *ordMatcher[decimal128.Num]:
		return evalDecimal(mm, arr, out)
	}
	return false
}

func fill(out []bool, v bool) {
	for i := range out {
		out[i] = v
	}
}

// evalSigned evaluates signed ints, dates, timestamps and bools.
func evalSigned(m *ordMatcher[int64], arr arrow.Array, out []bool) bool {
	switch a := arr.(type) {
	case *array.Int8:
		intTerm(a.Int8Values(), m, out)
	case *array.Int16:
		intTerm(a.Int16Values(), m, out)
	case *array.Int32:
		intTerm(a.Int32Values(), m, out)
	case *array.Int64:
		intTerm(a.Int64Values(), m, out)
	case *array.Date32:
		intTerm(a.Date32Values(), m, out)
	case *array.Date64:
		intTerm(a.Date64Values(), m, out)
	case *array.Timestamp:
		intTerm(a.TimestampValues(), m, out)
	case *array.Boolean:
		// Two values: match each once.
		f, t := m.match(0), m.match(1)
		for i := range out {
			out[i] = f
			if a.Value(i) {
				out[i] = t
			}
		}
	default:
		return false
	}
	return true
}

// intTerm is m on integer-like values (the constant in the column's units,
// within its range: Bind made it so).
func intTerm[S signedInt](vals []S, m *ordMatcher[int64], out []bool) {
	if m.set != nil {
		neg := m.op == NotIn
		for i, v := range vals[:len(out)] {
			_, ok := m.set[int64(v)]
			out[i] = ok != neg
		}
		return
	}
	compare(vals, m.c, m.op, out)
}

// evalUnsigned evaluates unsigned ints.
func evalUnsigned(m *ordMatcher[uint64], arr arrow.Array, out []bool) bool {
	switch a := arr.(type) {
	case *array.Uint8:
		uintTerm(a.Uint8Values(), m, out)
	case *array.Uint16:
		uintTerm(a.Uint16Values(), m, out)
	case *array.Uint32:
		uintTerm(a.Uint32Values(), m, out)
	case *array.Uint64:
		uintTerm(a.Uint64Values(), m, out)
	default:
		return false
	}
	return true
}

func uintTerm[S unsignedInt](vals []S, m *ordMatcher[uint64], out []bool) {
	if m.set != nil {
		neg := m.op == NotIn
		for i, v := range vals[:len(out)] {
			_, ok := m.set[uint64(v)]
			out[i] = ok != neg
		}
		return
	}
	compare(vals, m.c, m.op, out)
}

// evalFloat evaluates floats: Go's comparisons are pyarrow's (NaN compares
// false, != true); a set matches NaN when it holds NaN.
func evalFloat(m *ordMatcher[float64], arr arrow.Array, out []bool) bool {
	switch a := arr.(type) {
	case *array.Float32:
		floatTerm(a.Float32Values(), m, out)
	case *array.Float64:
		floatTerm(a.Float64Values(), m, out)
	default:
		return false
	}
	return true
}

func floatTerm[S floating](vals []S, m *ordMatcher[float64], out []bool) {
	if m.set != nil {
		neg := m.op == NotIn
		for i, v := range vals[:len(out)] {
			x := float64(v)
			ok := m.setNaN
			if x == x {
				_, ok = m.set[x]
			}
			out[i] = ok != neg
		}
		return
	}
	compare(vals, m.c, m.op, out)
}

// compare sets out[i] to vals[i] op c, each value converted to c's type.
//
// Length: one loop per op, so that each is a plain loop.
func compare[S number, T int64 | uint64 | float64](vals []S, c T, op Op, out []bool) {
	vals = vals[:len(out)]
	switch op {
	case Eq:
		for i, v := range vals {
			out[i] = T(v) == c
		}
	case Ne:
		for i, v := range vals {
			out[i] = T(v) != c
		}
	case Lt:
		for i, v := range vals {
			out[i] = T(v) < c
		}
	case Le:
		for i, v := range vals {
			out[i] = T(v) <= c
		}
	case Gt:
		for i, v := range vals {
			out[i] = T(v) > c
		}
	default:
		for i, v := range vals {
			out[i] = T(v) >= c
		}
	}
}

// orderTable is op as a table of the three results of a three-way
// comparison of a value with the constant (-1, 0, 1 at indices 0, 1, 2).
func orderTable(op Op) [3]bool {
	switch op {
	case Eq:
		return [3]bool{false, true, false}
	case Ne:
		return [3]bool{true, false, true}
	case Lt:
		return [3]bool{true, false, false}
	case Le:
		return [3]bool{true, true, false}
	case Gt:
		return [3]bool{false, false, true}
	}
	return [3]bool{false, true, true}
}

// evalString evaluates strings and binaries, from their offsets and data
// without a string per row.
func evalString(m *ordMatcher[string], arr arrow.Array, out []bool) bool {
	switch a := arr.(type) {
	case *array.String:
		stringTerm(a.ValueOffsets(), bufferBytes(a, 2), m, out)
	case *array.LargeString:
		stringTerm(a.ValueOffsets(), bufferBytes(a, 2), m, out)
	case *array.Binary:
		stringTerm(a.ValueOffsets(), bufferBytes(a, 2), m, out)
	case *array.LargeBinary:
		stringTerm(a.ValueOffsets(), bufferBytes(a, 2), m, out)
	case *array.FixedSizeBinary:
		w := a.DataType().(*arrow.FixedSizeBinaryType).ByteWidth
		offs := make([]int64, len(out)+1)
		for i := range offs {
			offs[i] = int64((a.Data().Offset() + i) * w)
		}
		stringTerm(offs, bufferBytes(a, 1), m, out)
	default:
		return false
	}
	return true
}

// bufferBytes is buffer i of arr (nil when absent).
func bufferBytes(arr arrow.Array, i int) []byte {
	bufs := arr.Data().Buffers()
	if i >= len(bufs) || bufs[i] == nil {
		return nil
	}
	return bufs[i].Bytes()
}

// stringTerm is m on rows data[offs[i]:offs[i+1]].
func stringTerm[O int32 | int64](offs []O, data []byte, m *ordMatcher[string], out []bool) {
	if m.set != nil {
		neg := m.op == NotIn
		for i := range out {
			_, ok := m.set[string(data[offs[i]:offs[i+1]])] // no allocation: a map index by a converted []byte
			out[i] = ok != neg
		}
		return
	}
	c := []byte(m.c)
	if m.op == Eq || m.op == Ne {
		ne := m.op == Ne
		for i := range out {
			out[i] = bytes.Equal(data[offs[i]:offs[i+1]], c) != ne
		}
		return
	}
	tbl := orderTable(m.op)
	for i := range out {
		out[i] = tbl[bytes.Compare(data[offs[i]:offs[i+1]], c)+1]
	}
}

// evalDecimal evaluates decimal128 values (unscaled, in the column's
// scale).
func evalDecimal(m *ordMatcher[decimal128.Num], arr arrow.Array, out []bool) bool {
	a, ok := arr.(*array.Decimal128)
	if !ok {
		return false
	}
	vals := a.Values()[:len(out)]
	if m.set != nil {
		neg := m.op == NotIn
		for i, v := range vals {
			_, ok := m.set[v]
			out[i] = ok != neg
		}
		return true
	}
	tbl := orderTable(m.op)
	for i, v := range vals {
		out[i] = tbl[v.Cmp(m.c)+1]
	}
	return true
}
