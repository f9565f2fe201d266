package loader

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/bitutil"
	"github.com/apache/arrow-go/v18/arrow/float16"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/encoding"
	"github.com/parquet-go/parquet-go/format"
)

// colKind is how a projected column is laid out in Parquet and Arrow.
type colKind int

const (
	kindPrimitive colKind = iota // fixed-width scalar per row
	kindFixedList                // fixed_size_list<primitive>[n]: n leaf values per row
	kindList                     // list<primitive>: variable leaf values per row
	kindBinary                   // string or binary
)

// colDecoder decodes one projected column of a Parquet file.
type colDecoder struct {
	name     string
	field    arrow.Field    // output field
	elem     arrow.DataType // element type (the field type for primitives)
	elemSize int            // bytes per element; 0 for bool (bits)
	kind     colKind
	listSize int          // kindFixedList: values per row
	leaf     int          // parquet leaf column index
	phys     parquet.Kind // physical type of the leaf
	maxDef   int          // leaf's max definition level
	elemDef  int          // kindList: definition level of a present element (== maxDef)
	listDef  int          // kindList: levels at or above this define a (possibly empty) list
	fill     *float64     // value that replaces nulls; nil = nulls are an error
}

type parquetDecoder struct {
	f        *File
	footer   *parquetFooter
	store    Store
	pf       *parquet.File
	cols     []colDecoder
	sch      *arrow.Schema
	maxBytes int64 // per column chunk: decoded bytes and values
}

// rowGroupDecoder decodes one row group from fetched bytes.
type rowGroupDecoder interface {
	decode(ctx context.Context, rg int, ra io.ReaderAt, mem memory.Allocator) (arrow.RecordBatch, error)
}

// outputField maps a file's Arrow field to the field the loader emits:
// extension types become their storage type with the extension's name and
// metadata kept in the field metadata; large string/binary become
// string/binary; dictionary<_, string> becomes string. Types the loader does
// not decode are ErrUnsupported.
func outputField(f arrow.Field) (arrow.Field, error) {
	out := arrow.Field{Name: f.Name, Type: f.Type, Nullable: false, Metadata: f.Metadata}
	if ext, ok := f.Type.(arrow.ExtensionType); ok {
		md := map[string]string{"ARROW:extension:name": ext.ExtensionName(), "ARROW:extension:metadata": ext.Serialize()}
		for i, k := range f.Metadata.Keys() {
			md[k] = f.Metadata.Values()[i]
		}
		out.Type = ext.StorageType()
		out.Metadata = arrow.MetadataFrom(md)
	}
	switch t := out.Type.(type) {
	case *arrow.DictionaryType:
		out.Type = t.ValueType
	case *arrow.LargeStringType:
		out.Type = arrow.BinaryTypes.String
	case *arrow.LargeBinaryType:
		out.Type = arrow.BinaryTypes.Binary
	}
	switch t := out.Type.(type) {
	case *arrow.StringType, *arrow.BinaryType:
		out.Nullable = true
		return out, nil
	case *arrow.FixedSizeListType:
		if _, ok := primitiveSize(t.Elem()); !ok {
			return out, fmt.Errorf("fixed_size_list of %s: %w; only lists of bool, integers and floats are decoded", t.Elem(), ErrUnsupported)
		}
		out.Type = arrow.FixedSizeListOfNonNullable(t.Len(), t.Elem())
		return out, nil
	case *arrow.ListType:
		if _, ok := primitiveSize(t.Elem()); !ok {
			return out, fmt.Errorf("list of %s: %w; only lists of bool, integers and floats are decoded", t.Elem(), ErrUnsupported)
		}
		out.Type = arrow.ListOfNonNullable(t.Elem())
		return out, nil
	case *arrow.LargeListType:
		if _, ok := primitiveSize(t.Elem()); !ok {
			return out, fmt.Errorf("large_list of %s: %w", t.Elem(), ErrUnsupported)
		}
		out.Type = arrow.ListOfNonNullable(t.Elem())
		return out, nil
	}
	if _, ok := primitiveSize(out.Type); !ok {
		return out, fmt.Errorf("type %s: %w; decoded types are bool, int8-64, uint8-64, float16/32/64, fixed_size_list and list of those, string and binary", out.Type, ErrUnsupported)
	}
	return out, nil
}

// primitiveSize is the byte width of a fixed-width type the loader decodes
// (0 for bool, which is bit-packed).
func primitiveSize(t arrow.DataType) (int, bool) {
	switch t.ID() {
	case arrow.BOOL:
		return 0, true
	case arrow.INT8, arrow.UINT8:
		return 1, true
	case arrow.INT16, arrow.UINT16, arrow.FLOAT16:
		return 2, true
	case arrow.INT32, arrow.UINT32, arrow.FLOAT32, arrow.DATE32:
		return 4, true
	case arrow.INT64, arrow.UINT64, arrow.FLOAT64, arrow.TIMESTAMP, arrow.DATE64:
		return 8, true
	}
	return 0, false
}

// arrowSchemaFromParquet derives an Arrow schema for files written without
// ARROW:schema metadata: primitive leaves by physical and logical type, LIST of
// primitives as list<T>, BYTE_ARRAY as string or binary.
func arrowSchemaFromParquet(s *parquet.Schema, elems []format.SchemaElement) (*arrow.Schema, error) {
	// Leaf schema elements in order: parquet-go's node types do not carry
	// every logical type (FLOAT16), the flat footer schema does.
	var leafElems []*format.SchemaElement
	for i := range elems {
		if i > 0 && (!elems[i].NumChildren.Valid || elems[i].NumChildren.V == 0) {
			leafElems = append(leafElems, &elems[i])
		}
	}
	float16Leaf := map[string]bool{}
	for i, path := range s.Columns() {
		if i < len(leafElems) {
			if _, ok := leafElems[i].LogicalType.Value.(*format.Float16Type); ok {
				float16Leaf[path[0]] = true
			}
		}
	}
	var fields []arrow.Field
	for _, f := range s.Fields() {
		t, err := arrowTypeOfNode(f)
		if err != nil && float16Leaf[f.Name()] && f.Leaf() {
			t, err = arrow.FixedWidthTypes.Float16, nil
		}
		if err != nil {
			return nil, fmt.Errorf("column %q: %w", f.Name(), err)
		}
		fields = append(fields, arrow.Field{Name: f.Name(), Type: t, Nullable: f.Optional()})
	}
	return arrow.NewSchema(fields, nil), nil
}

func arrowTypeOfNode(n parquet.Node) (arrow.DataType, error) {
	if n.Leaf() {
		t, err := arrowTypeOfLeaf(n)
		if err != nil {
			return nil, err
		}
		if n.Repeated() {
			return arrow.ListOf(t), nil
		}
		return t, nil
	}
	// LIST: group (LIST) { repeated group list { element } } or legacy
	// two-level forms; anything with exactly one primitive leaf below one
	// repeated level is a list of that primitive.
	fields := n.Fields()
	if len(fields) != 1 {
		return nil, fmt.Errorf("group with %d fields: %w; only lists of primitives are decoded", len(fields), ErrUnsupported)
	}
	rep := fields[0]
	if !rep.Repeated() {
		return nil, fmt.Errorf("group without a repeated field: %w", ErrUnsupported)
	}
	if rep.Leaf() {
		t, err := arrowTypeOfLeaf(rep)
		if err != nil {
			return nil, err
		}
		return arrow.ListOf(t), nil
	}
	inner := rep.Fields()
	if len(inner) != 1 || !inner[0].Leaf() || inner[0].Repeated() {
		return nil, fmt.Errorf("nested list or struct: %w; only lists of primitives are decoded", ErrUnsupported)
	}
	t, err := arrowTypeOfLeaf(inner[0])
	if err != nil {
		return nil, err
	}
	return arrow.ListOf(t), nil
}

func arrowTypeOfLeaf(n parquet.Node) (arrow.DataType, error) {
	typ := n.Type()
	var lv any
	if lt := typ.LogicalType(); lt != nil {
		lv = lt.Value
	}
	switch typ.Kind() {
	case parquet.Boolean:
		return arrow.FixedWidthTypes.Boolean, nil
	case parquet.Int32:
		if it, ok := lv.(*format.IntType); ok {
			switch {
			case it.BitWidth == 8 && it.IsSigned:
				return arrow.PrimitiveTypes.Int8, nil
			case it.BitWidth == 8:
				return arrow.PrimitiveTypes.Uint8, nil
			case it.BitWidth == 16 && it.IsSigned:
				return arrow.PrimitiveTypes.Int16, nil
			case it.BitWidth == 16:
				return arrow.PrimitiveTypes.Uint16, nil
			case !it.IsSigned:
				return arrow.PrimitiveTypes.Uint32, nil
			}
		}
		return arrow.PrimitiveTypes.Int32, nil
	case parquet.Int64:
		if it, ok := lv.(*format.IntType); ok && !it.IsSigned {
			return arrow.PrimitiveTypes.Uint64, nil
		}
		return arrow.PrimitiveTypes.Int64, nil
	case parquet.Float:
		return arrow.PrimitiveTypes.Float32, nil
	case parquet.Double:
		return arrow.PrimitiveTypes.Float64, nil
	case parquet.ByteArray:
		switch lv.(type) {
		case *format.StringType, *format.EnumType, *format.JsonType:
			return arrow.BinaryTypes.String, nil
		}
		return arrow.BinaryTypes.Binary, nil
	case parquet.FixedLenByteArray:
		if _, ok := lv.(*format.Float16Type); ok {
			return arrow.FixedWidthTypes.Float16, nil
		}
	}
	return nil, fmt.Errorf("parquet type %s: %w", typ, ErrUnsupported)
}

func (p *parquetFooter) decoder(f *File, proj []int, out []arrow.Field, cfg *config) (rowGroupDecoder, error) {
	d := &parquetDecoder{f: f, footer: p, store: cfg.store, pf: p.pf, sch: arrow.NewSchema(out, nil), maxBytes: cfg.maxRowGroupBytes}
	for i, fi := range proj {
		c, err := p.colDecoder(fi, out[i], cfg)
		if err != nil {
			return nil, fmt.Errorf("loader: %s column %q: %w", p.uri, out[i].Name, err)
		}
		d.cols = append(d.cols, c)
	}
	return d, nil
}

func (p *parquetFooter) colDecoder(fi int, out arrow.Field, cfg *config) (c colDecoder, err error) {
	defer func() {
		if r := recover(); r != nil { // parquet-go panics on some schema nodes (maps, corrupt types)
			err = fmt.Errorf("undecodable Parquet schema for this column (%v): %w", r, ErrUnsupported)
		}
	}()
	name := p.sch.Field(fi).Name
	c = colDecoder{name: name, field: out}
	if v, ok := cfg.fill[name]; ok {
		c.fill = &v
	}
	leaves := p.leaves[name]
	if len(leaves) != 1 {
		return c, fmt.Errorf("stored as %d Parquet leaf columns: %w; only single-leaf columns are decoded", len(leaves), ErrUnsupported)
	}
	c.leaf = leaves[0]
	path := p.pf.Schema().Columns()[c.leaf]
	leaf, _ := p.pf.Schema().Lookup(path...)
	c.phys = leaf.Node.Type().Kind()
	c.maxDef = leaf.MaxDefinitionLevel
	switch t := out.Type.(type) {
	case *arrow.FixedSizeListType:
		c.kind, c.elem, c.listSize = kindFixedList, t.Elem(), int(t.Len())
	case *arrow.ListType:
		c.kind, c.elem = kindList, t.Elem()
	case *arrow.StringType, *arrow.BinaryType:
		c.kind, c.elem = kindBinary, out.Type
	default:
		c.kind, c.elem = kindPrimitive, out.Type
	}
	if (c.kind == kindFixedList || c.kind == kindList) != (leaf.MaxRepetitionLevel == 1) {
		return c, fmt.Errorf("Arrow type %s does not match the Parquet nesting (max repetition level %d): %w", out.Type, leaf.MaxRepetitionLevel, ErrUnsupported)
	}
	if c.kind == kindList {
		// Definition levels along the path: a list exists at or above the
		// level of the repeated node; an element is present at maxDef.
		c.elemDef = leaf.MaxDefinitionLevel
		node := parquet.Node(p.pf.Schema())
		lvl := 0
		for _, name := range path {
			node = fieldByName(node, name)
			if node == nil {
				return c, fmt.Errorf("path %v not in schema: %w", path, ErrCorrupt)
			}
			if node.Repeated() {
				c.listDef = lvl // a row whose level reaches lvl has a list (maybe empty)
				break
			}
			if node.Optional() {
				lvl++
			}
		}
	}
	if c.kind == kindBinary {
		if c.phys != parquet.ByteArray {
			return c, fmt.Errorf("Arrow %s stored as Parquet %s: %w", out.Type, c.phys, ErrUnsupported)
		}
		return c, nil
	}
	size, _ := primitiveSize(c.elem)
	c.elemSize = size
	if !physicalFits(c.elem, c.phys, leaf.Node.Type().Length()) {
		return c, fmt.Errorf("Arrow %s stored as Parquet %s: %w", c.elem, c.phys, ErrUnsupported)
	}
	return c, nil
}

func fieldByName(n parquet.Node, name string) parquet.Node {
	for _, f := range n.Fields() {
		if f.Name() == name {
			return f
		}
	}
	return nil
}

func physicalFits(t arrow.DataType, k parquet.Kind, length int) bool {
	switch t.ID() {
	case arrow.BOOL:
		return k == parquet.Boolean
	case arrow.INT8, arrow.UINT8, arrow.INT16, arrow.UINT16, arrow.INT32, arrow.UINT32, arrow.DATE32:
		return k == parquet.Int32
	case arrow.INT64, arrow.UINT64, arrow.TIMESTAMP, arrow.DATE64:
		return k == parquet.Int64
	case arrow.FLOAT32:
		return k == parquet.Float
	case arrow.FLOAT64:
		return k == parquet.Double
	case arrow.FLOAT16:
		return k == parquet.FixedLenByteArray && length == 2
	}
	return false
}

// decode reads every projected column chunk of row group rg from ra (which
// holds the fetched chunk bytes) into Arrow arrays allocated from mem.
func (d *parquetDecoder) decode(ctx context.Context, rg int, ra io.ReaderAt, mem memory.Allocator) (rec arrow.RecordBatch, err error) {
	rows := d.f.RowGroups[rg].Rows
	arrs := make([]arrow.Array, 0, len(d.cols))
	defer func() {
		if r := recover(); r != nil {
			if err = faultErr(d.f.Object, rg, r); err == nil {
				err = fmt.Errorf("loader: %s row group %d: undecodable data (%v): %w; the file is corrupt: rewrite it", d.f.Object.URI, rg, r, ErrCorrupt)
			}
		}
		if err != nil {
			for _, a := range arrs {
				a.Release()
			}
		}
	}()
	chunks := d.pf.RowGroups()[rg].ColumnChunks()
	meta := d.pf.Metadata().RowGroups[rg].Columns
	for i := range d.cols {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		c := &d.cols[i]
		if needsFallback(&meta[c.leaf].MetaData, c.phys == parquet.Boolean) {
			a, err := d.decodeFallback(ctx, c, rg, ra, mem)
			if err != nil {
				return nil, fmt.Errorf("loader: %s row group %d column %q: %w", d.f.Object.URI, rg, c.name, err)
			}
			arrs = append(arrs, a)
			continue
		}
		if sr, ok := ra.(*spanReader); ok {
			cm := &meta[c.leaf].MetaData
			off, n := chunkRange(cm)
			if b, ok := sr.bytesAt(off, n); ok {
				if err := checkPages(b, cm, d.maxBytes); err != nil {
					return nil, fmt.Errorf("loader: %s row group %d column %q: %w", d.f.Object.URI, rg, c.name, err)
				}
				if a, ok, err := c.decodeFast(b, cm, rows, mem, d.maxBytes); ok {
					if err != nil {
						return nil, fmt.Errorf("loader: %s row group %d column %q: %w", d.f.Object.URI, rg, c.name, err)
					}
					arrs = append(arrs, a)
					continue
				}
			}
		}
		fcc, ok := chunks[c.leaf].(*parquet.FileColumnChunk)
		if !ok {
			return nil, fmt.Errorf("loader: %s row group %d column %q: unexpected chunk type %T", d.f.Object.URI, rg, c.name, chunks[c.leaf])
		}
		a, err := c.decodeChunk(fcc, ra, rows, mem, d.maxBytes)
		if err != nil {
			return nil, fmt.Errorf("loader: %s row group %d column %q: %w", d.f.Object.URI, rg, c.name, err)
		}
		arrs = append(arrs, a)
	}
	rec = array.NewRecordBatch(d.sch, arrs, rows)
	for _, a := range arrs {
		a.Release()
	}
	arrs = nil
	return rec, nil
}

// colState accumulates one column chunk's decoded values.
type colState struct {
	c       *colDecoder
	mem     memory.Allocator
	values  *memory.Buffer // element values (bits for bool)
	nvals   int            // elements written
	offsets *memory.Buffer // kindList, kindBinary: int32 offsets
	rows    int            // rows written (kindList, kindBinary, kindPrimitive)
	valid   *memory.Buffer // kindBinary: validity bitmap, allocated on first null
	nulls   int
	hasDict bool            // the current page is dictionary-encoded
	dict    encoding.Values // its dictionary's values
	dictN   int
	scratch []byte
}

func (c *colDecoder) decodeChunk(fcc *parquet.FileColumnChunk, ra io.ReaderAt, rows int64, mem memory.Allocator, maxBytes int64) (arrow.Array, error) {
	n := rows
	if c.kind == kindFixedList {
		n *= int64(c.listSize)
	} else if c.kind == kindList {
		n = fcc.NumValues()
	}
	if est := n * int64(max(c.elemSize, 1)); n < 0 || est > maxBytes || rows > math.MaxInt32 {
		return nil, fmt.Errorf("%d rows (%d values) would decode to %d bytes, over the limit of %d: %w; the footer is corrupt, or the row groups are too large: rewrite them smaller or raise WithMaxRowGroupBytes",
			rows, n, est, maxBytes, ErrCorrupt)
	}
	st := &colState{c: c, mem: mem}
	defer st.release()
	// Size the buffers from metadata: rows, or the chunk's value count (which
	// counts nulls and empty lists, so it is an upper bound for values).
	// Fixed-width values are written whole before finish accepts them (it
	// checks the count), so they need no clearing; a bitmap's last byte
	// keeps bits no page writes, so booleans do.
	values := newValuesBuf
	if c.elemSize == 0 {
		values = newBuf
	}
	switch c.kind {
	case kindPrimitive:
		st.values = values(mem, elemBytes(c.elemSize, int(rows)))
	case kindFixedList:
		st.values = values(mem, elemBytes(c.elemSize, int(rows)*c.listSize))
	case kindList:
		st.values = newBuf(mem, elemBytes(c.elemSize, int(fcc.NumValues())))
		st.offsets = newBuf(mem, 4*(int(rows)+1))
	case kindBinary:
		st.offsets = newBuf(mem, 4*(int(rows)+1))
		st.values = memory.NewResizableBuffer(mem)
		st.values.Reserve(int(rows) * 8)
	}
	pages := fcc.PagesFrom(ra)
	defer pages.Close()
	for {
		page, err := pages.ReadPage()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, classify(err)
		}
		err = st.page(page, rows)
		parquet.Release(page)
		if err != nil {
			return nil, err
		}
	}
	return st.finish(rows)
}

func newBuf(mem memory.Allocator, n int) *memory.Buffer {
	b := memory.NewResizableBuffer(mem)
	b.Resize(n)
	return b
}

func elemBytes(size, n int) int {
	if size == 0 {
		return int(bitutil.BytesForBits(int64(n)))
	}
	return size * n
}

func (st *colState) release() {
	for _, b := range []*memory.Buffer{st.values, st.offsets, st.valid} {
		if b != nil {
			b.Release()
		}
	}
}

// page appends one data page.
func (st *colState) page(page parquet.Page, rows int64) error {
	c := st.c
	if d := page.Dictionary(); d != nil {
		st.hasDict, st.dict, st.dictN = true, d.Page().Data(), d.Len()
	} else {
		st.hasDict, st.dict, st.dictN = false, encoding.Values{}, 0
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
		if c.fill == nil {
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
		return 2 // float16, the only FLBA the loader decodes
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
		switch t {
		case arrow.INT8:
			o := unsafe.Slice((*int8)(unsafe.Pointer(unsafe.SliceData(dst))), n)
			for i, v := range src {
				if v < math.MinInt8 || v > math.MaxInt8 {
					return fmt.Errorf("value %d at index %d does not fit int8: %w", v, i, ErrCorrupt)
				}
				o[i] = int8(v)
			}
		case arrow.UINT8:
			for i, v := range src {
				if uint32(v) > math.MaxUint8 {
					return fmt.Errorf("value %d at index %d does not fit uint8: %w", v, i, ErrCorrupt)
				}
				dst[i] = uint8(v)
			}
		case arrow.INT16:
			o := unsafe.Slice((*int16)(unsafe.Pointer(unsafe.SliceData(dst))), n)
			for i, v := range src {
				if v < math.MinInt16 || v > math.MaxInt16 {
					return fmt.Errorf("value %d at index %d does not fit int16: %w", v, i, ErrCorrupt)
				}
				o[i] = int16(v)
			}
		case arrow.UINT16:
			o := unsafe.Slice((*uint16)(unsafe.Pointer(unsafe.SliceData(dst))), n)
			for i, v := range src {
				if uint32(v) > math.MaxUint16 {
					return fmt.Errorf("value %d at index %d does not fit uint16: %w", v, i, ErrCorrupt)
				}
				o[i] = uint16(v)
			}
		}
		return nil
	}
	copy(dst[:n*w], raw[:n*w])
	return nil
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
		} else {
			putFill(dst, pos, c.elem.ID(), c.elemSize, *c.fill)
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
	present := 0
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
		case l >= c.listDef: // empty list (or null element)
			if l == c.elemDef-1 && l > c.listDef {
				return fmt.Errorf("null element in list at row %d: %w; lists of %s must not hold nulls", st.rows-1, ErrNull, c.elem)
			}
		default: // null list
			if c.fill == nil {
				return fmt.Errorf("null list at row %d: %w; give the column a fill value (null lists become empty) or clean the data", st.rows-1, ErrNull)
			}
		}
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
		st.valid = newBuf(st.mem, int(bitutil.BytesForBits(rows)))
		bitutil.SetBitsTo(st.valid.Bytes(), 0, int64(st.rows), true)
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
		data := array.NewData(c.field.Type, int(rows), []*memory.Buffer{nil, st.values}, nil, 0, 0)
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
