package filter

import (
	"cmp"
	"fmt"
	"math"
	"math/big"
	"slices"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
)

// Verdict is what a row group's statistics say of a predicate.
type Verdict int

const (
	// Some rows may match: the row group's filter columns must be read.
	Some Verdict = iota
	// None of the rows matches: the row group is never read.
	None
	// All rows match: the row group is read whole, without its filter
	// columns evaluated.
	All
)

// ColumnStats is what a row group's footer says of one column.
type ColumnStats struct {
	// Rows in the row group.
	Rows int64
	// Nulls is the null count when NullsKnown.
	Nulls      int64
	NullsKnown bool
	// MinMax is nil when the footer records no usable bounds, else an
	// array of two values of the column's type (a dictionary column's value
	// type): a lower and an upper bound of its non-null values (NaN
	// excluded).
	MinMax arrow.Array
	// Dict is nil, or every distinct non-null value of the column in the
	// row group (a dictionary-encoded chunk's dictionary), of the column's
	// (value) type; it may hold values no row has.
	Dict arrow.Array
	// Bloom is nil, or the column chunk's bloom filter: MayContain(v) false
	// says no row holds v (v the Go value a term compares: string, int64,
	// uint64, float64 or decimal128.Num; an implementation answers true for
	// kinds it does not check).
	Bloom interface{ MayContain(v any) bool }
}

// matcher is one term compiled for one column type.
type matcher interface {
	column() string
	operator() Op
	// eval sets out[i] to whether row i of arr matches.
	eval(arr arrow.Array, out []bool) error
	prune(st ColumnStats) Verdict
}

// Bound is a Predicate compiled against a schema. It is immutable and safe
// for concurrent use.
type Bound struct {
	pred *Predicate
	any  [][]matcher
}

// DictColumns returns the columns of the terms a dictionary can decide
// (==, !=, in, not in): where statistics leave a row group undecided, the
// caller may read those columns' dictionaries (ColumnStats.Dict) and ask
// Prune again.
func (b *Bound) DictColumns() []string {
	var out []string
	for _, c := range b.any {
		for _, m := range c {
			if op := m.operator(); (op == Eq || op == Ne || op == In || op == NotIn) && !slices.Contains(out, m.column()) {
				out = append(out, m.column())
			}
		}
	}
	return out
}

// Predicate returns the predicate b was bound from.
func (b *Bound) Predicate() *Predicate { return b.pred }

// Bind checks p against schema and compiles it: every column must exist,
// have a type the filter reads, and each value a kind its type compares
// with (docs/PROTOCOL.md, "Filters"). Every problem is reported at once, in
// one error wrapping ErrInvalid; the caller adds the file.
func Bind(p *Predicate, schema *arrow.Schema) (*Bound, error) {
	b := &Bound{pred: p}
	var problems []string
	for _, conj := range p.Any {
		var ms []matcher
		for _, t := range conj {
			idx := schema.FieldIndices(t.Column)
			if len(idx) == 0 {
				names := make([]string, schema.NumFields())
				for i, f := range schema.Fields() {
					names[i] = f.Name
				}
				problems = append(problems, fmt.Sprintf("column %q not found (columns: %s)", t.Column, strings.Join(names, ", ")))
				continue
			}
			m, err := compile(t, schema.Field(idx[0]).Type)
			if err != nil {
				problems = append(problems, fmt.Sprintf("column %q (%s): %v", t.Column, schema.Field(idx[0]).Type, err))
				continue
			}
			ms = append(ms, m)
		}
		b.any = append(b.any, ms)
	}
	switch len(problems) {
	case 0:
		return b, nil
	case 1:
		return nil, fmt.Errorf("filter: %w: %s", ErrInvalid, problems[0])
	default:
		return nil, fmt.Errorf("filter: %w: %d problems: %s", ErrInvalid, len(problems), strings.Join(problems, "; "))
	}
}

// compile builds the matcher of t over a column of type dt.
//
// Length: one case per domain (integer-like, unsigned, float, string).
func compile(t Term, dt arrow.DataType) (matcher, error) {
	if d, ok := dt.(*arrow.DictionaryType); ok {
		dt = d.ValueType
	}
	vals := []Value{t.Value}
	if t.Op == In || t.Op == NotIn {
		vals = t.Set
	}
	m := ordMatcher[int64]{col: t.Column, op: t.Op, konst: -1}
	switch dt.ID() {
	case arrow.FLOAT32, arrow.FLOAT64:
		fm := ordMatcher[float64]{col: t.Column, op: t.Op, konst: -1, cmp: cmp.Compare[float64], get: float64Of, nan: math.IsNaN}
		err := setup(&fm, vals, func(v Value) (float64, bool, error) {
			switch v.Kind {
			case Float:
				return v.F, true, nil
			case Int:
				f, _ := v.Rat.Float64()
				return f, true, nil
			}
			return 0, false, kindError(v, "an int or a float")
		})
		if err == nil && t.Op != In && t.Op != NotIn && math.IsNaN(fm.c) {
			fm.konst = b2i(t.Op == Ne)
		}
		return &fm, err
	case arrow.STRING, arrow.LARGE_STRING, arrow.BINARY, arrow.LARGE_BINARY, arrow.FIXED_SIZE_BINARY:
		text := dt.ID() == arrow.STRING || dt.ID() == arrow.LARGE_STRING
		sm := ordMatcher[string]{col: t.Column, op: t.Op, konst: -1, cmp: strings.Compare, get: stringOf}
		err := setup(&sm, vals, func(v Value) (string, bool, error) {
			if v.Kind == String || (v.Kind == Bytes && !text) {
				return v.S, true, nil
			}
			if text {
				return "", false, kindError(v, "a string")
			}
			return "", false, kindError(v, "bytes or a string")
		})
		return &sm, err
	}
	d, signed, ok := intDomainOf(dt)
	if !ok {
		return nil, fmt.Errorf("filters on %s columns are not supported (ints, floats, bools, strings, binaries, dates, timestamps, decimal128)", dt)
	}
	if dt.ID() == arrow.DECIMAL128 {
		dm := ordMatcher[decimal128.Num]{col: t.Column, op: t.Op, konst: -1, cmp: cmpDecimal, get: decimalOf}
		return &dm, setupInt(&dm, d, vals, func(c *big.Int) decimal128.Num { return decimal128.FromBigInt(c) })
	}
	if !signed {
		um := ordMatcher[uint64]{col: t.Column, op: t.Op, konst: -1, cmp: cmp.Compare[uint64], get: uint64Of}
		return &um, setupInt(&um, d, vals, func(c *big.Int) uint64 { return c.Uint64() })
	}
	m.cmp, m.get = cmp.Compare[int64], int64Of
	return &m, setupInt(&m, d, vals, func(c *big.Int) int64 { return c.Int64() })
}

// kindError says that v's kind is not one the column takes.
func kindError(v Value, want string) error {
	article := "a"
	if v.Kind == Int {
		article = "an"
	}
	return fmt.Errorf("value %s is %s %s, want %s", v, article, v.Kind, want)
}

// wantOf names the kinds an integer-like domain takes.
func wantOf(d *intDomain) string {
	switch {
	case d.isBool:
		return "a bool"
	case d.perSecond != nil && d.tz:
		return "a timestamp with an offset ({\"timestamp\": \"...Z\"}: the column has a time zone)"
	case d.perSecond != nil:
		return "a date or a naive timestamp ({\"date\": ...} or {\"timestamp\": ...} without an offset)"
	case d.scale != nil && d.lo == bigMinI128:
		return "an int, a float or a decimal"
	}
	return "an int or a float"
}

// setup fills m's constant or set from vals with conv (floats, strings).
func setup[T comparable](m *ordMatcher[T], vals []Value, conv func(Value) (T, bool, error)) error {
	if m.op == In || m.op == NotIn {
		m.set = make(map[T]struct{}, len(vals))
	}
	for _, v := range vals {
		if v.Kind == Null {
			if m.set != nil {
				m.setNull = true
			} else {
				m.konst = 0 // a comparison with null is null: no row
			}
			continue
		}
		c, _, err := conv(v)
		if err != nil {
			return err
		}
		switch {
		case m.set == nil:
			m.c = c
		case m.nan != nil && m.nan(c):
			m.setNaN = true
		default:
			m.set[c] = struct{}{}
		}
	}
	return nil
}

// setupInt fills m's constant or set for an integer-like domain d.
func setupInt[T comparable](m *ordMatcher[T], d *intDomain, vals []Value, of func(*big.Int) T) error {
	if m.op == In || m.op == NotIn {
		m.set = make(map[T]struct{}, len(vals))
	}
	for _, v := range vals {
		if v.Kind == Null {
			if m.set != nil {
				m.setNull = true
			} else {
				m.konst = 0
			}
			continue
		}
		r, ok := d.toUnits(v)
		if !ok {
			return kindError(v, wantOf(d))
		}
		if m.set != nil {
			if c, ok := d.setMember(r); ok {
				m.set[of(c)] = struct{}{}
			}
			continue
		}
		op, c, konst := d.intConst(m.op, r, infOf(v))
		m.op, m.konst = op, konst
		if c != nil {
			m.c = of(c)
		}
	}
	return nil
}
