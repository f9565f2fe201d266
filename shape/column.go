package shape

import (
	"errors"
	"fmt"
	"math"
	"strings"
)

// DType is the target element dtype of a shaped column.
type DType uint8

const (
	// Keep leaves the element dtype as it is.
	Keep DType = iota
	// BFloat16 rounds float32/float64 to bfloat16 (round to nearest even, NaN
	// stays a quiet NaN). Arrow has no bfloat16 type: the column carries the
	// uint16 bits and the field metadata {DTypeMetadataKey: "bfloat16"}.
	BFloat16
	// Float16 rounds float32/float64 to Arrow's float16 (round to nearest even).
	Float16
	// Float32 rounds float64, converts any integer, or converts a decimal
	// (its scale applied, to the nearest float32: a decimal of more than 6
	// significant digits may not survive exactly) to float32. A decimal
	// whose values may exceed float32's range (more than 38 digits before
	// the point) is refused: ask for Float64.
	Float32
	// Int32 narrows any integer to int32; values out of range are ErrOverflow.
	Int32
	// Int16 narrows any integer to int16; values out of range are ErrOverflow.
	Int16
	// Int8 narrows any integer to int8; values out of range are ErrOverflow.
	Int8
	// Uint32 narrows any integer to uint32; values out of range are ErrOverflow.
	Uint32
	// Uint16 narrows any integer to uint16; values out of range are ErrOverflow.
	Uint16
	// Uint8 narrows any integer to uint8; values out of range are ErrOverflow.
	Uint8
	// Float64 converts a decimal (its scale applied) to the nearest float64;
	// float64 values are kept. A decimal of more than 15 significant digits
	// may not survive the conversion exactly (distinct decimals can become
	// the same float64); the error is at most half a unit in the last place.
	Float64

	numDTypes = iota
)

var dtypeNames = [numDTypes]string{"keep", "bfloat16", "float16", "float32", "int32", "int16", "int8", "uint32", "uint16", "uint8", "float64"}

// String returns the dtype's name as ParseDType accepts it ("bfloat16", ...).
func (d DType) String() string {
	if int(d) < len(dtypeNames) {
		return dtypeNames[d]
	}
	return fmt.Sprintf("DType(%d)", uint8(d))
}

// ParseDType returns the DType named s ("keep", "bfloat16", "float16",
// "float32", "int32", "int16", "int8", "uint32", "uint16", "uint8",
// "float64"; "" is Keep).
func ParseDType(s string) (DType, error) {
	if s == "" {
		return Keep, nil
	}
	for i, n := range dtypeNames {
		if n == s {
			return DType(i), nil
		}
	}
	return Keep, fmt.Errorf("shape: unknown dtype %q (want one of %s): %w", s, strings.Join(dtypeNames[:], ", "), ErrShape)
}

// ListRule says what happens to a list row longer than the column's Length.
type ListRule uint8

const (
	// Reject returns ErrTooLong naming the column, the row, its length and the
	// configured Length. It is the zero value: nothing is dropped by default.
	Reject ListRule = iota
	// Truncate keeps the first Length elements of a longer row.
	Truncate

	numListRules = iota
)

// String returns "reject" or "truncate".
func (r ListRule) String() string {
	switch r {
	case Reject:
		return "reject"
	case Truncate:
		return "truncate"
	}
	return fmt.Sprintf("ListRule(%d)", uint8(r))
}

type fillKind uint8

const (
	fillUnset fillKind = iota
	fillFloat
	fillInt
	fillUint
)

// Fill is the value used for padding: list padding up to Length, packed
// padding, and (for the final-batch policy) padding rows. The zero Fill means
// "none given": padding is zero and null list entries are an error. Build one
// with FillFloat, FillInt or FillUint; it must be representable in the column's
// output element dtype (checked by OutputSchema).
type Fill struct {
	kind fillKind
	f    float64
	i    int64
	u    uint64
}

// FillFloat returns a Fill of value v (NaN and infinities allowed for float
// outputs; integer outputs need an integral v in range).
func FillFloat(v float64) Fill { return Fill{kind: fillFloat, f: v} }

// FillInt returns a Fill of value v.
func FillInt(v int64) Fill { return Fill{kind: fillInt, i: v} }

// FillUint returns a Fill of value v.
func FillUint(v uint64) Fill { return Fill{kind: fillUint, u: v} }

// IsSet reports whether a fill value was given.
func (f Fill) IsSet() bool { return f.kind != fillUnset }

// String returns the fill value, or "none".
func (f Fill) String() string {
	switch f.kind {
	case fillFloat:
		return fmt.Sprint(f.f)
	case fillInt:
		return fmt.Sprint(f.i)
	case fillUint:
		return fmt.Sprint(f.u)
	}
	return "none"
}

// Column says how one column of a slice is shaped. Only Name is required; the
// zero value of every other field means "leave it as it is".
type Column struct {
	// Name is the column's name in the input schema.
	Name string
	// DType is the target element dtype (Keep: unchanged). It applies to the
	// column's values, or to the elements of a list or fixed_size_list column.
	DType DType
	// Length, when > 0, gives a list column the static length L: the output is
	// fixed_size_list<T>[L] plus an int32 "<Name>_length" column. Shorter rows
	// are padded with Fill; longer rows follow Overflow. 0 keeps lists variable.
	// On a fixed_size_list column Length must equal its size.
	Length int
	// Overflow says what happens to a list row longer than Length (default
	// Reject).
	Overflow ListRule
	// Fill is the padding value (default zero). With a Fill, null list entries
	// are treated as empty lists and null elements inside lists become Fill;
	// without one they are ErrNullList.
	Fill Fill
	// PackRatio, when > 0, packs the list column into rows of Length tokens
	// (see Pack): a slice of b rows becomes PackedRows(b, PackRatio) rows, and
	// "<Name>_segment_ids" and "<Name>_positions" columns are added after the
	// first packed column. It must be >= 1 and needs Length. Several packed
	// columns (tokens plus aligned columns such as loss weights) must share
	// Length, Overflow and PackRatio, and have identical lengths in every row;
	// the first one in []Column order names the segment and position columns.
	// Packing changes the row count, so every column of the slice must be packed.
	PackRatio float64
}

// Validate reports every problem of the column's specification at once, each
// naming the column and the bad value. Problems that depend on the column's
// type are reported by OutputSchema.
func (c Column) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("shape: column %q: %s: %w", c.Name, fmt.Sprintf(format, args...), ErrShape))
	}
	if c.Name == "" {
		bad("empty column name")
	}
	if int(c.DType) >= numDTypes {
		bad("unknown DType %d", uint8(c.DType))
	}
	if c.Length < 0 || c.Length > math.MaxInt32 {
		bad("Length %d out of range [0, %d]", c.Length, math.MaxInt32)
	}
	if int(c.Overflow) >= numListRules {
		bad("unknown Overflow rule %d", uint8(c.Overflow))
	}
	if c.Overflow == Truncate && c.Length == 0 {
		bad("Overflow %s needs a Length", c.Overflow)
	}
	if c.Fill.kind > fillUint {
		bad("invalid Fill")
	}
	switch r := c.PackRatio; {
	case math.IsNaN(r) || math.IsInf(r, 0) || r < 0 || (r > 0 && r < 1):
		bad("PackRatio %v must be 0 (no packing) or a finite ratio >= 1", r)
	case r > 0 && c.Length == 0:
		bad("PackRatio %v needs a Length (tokens per packed row)", r)
	}
	return errors.Join(errs...)
}

// ValidateColumns validates every column and the set as a whole (duplicate
// names, packed columns that disagree on Length, Overflow or PackRatio) and
// reports every problem at once.
func ValidateColumns(cols []Column) error {
	var errs []error
	seen := make(map[string]int, len(cols))
	var first *Column
	for i := range cols {
		c := &cols[i]
		if err := c.Validate(); err != nil {
			errs = append(errs, err)
		}
		if j, dup := seen[c.Name]; dup && c.Name != "" {
			errs = append(errs, fmt.Errorf("shape: column %q listed twice (entries %d and %d): %w", c.Name, j, i, ErrShape))
		}
		seen[c.Name] = i
		if c.PackRatio <= 0 {
			continue
		}
		if first == nil {
			first = c
			continue
		}
		if c.Length != first.Length || c.Overflow != first.Overflow || c.PackRatio != first.PackRatio {
			errs = append(errs, fmt.Errorf("shape: packed columns %q (Length %d, Overflow %s, PackRatio %v) and %q (Length %d, Overflow %s, PackRatio %v) must agree: %w",
				first.Name, first.Length, first.Overflow, first.PackRatio, c.Name, c.Length, c.Overflow, c.PackRatio, ErrShape))
		}
	}
	return errors.Join(errs...)
}
