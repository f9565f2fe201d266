package filter

import (
	"fmt"
	"math"
	"math/big"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
)

// A column's domain: how its values are read as one Go type, and what
// filter values it compares with. Integer-like columns (ints, dates,
// timestamps, bools, decimals) compare exactly: a value is converted to the
// column's units as a rational, and a comparison with a value between two
// units becomes one with the unit below or above it (x < 2.5 is x <= 2).

// getter reads row i of an array as T.
type getter[T any] func(i int) T

// getterOf returns the getter of arr, through a dictionary's indices when
// arr is dictionary-encoded.
func getterOf[T any](arr arrow.Array, inner func(arrow.Array) (getter[T], bool)) (getter[T], error) {
	if d, ok := arr.(*array.Dictionary); ok {
		g, ok := inner(d.Dictionary())
		if !ok {
			return nil, fmt.Errorf("dictionary of %s is not a type this filter reads", d.Dictionary().DataType())
		}
		return func(i int) T { return g(d.GetValueIndex(i)) }, nil
	}
	g, ok := inner(arr)
	if !ok {
		return nil, fmt.Errorf("%s is not a type this filter reads", arr.DataType())
	}
	return g, nil
}

// int64Of reads signed ints, dates, timestamps and bools as int64.
func int64Of(arr arrow.Array) (getter[int64], bool) {
	switch a := arr.(type) {
	case *array.Int8:
		return func(i int) int64 { return int64(a.Value(i)) }, true
	case *array.Int16:
		return func(i int) int64 { return int64(a.Value(i)) }, true
	case *array.Int32:
		return func(i int) int64 { return int64(a.Value(i)) }, true
	case *array.Int64:
		return func(i int) int64 { return a.Value(i) }, true
	case *array.Date32:
		return func(i int) int64 { return int64(a.Value(i)) }, true
	case *array.Date64:
		return func(i int) int64 { return int64(a.Value(i)) }, true
	case *array.Timestamp:
		return func(i int) int64 { return int64(a.Value(i)) }, true
	case *array.Boolean:
		return func(i int) int64 {
			if a.Value(i) {
				return 1
			}
			return 0
		}, true
	}
	return nil, false
}

// uint64Of reads unsigned ints.
func uint64Of(arr arrow.Array) (getter[uint64], bool) {
	switch a := arr.(type) {
	case *array.Uint8:
		return func(i int) uint64 { return uint64(a.Value(i)) }, true
	case *array.Uint16:
		return func(i int) uint64 { return uint64(a.Value(i)) }, true
	case *array.Uint32:
		return func(i int) uint64 { return uint64(a.Value(i)) }, true
	case *array.Uint64:
		return func(i int) uint64 { return a.Value(i) }, true
	}
	return nil, false
}

// float64Of reads floats.
func float64Of(arr arrow.Array) (getter[float64], bool) {
	switch a := arr.(type) {
	case *array.Float32:
		return func(i int) float64 { return float64(a.Value(i)) }, true
	case *array.Float64:
		return func(i int) float64 { return a.Value(i) }, true
	}
	return nil, false
}

// decimalOf reads decimal128 values (unscaled).
func decimalOf(arr arrow.Array) (getter[decimal128.Num], bool) {
	if a, ok := arr.(*array.Decimal128); ok {
		return func(i int) decimal128.Num { return a.Value(i) }, true
	}
	return nil, false
}

// stringOf reads strings and binaries as Go strings.
func stringOf(arr arrow.Array) (getter[string], bool) {
	switch a := arr.(type) {
	case *array.String:
		return func(i int) string { return a.Value(i) }, true
	case *array.LargeString:
		return func(i int) string { return a.Value(i) }, true
	case *array.Binary:
		return func(i int) string { return a.ValueString(i) }, true
	case *array.LargeBinary:
		return func(i int) string { return a.ValueString(i) }, true
	case *array.FixedSizeBinary:
		return func(i int) string { return string(a.Value(i)) }, true
	}
	return nil, false
}

// intDomain describes an integer-like column: the range of its Go values
// and how many of its units make a value's unit.
type intDomain struct {
	lo, hi *big.Int
	// perSecond converts a Timestamp value (seconds) to column units; 0:
	// the column takes no timestamps.
	perSecond *big.Rat
	// perDay converts a Date value (days); 0: the column takes no dates.
	perDay *big.Rat
	// scale multiplies Int, Float and Decimal values; nil: the column takes
	// none.
	scale *big.Rat
	// bool: the column takes Bool values (as 0 and 1) only.
	isBool bool
	// tz: a timestamp column with a time zone (takes only values with an
	// offset); naive timestamp columns take only naive values.
	tz bool
}

var (
	bigMinInt64  = big.NewInt(math.MinInt64)
	bigMaxInt64  = big.NewInt(math.MaxInt64)
	bigMaxUint64 = new(big.Int).SetUint64(math.MaxUint64)
	bigMinI128   = new(big.Int).Neg(new(big.Int).Lsh(big.NewInt(1), 127))
	bigMaxI128   = new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 127), big.NewInt(1))
	ratOne       = big.NewRat(1, 1)
)

// unitsPerSecond is a timestamp unit's count in a second.
func unitsPerSecond(u arrow.TimeUnit) int64 {
	switch u {
	case arrow.Second:
		return 1
	case arrow.Millisecond:
		return 1e3
	case arrow.Microsecond:
		return 1e6
	}
	return 1e9
}

// toUnits converts v to the column's units, or reports that the column does
// not take v's kind (ok false).
func (d *intDomain) toUnits(v Value) (*big.Rat, bool) {
	var f *big.Rat
	switch v.Kind {
	case Bool:
		if !d.isBool {
			return nil, false
		}
		if v.B {
			return big.NewRat(1, 1), true
		}
		return new(big.Rat), true
	case Int, Decimal:
		f = d.scale
	case Float:
		f = d.scale
		if f != nil && v.Rat == nil { // NaN and infinities: callers decide
			return nil, true
		}
	case Timestamp:
		if d.perSecond == nil || v.TZ != d.tz {
			return nil, false
		}
		f = d.perSecond
	case Date:
		if d.perDay == nil || d.tz {
			return nil, false
		}
		f = d.perDay
	}
	if f == nil {
		return nil, false
	}
	return new(big.Rat).Mul(v.Rat, f), true
}

// intConst turns op against the rational r (in column units, nil for an
// infinity of sign inf or NaN when inf is 0) into op' against an integer c
// of the domain, or into a constant result konst (0 or 1) for every
// non-null row; konst is -1 when a comparison remains.
func (d *intDomain) intConst(op Op, r *big.Rat, inf int) (Op, *big.Int, int8) {
	if r == nil && inf == 0 { // NaN: pyarrow compares false, != true
		if op == Ne {
			return op, nil, 1
		}
		return op, nil, 0
	}
	var c *big.Int
	switch {
	case r == nil:
	case r.IsInt():
		c = new(big.Int).Set(r.Num())
	default:
		switch op {
		case Eq:
			return op, nil, 0
		case Ne:
			return op, nil, 1
		case Lt, Le:
			op, c = Le, floorRat(r)
		default:
			op, c = Ge, new(big.Int).Add(floorRat(r), big.NewInt(1))
		}
	}
	below := (c == nil && inf < 0) || (c != nil && c.Cmp(d.lo) < 0)
	above := (c == nil && inf > 0) || (c != nil && c.Cmp(d.hi) > 0)
	if below || above {
		switch op {
		case Eq:
			return op, nil, 0
		case Ne:
			return op, nil, 1
		case Lt, Le:
			return op, nil, b2i(above)
		default:
			return op, nil, b2i(below)
		}
	}
	return op, c, -1
}

func floorRat(r *big.Rat) *big.Int {
	q := new(big.Int)
	m := new(big.Int)
	q.DivMod(r.Num(), r.Denom(), m) // Euclidean: floor for a positive denominator
	return q
}

func b2i(b bool) int8 {
	if b {
		return 1
	}
	return 0
}

// setMember converts a set value to the domain: the integer, or ok false
// when no row can equal it (not an integer in column units, out of range,
// NaN, an infinity).
func (d *intDomain) setMember(r *big.Rat) (*big.Int, bool) {
	if r == nil || !r.IsInt() {
		return nil, false
	}
	c := r.Num()
	if c.Cmp(d.lo) < 0 || c.Cmp(d.hi) > 0 {
		return nil, false
	}
	return c, true
}

// infOf is the sign of v's infinity (Float values), 0 otherwise.
func infOf(v Value) int {
	if v.Kind == Float && math.IsInf(v.F, 0) {
		if v.F > 0 {
			return 1
		}
		return -1
	}
	return 0
}

// intDomainOf returns the domain of an integer-like type; ok false for
// other types.
func intDomainOf(t arrow.DataType) (d *intDomain, signed bool, ok bool) {
	d = &intDomain{lo: bigMinInt64, hi: bigMaxInt64}
	switch t := t.(type) {
	case *arrow.Int8Type:
		d.lo, d.hi, d.scale = big.NewInt(math.MinInt8), big.NewInt(math.MaxInt8), ratOne
	case *arrow.Int16Type:
		d.lo, d.hi, d.scale = big.NewInt(math.MinInt16), big.NewInt(math.MaxInt16), ratOne
	case *arrow.Int32Type:
		d.lo, d.hi, d.scale = big.NewInt(math.MinInt32), big.NewInt(math.MaxInt32), ratOne
	case *arrow.Int64Type:
		d.scale = ratOne
	case *arrow.Uint8Type:
		d.lo, d.hi, d.scale = new(big.Int), big.NewInt(math.MaxUint8), ratOne
		return d, false, true
	case *arrow.Uint16Type:
		d.lo, d.hi, d.scale = new(big.Int), big.NewInt(math.MaxUint16), ratOne
		return d, false, true
	case *arrow.Uint32Type:
		d.lo, d.hi, d.scale = new(big.Int), big.NewInt(math.MaxUint32), ratOne
		return d, false, true
	case *arrow.Uint64Type:
		d.lo, d.hi, d.scale = new(big.Int), bigMaxUint64, ratOne
		return d, false, true
	case *arrow.BooleanType:
		d.lo, d.hi, d.isBool = new(big.Int), big.NewInt(1), true
	case *arrow.Date32Type:
		d.lo, d.hi = big.NewInt(math.MinInt32), big.NewInt(math.MaxInt32)
		d.perDay, d.perSecond = ratOne, big.NewRat(1, 86400)
	case *arrow.Date64Type:
		d.perDay, d.perSecond = big.NewRat(86400000, 1), big.NewRat(1000, 1)
	case *arrow.TimestampType:
		u := unitsPerSecond(t.Unit)
		d.perSecond, d.perDay, d.tz = big.NewRat(u, 1), big.NewRat(u*86400, 1), t.TimeZone != ""
	case *arrow.Decimal128Type:
		d.lo, d.hi = bigMinI128, bigMaxI128
		d.scale = new(big.Rat).SetInt(new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(t.Scale)), nil))
	default:
		return nil, false, false
	}
	return d, true, true
}

// cmpDecimal orders two decimal128 values.
func cmpDecimal(a, b decimal128.Num) int { return a.Cmp(b) }
