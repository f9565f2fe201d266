package format

import (
	"context"
	"fmt"
	"io"
	"math"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/bitutil"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/encoding"

	"github.com/meshfeed/meshfeed/internal/arrowmem"
)

// colKind is how a projected column is laid out in Parquet and Arrow.
type colKind int

const (
	kindPrimitive colKind = iota // fixed-width scalar per row
	kindFixedList                // fixed_size_list<primitive>[n]: n leaf values per row
	kindList                     // list<primitive>: variable leaf values per row
	kindBinary                   // string or binary
	kindArrow                    // anything else pyarrow reads: decoded by arrow-go (parquet_fallback.go)
)

// colDecoder decodes one projected column of a Parquet file.
type colDecoder struct {
	name     string
	field    arrow.Field    // output field
	elem     arrow.DataType // element type (the field type for primitives)
	elemSize int            // bytes per element; 0 for bool (bits)
	kind     colKind
	listSize int          // kindFixedList: values per row
	leaf     int          // parquet leaf column index (the first, for kindArrow)
	leaves   []int        // every leaf column index of the column
	phys     parquet.Kind // physical type of the leaf
	maxDef   int          // leaf's max definition level
	maxRep   int          // leaf's max repetition level (kindArrow: the highest of its leaves)
	elemDef  int          // kindList: definition level of a present element (== maxDef)
	listDef  int          // kindList: levels at or above this define a (possibly empty) list
	fill     *float64     // value that replaces nulls; nil = nulls are an error
	keep     bool         // nulls without a fill become Arrow validity (WithNullsAsValidity)
	kept     []error      // Options.Kept: storage errors passed on as they are
}

type parquetDecoder struct {
	uri      string
	src      Source
	footer   *parquetFooter
	pf       *parquet.File
	cols     []colDecoder
	sch      *arrow.Schema
	maxBytes int64 // per column chunk: decoded bytes and values
	opts     Options
	located  pageCache // the page locations of recent row groups' streamed columns, for every reader
}

// rows returns the rows of row group rg, by the footer.
func (d *parquetDecoder) rows(rg int) int64 { return d.pf.Metadata().RowGroups[rg].NumRows }

// Decoder prepares the decoding of the projected columns of src, checking
// the nulls the footer records against o's fill values.
func (p *parquetFooter) Decoder(src Source, proj []int, out []arrow.Field, o Options) (Decoder, error) {
	d := &parquetDecoder{uri: src.URI(), src: src, footer: p, pf: p.pf, sch: arrow.NewSchema(out, nil), maxBytes: o.MaxBytes, opts: o}
	for i, fi := range proj {
		c, err := p.colDecoder(fi, out[i], o)
		if err != nil {
			return nil, fmt.Errorf("format: %s column %q: %w", p.uri, out[i].Name, err)
		}
		d.cols = append(d.cols, c)
	}
	if err := d.checkNulls(); err != nil {
		return nil, err
	}
	return d, nil
}

// colDecoder plans the decoding of column fi as out.
//
// Length: one pass over the column's schema, each layout refused where it
// is found.
func (p *parquetFooter) colDecoder(fi int, out arrow.Field, o Options) (c colDecoder, err error) {
	defer func() {
		if r := recover(); r != nil { // parquet-go panics on some schema nodes (maps, corrupt types)
			err = fmt.Errorf("undecodable Parquet schema for this column (%v): %w", r, ErrUnsupported)
		}
	}()
	name := p.sch.Field(fi).Name
	c = colDecoder{name: name, field: out, kept: o.Kept}
	if v, ok := o.Fill[name]; ok {
		c.fill = &v
	}
	leaves := p.leaves[name]
	if len(leaves) == 0 {
		return c, fmt.Errorf("no Parquet leaf columns: %w", ErrCorrupt)
	}
	c.leaf, c.leaves = leaves[0], leaves
	c.keep = o.NullsAsValidity
	if !p.primaryFits(name, out.Type) {
		c.kind = kindArrow
		for _, l := range leaves {
			if lf, ok := p.pf.Schema().Lookup(p.pf.Schema().Columns()[l]...); ok {
				c.maxRep = max(c.maxRep, lf.MaxRepetitionLevel)
				c.maxDef = max(c.maxDef, lf.MaxDefinitionLevel)
			}
		}
		if c.fill != nil {
			return c, fmt.Errorf("fill value for a %s column: %w; fill values replace nulls of bool, integer and float columns: leave fill out (nulls then arrive as Arrow nulls) or cast the column", out.Type, ErrUnsupported)
		}
		return c, nil
	}
	path := p.pf.Schema().Columns()[c.leaf]
	leaf, _ := p.pf.Schema().Lookup(path...)
	c.phys = leaf.Node.Type().Kind()
	c.maxDef, c.maxRep = leaf.MaxDefinitionLevel, leaf.MaxRepetitionLevel
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
	if out.Type.ID() == arrow.DURATION {
		for rg := range p.pf.Metadata().RowGroups {
			if md := &p.pf.Metadata().RowGroups[rg].Columns[c.leaf].MetaData; needsFallback(md, false) {
				return c, fmt.Errorf("row group %d: duration column compressed with %s: %w; arrow-go (which meshfeed reads that codec with) reads no durations: rewrite the file with another codec (zstd, snappy)", rg, md.Codec, ErrUnsupported)
			}
		}
	}
	if c.kind == kindFixedList || c.kind == kindList {
		// Kept nulls need somewhere to go: lists planned with nullable
		// elements (WithNullsAsValidity found room for nulls).
		c.keep = c.keep && elemNullable(out.Type)
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

// settle ends a decode of row group rg that has made arrs so far: a panic in
// the decoders (a corrupt file, or a lost page of a mapping) becomes *err,
// and on any error the arrays are released. Deferred by decode and
// decodeRange.
func (d *parquetDecoder) settle(rg int, arrs *[]arrow.Array, err *error) {
	if r := recover(); r != nil {
		if *err = faultErr(d.uri, rg, r, d.opts.Missing); *err == nil {
			*err = fmt.Errorf("format: %s row group %d: undecodable data (%v): %w; the file is corrupt: rewrite it", d.uri, rg, r, ErrCorrupt)
		}
	}
	if *err != nil {
		for _, a := range *arrs {
			a.Release()
		}
	}
}

// DecodeRowGroup reads every projected column chunk of row group rg from ra
// (which holds the fetched chunk bytes) into Arrow arrays allocated from mem.
func (d *parquetDecoder) DecodeRowGroup(ctx context.Context, rg int, ra Fetched, mem memory.Allocator) (rec arrow.RecordBatch, err error) {
	rows := d.rows(rg)
	arrs := make([]arrow.Array, 0, len(d.cols))
	defer d.settle(rg, &arrs, &err)
	for i := range d.cols {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		a, err := d.decodeColumn(ctx, &d.cols[i], rg, ra, mem)
		if err != nil {
			return nil, err
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
	valid   *memory.Buffer // kindBinary, kindPrimitive: validity bitmap, allocated on first null
	nrows   int64          // rows of the chunk
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
		return nil, fmt.Errorf("%d rows (%d values) would decode to %d bytes, over the limit of %d: %w; the footer is corrupt, or the row groups are too large: rewrite them smaller or raise loader.WithMaxRowGroupBytes (the cap on one column chunk's decoded bytes)",
			rows, n, est, maxBytes, ErrCorrupt)
	}
	st := &colState{c: c, mem: mem, nrows: rows}
	defer st.release()
	// Size the buffers from metadata: rows, or the chunk's value count (which
	// counts nulls and empty lists, so it is an upper bound for values).
	// Fixed-width values are written whole before finish accepts them (it
	// checks the count), so they need no clearing; a bitmap's last byte
	// keeps bits no page writes, so booleans do.
	values := arrowmem.NewOverwriteBuffer
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
			return nil, classify(err, c.kept)
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

func elemNullable(t arrow.DataType) bool {
	switch tt := t.(type) {
	case *arrow.ListType:
		return tt.ElemField().Nullable
	case *arrow.FixedSizeListType:
		return tt.ElemField().Nullable
	}
	return false
}
