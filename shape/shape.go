package shape

import (
	"errors"
	"fmt"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// Sentinel errors of shaping. Every error returned by Apply, Pack and friends wraps
// one of them and names the column (and the row, where data is at fault).
var (
	// ErrShape means a shaping specification is invalid, or does not fit the
	// column it names (unknown column, Length on a non-list column, bfloat16 on
	// an integer column, ...).
	ErrShape = errors.New("invalid column shaping")
	// ErrOverflow means a value does not fit the narrower target dtype of a cast.
	ErrOverflow = errors.New("value out of range of the target dtype")
	// ErrTooLong means a list row is longer than the configured Length and the
	// column's Overflow rule is Reject.
	ErrTooLong = errors.New("list longer than the configured Length")
	// ErrNullList means a list entry (or an element inside a list) is null and
	// no Fill is configured to stand in for it.
	ErrNullList = errors.New("null list entry without a fill")
	// ErrPackOverflow means the sequences of a slice do not fit into the output
	// rows that packing allows; packing never drops data silently.
	ErrPackOverflow = errors.New("sequences do not fit into the packed rows")
)

// RowError is a shaping error caused by the data of one row of the slice
// (a value out of range, a list too long, a null without a fill). It wraps
// the sentinel (errors.Is) and says which row, so that a caller that knows
// where the slice's rows come from can name the file and its row.
type RowError struct {
	Column string
	Row    int // row within the slice given to Apply
	Err    error
}

func (e *RowError) Error() string { return e.Err.Error() }
func (e *RowError) Unwrap() error { return e.Err }

func rowError(column string, row int, err error) error {
	return &RowError{Column: column, Row: row, Err: err}
}

// Names and metadata that shaping adds to the output schema.
const (
	// DTypeMetadataKey is the field metadata key that tells the client the
	// logical dtype of a column whose Arrow type cannot say it: a bfloat16
	// column travels as uint16 bits with {DTypeMetadataKey: "bfloat16"}. For a
	// fixed_size_list column the key describes the list's elements.
	DTypeMetadataKey = "meshfeed.dtype"
	// LengthSuffix names the int32 column that a fixed-Length list column gets
	// beside it: "<name>_length", each row's original length capped at Length.
	LengthSuffix = "_length"
	// SegmentIDsSuffix names the int32 fixed_size_list[Length] column of a
	// packed column: 1-based segment per output row, 0 for padding.
	SegmentIDsSuffix = "_segment_ids"
	// PositionsSuffix names the int32 fixed_size_list[Length] column of a
	// packed column: the position of each token inside its sequence, 0 for
	// padding.
	PositionsSuffix = "_positions"
)

// shapeOp is what happens to one input column.
type shapeOp uint8

const (
	opKeep     shapeOp = iota // retained as is
	opCast                    // primitive values cast
	opCastFSL                 // fixed_size_list child cast, shape kept
	opCastList                // list child cast, offsets kept
	opPad                     // list -> fixed_size_list[L] + length column
	opPack                    // list -> packed fixed_size_list[L]
)

// shapeStep is the compiled shaping of one input column.
type shapeStep struct {
	col     Column
	op      shapeOp
	to      castTarget     // output element type (cast target, or the unchanged type)
	cast    bool           // elements need converting
	fill    []byte         // one output element of Fill, native byte order
	outType arrow.DataType // output type of list-like columns
	extras  int            // number of output fields added after this one
}

// Shaper is a []Column compiled against one input schema: it validates once and
// then shapes every slice of that schema. It is immutable and safe for
// concurrent use.
type Shaper struct {
	in      *arrow.Schema
	out     *arrow.Schema
	steps   []shapeStep // one per input field
	packing bool
	pack    Column // the first packed column (names segment ids and positions)
}

// OutputSchema returns the schema that Apply produces for input schema in,
// without looking at data. Fields keep their input order; a fixed-Length list
// column is followed by its "<name>_length" column, and the first packed column
// by "<name>_segment_ids" and "<name>_positions".
func OutputSchema(in *arrow.Schema, cols []Column) (*arrow.Schema, error) {
	s, err := NewShaper(in, cols)
	if err != nil {
		return nil, err
	}
	return s.Schema(), nil
}

// Apply shapes rec as cols say, allocating new buffers from mem. Columns not
// named in cols are retained, not copied. The caller releases the returned
// record; rec is left as it was (still owned by the caller).
func Apply(rec arrow.RecordBatch, cols []Column, mem memory.Allocator) (arrow.RecordBatch, error) {
	s, err := NewShaper(rec.Schema(), cols)
	if err != nil {
		return nil, err
	}
	return s.Apply(rec, mem)
}

// NewShaper validates cols against the input schema in and reports every
// problem at once: unknown columns, shaping that does not fit a column's type
// (naming the column and its type), fills that the output dtype cannot hold,
// output names that collide.
func NewShaper(in *arrow.Schema, cols []Column) (*Shaper, error) {
	if in == nil {
		return nil, fmt.Errorf("shape: nil input schema: %w", ErrShape)
	}
	errs := []error{ValidateColumns(cols)}
	byName := make(map[string]*Column, len(cols))
	for i := range cols {
		if _, dup := byName[cols[i].Name]; !dup {
			byName[cols[i].Name] = &cols[i]
		}
	}
	for name := range byName {
		if len(in.FieldIndices(name)) == 0 && name != "" {
			errs = append(errs, fmt.Errorf("shape: column %q is not in the input schema (columns: %s): %w", name, shapeFieldNames(in), ErrShape))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}

	s := &Shaper{in: in, steps: make([]shapeStep, in.NumFields())}
	for _, c := range cols {
		if c.PackRatio > 0 {
			s.packing, s.pack = true, c
			break
		}
	}
	fields := make([]arrow.Field, 0, in.NumFields()+2)
	var unpacked []string
	for i, f := range in.Fields() {
		c, ok := byName[f.Name]
		if !ok {
			s.steps[i] = shapeStep{op: opKeep}
			fields = append(fields, f)
			unpacked = append(unpacked, fmt.Sprintf("%q", f.Name))
			continue
		}
		st, out, err := shapeCompile(*c, f)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if c.PackRatio > 0 && c.Name == s.pack.Name {
			st.extras = 2
			out = append(out,
				arrow.Field{Name: c.Name + SegmentIDsSuffix, Type: arrow.FixedSizeListOfNonNullable(int32(c.Length), arrow.PrimitiveTypes.Int32)},
				arrow.Field{Name: c.Name + PositionsSuffix, Type: arrow.FixedSizeListOfNonNullable(int32(c.Length), arrow.PrimitiveTypes.Int32)})
		}
		if c.PackRatio <= 0 {
			unpacked = append(unpacked, fmt.Sprintf("%q", f.Name))
		}
		s.steps[i] = st
		fields = append(fields, out...)
	}
	if s.packing && len(unpacked) > 0 {
		errs = append(errs, fmt.Errorf("shape: packing column %q changes the row count, but columns %s are not packed: pack them too (same Length and PackRatio) or leave them out of the projection: %w",
			s.pack.Name, strings.Join(unpacked, ", "), ErrShape))
	}
	seen := make(map[string]bool, len(fields))
	for _, f := range fields {
		if seen[f.Name] {
			errs = append(errs, fmt.Errorf("shape: output column %q appears twice (an added column collides with an input column): %w", f.Name, ErrShape))
		}
		seen[f.Name] = true
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	md := in.Metadata()
	s.out = arrow.NewSchema(fields, &md)
	return s, nil
}

// Schema returns the output schema.
func (s *Shaper) Schema() *arrow.Schema { return s.out }

// Apply shapes rec, whose schema must equal the one the Shaper was built for.
// See the package function Apply.
func (s *Shaper) Apply(rec arrow.RecordBatch, mem memory.Allocator) (arrow.RecordBatch, error) {
	if !rec.Schema().Equal(s.in) {
		return nil, fmt.Errorf("shape: record schema %s differs from the shaper's input schema %s: %w", rec.Schema(), s.in, ErrShape)
	}
	nrows := int(rec.NumRows())
	cols := make([]arrow.Array, 0, s.out.NumFields())
	owned := make([]arrow.Array, 0, s.out.NumFields())
	release := func() {
		for _, a := range owned {
			a.Release()
		}
	}
	if s.packing {
		packed, err := s.applyPack([]arrow.RecordBatch{rec}, nil, mem)
		if err != nil {
			return nil, err
		}
		owned = packed
		out := array.NewRecordBatch(s.out, packed, int64(packed[0].Len()))
		release()
		return out, nil
	}
	for i, st := range s.steps {
		arr := rec.Column(i)
		name := s.in.Field(i).Name
		switch st.op {
		case opKeep:
			cols = append(cols, arr)
			continue
		case opCast:
			out, err := castArray(name, arr, st.to, mem)
			if err != nil {
				release()
				return nil, err
			}
			owned = append(owned, out)
			cols = append(cols, out)
		case opCastFSL:
			out, err := castFixedSizeList(name, arr, st, mem)
			if err != nil {
				release()
				return nil, err
			}
			owned = append(owned, out)
			cols = append(cols, out)
		case opCastList:
			out, err := castList(name, arr, st, mem)
			if err != nil {
				release()
				return nil, err
			}
			owned = append(owned, out)
			cols = append(cols, out)
		case opPad:
			out, lengths, err := padList(name, arr, st, mem)
			if err != nil {
				release()
				return nil, err
			}
			owned = append(owned, out, lengths)
			cols = append(cols, out, lengths)
		default:
			release()
			return nil, fmt.Errorf("shape: column %q: unexpected shaping step %d: %w", name, st.op, ErrShape)
		}
	}
	out := array.NewRecordBatch(s.out, cols, int64(nrows))
	release()
	return out, nil
}

// applyPack packs every column of the rows of parts, in order (all are
// packed columns, checked by NewShaper), and returns the output columns in
// schema order.
func (s *Shaper) applyPack(parts []arrow.RecordBatch, tags []int32, mem memory.Allocator) ([]arrow.Array, error) {
	// The first packed column in []Column order leads: its lengths set the
	// layout and its segment ids and positions follow it.
	lead := s.in.FieldIndices(s.pack.Name)[0]
	order := make([]int, 0, len(s.steps)) // input field per pack input
	order = append(order, lead)
	for i := range s.steps {
		if i != lead {
			order = append(order, i)
		}
	}
	var nrows int64
	for _, p := range parts {
		nrows += p.NumRows()
	}
	ins := make([]packInput, len(order))
	at := make([]int, len(s.steps)) // pack input per input field
	for k, i := range order {
		st := s.steps[i]
		ins[k] = packInput{name: s.in.Field(i).Name, to: st.to, cast: st.cast, fill: st.fill, fillSet: st.col.Fill.IsSet(), outType: st.outType}
		if len(parts) == 1 {
			ins[k].list = parts[0].Column(i)
		} else {
			for _, p := range parts {
				ins[k].parts = append(ins[k].parts, p.Column(i))
			}
		}
		at[i] = k
	}
	rows := PackedRows(int(nrows), s.pack.PackRatio)
	packed, seg, pos, tagged, err := packColumns(ins, tags, s.pack.Length, rows, s.pack.Overflow, mem)
	if err != nil {
		if errors.Is(err, ErrPackOverflow) {
			err = fmt.Errorf("%w (PackRatio %v: %d source rows -> %d packed rows)", err, s.pack.PackRatio, nrows, rows)
		}
		return nil, err
	}
	out := make([]arrow.Array, 0, len(packed)+2)
	for i := range s.steps {
		out = append(out, packed[at[i]])
		if i == lead {
			out = append(out, seg, pos)
		}
	}
	if tagged != nil {
		out = append(out, tagged)
	}
	return out, nil
}

// compileScalar is shapeCompile for a column that is not a list: a cast, or
// nothing. bad formats its refusals.
func compileScalar(c Column, f arrow.Field, bad func(string, ...any) (shapeStep, []arrow.Field, error)) (shapeStep, []arrow.Field, error) {
	if c.Length != 0 {
		return bad("Length %d needs a list column", c.Length)
	}
	if c.PackRatio > 0 {
		return bad("PackRatio %v needs a list column", c.PackRatio)
	}
	to, cast, err := castTargetFor(f.Type, c.DType)
	if err != nil {
		return bad("%v", err)
	}
	if c.Fill.IsSet() {
		if _, err := to.fillBytes(c.Fill); err != nil {
			return bad("%v", err)
		}
	}
	if !cast {
		return shapeStep{col: c, op: opKeep}, []arrow.Field{f}, nil
	}
	return shapeStep{col: c, op: opCast, to: to, cast: true}, []arrow.Field{shapeWithDTypeMetadata(to.field(f), to)}, nil
}

// shapeCompile checks column c against its input field f and returns the
// compiled step and the output field(s) that replace f.
func shapeCompile(c Column, f arrow.Field) (shapeStep, []arrow.Field, error) {
	st := shapeStep{col: c}
	bad := func(format string, args ...any) (shapeStep, []arrow.Field, error) {
		return st, nil, fmt.Errorf("shape: column %q (%s): %s: %w", c.Name, f.Type, fmt.Sprintf(format, args...), ErrShape)
	}
	if v, ok := f.Metadata.GetValue(DTypeMetadataKey); ok && c.DType != Keep {
		return bad("already carries %s=%q; it cannot be cast again", DTypeMetadataKey, v)
	}
	var elem arrow.Field // the element field, for list types
	switch t := f.Type.(type) {
	case *arrow.ListType:
		elem = t.ElemField()
	case *arrow.LargeListType:
		elem = t.ElemField()
	case *arrow.FixedSizeListType:
		elem = t.ElemField()
		if c.Length != 0 && c.Length != int(t.Len()) {
			return bad("Length %d differs from the fixed_size_list size %d (only variable-length lists are padded)", c.Length, t.Len())
		}
		if c.PackRatio > 0 {
			return bad("PackRatio needs a variable-length list column")
		}
	default:
		return compileScalar(c, f, bad)
	}

	// List-like columns.
	to, cast, err := castTargetFor(elem.Type, c.DType)
	if err != nil {
		return bad("elements: %v", err)
	}
	if !to.fixedWidth() && (c.Length > 0 || cast) {
		return bad("elements of type %s cannot be shaped (need a fixed-width numeric type)", elem.Type)
	}
	fill, err := to.fillBytes(c.Fill)
	if err != nil {
		return bad("%v", err)
	}
	st.to, st.cast, st.fill = to, cast, fill
	newElem := to.field(elem)
	switch {
	case c.PackRatio > 0 || (c.Length > 0 && f.Type.ID() != arrow.FIXED_SIZE_LIST):
		st.op = opPad
		if c.PackRatio > 0 {
			st.op = opPack
		}
		out := shapeWithDTypeMetadata(arrow.Field{Name: f.Name, Type: shapeFixedType(elem, to, c.Length), Nullable: f.Nullable, Metadata: f.Metadata}, to)
		st.outType = out.Type
		if st.op == opPack {
			return st, []arrow.Field{out}, nil
		}
		st.extras = 1
		return st, []arrow.Field{out, {Name: f.Name + LengthSuffix, Type: arrow.PrimitiveTypes.Int32}}, nil
	case !cast:
		return shapeStep{col: c, op: opKeep}, []arrow.Field{f}, nil
	case f.Type.ID() == arrow.FIXED_SIZE_LIST:
		st.op, st.outType = opCastFSL, arrow.FixedSizeListOfField(f.Type.(*arrow.FixedSizeListType).Len(), newElem)
	case f.Type.ID() == arrow.LIST:
		st.op, st.outType = opCastList, arrow.ListOfField(newElem)
	default:
		st.op, st.outType = opCastList, arrow.LargeListOfField(newElem)
	}
	return st, []arrow.Field{shapeWithDTypeMetadata(arrow.Field{Name: f.Name, Type: st.outType, Nullable: f.Nullable, Metadata: f.Metadata}, to)}, nil
}

// shapeWithDTypeMetadata adds the bfloat16 marker to f's metadata when the
// elements are bfloat16 bits.
func shapeWithDTypeMetadata(f arrow.Field, to castTarget) arrow.Field {
	if !to.bf16 {
		return f
	}
	keys := make([]string, 0, f.Metadata.Len()+1)
	vals := make([]string, 0, f.Metadata.Len()+1)
	for i, k := range f.Metadata.Keys() {
		if k != DTypeMetadataKey {
			keys, vals = append(keys, k), append(vals, f.Metadata.Values()[i])
		}
	}
	f.Metadata = arrow.NewMetadata(append(keys, DTypeMetadataKey), append(vals, "bfloat16"))
	return f
}

func shapeFieldNames(s *arrow.Schema) string {
	names := make([]string, s.NumFields())
	for i, f := range s.Fields() {
		names[i] = fmt.Sprintf("%q", f.Name)
	}
	return strings.Join(names, ", ")
}
