package format

import (
	"context"
	"fmt"
	"io"
	"math"
	"sync"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/bitutil"
	"github.com/apache/arrow-go/v18/arrow/memory"
	pqfile "github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/metadata"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	pqformat "github.com/parquet-go/parquet-go/format"
)

// Fallback decoding through arrow-go (pqarrow) for column chunks that
// parquet-go v0.32 decodes wrongly. Each case is pinned by a test on files
// pyarrow wrote; remove a case when the parquet-go release that fixes it is
// in go.mod.
//
//   - LZ4_RAW: Column.decompress drops the codec's output when the LZ4 codec
//     reallocates (https://github.com/parquet-go/parquet-go/issues/608, fix in
//     pull request 609, unreleased). LZ4 (Hadoop framing) is not decoded by
//     parquet-go at all.
//   - BOOLEAN data pages in RLE encoding (pyarrow's data page v2 default): the
//     RLE run decoder broadcasts the run's byte value (0x01) instead of the
//     bit, so runs of true decode as mostly false.
//
// The fallback decodes the same fetched bytes (no extra storage reads beyond
// the footer, parsed once per file).
func needsFallback(md *pqformat.ColumnMetaData, isBool bool) bool {
	switch md.Codec {
	case pqformat.Lz4Raw, pqformat.Lz4:
		return true
	}
	if isBool {
		if len(md.EncodingStats) > 0 {
			for _, s := range md.EncodingStats {
				if (s.PageType == pqformat.DataPage || s.PageType == pqformat.DataPageV2) && s.Encoding == pqformat.RLE {
					return true
				}
			}
			return false
		}
		for _, e := range md.Encoding {
			if e == pqformat.RLE {
				return true // cannot tell value RLE from level RLE: take the safe path
			}
		}
	}
	return false
}

// arrowFooter is arrow-go's parse of a file's footer, made on first use.
type arrowFooter struct {
	once sync.Once
	md   *metadata.FileMetaData
	err  error
}

// readerAtSeeker gives arrow-go's readers Read and Seek over an io.ReaderAt.
type readerAtSeeker struct {
	io.ReaderAt
	size int64
	pos  int64
}

func (r *readerAtSeeker) Read(p []byte) (int, error) {
	if r.pos >= r.size {
		return 0, io.EOF
	}
	p = p[:min(int64(len(p)), r.size-r.pos)]
	n, err := r.ReadAt(p, r.pos)
	r.pos += int64(n)
	return n, err
}

func (r *readerAtSeeker) Seek(off int64, whence int) (int64, error) {
	switch whence {
	case io.SeekStart:
		r.pos = off
	case io.SeekCurrent:
		r.pos += off
	case io.SeekEnd:
		r.pos = r.size + off
	}
	return r.pos, nil
}

// decodeFallback decodes column c of row group rg with arrow-go from ra.
func (d *parquetDecoder) decodeFallback(ctx context.Context, c *colDecoder, rg int, ra io.ReaderAt, mem memory.Allocator) (arrow.Array, error) {
	md, err := d.footer.arrowMD()
	if err != nil {
		return nil, err
	}
	pr, err := pqfile.NewParquetReader(&readerAtSeeker{ReaderAt: d.withoutEmptyPages(ra, c, rg), size: d.src.Size()}, pqfile.WithMetadata(md))
	if err != nil {
		return nil, classify(err, d.opts.Kept)
	}
	defer pr.Close()
	rows := d.rows(rg)
	// The same bound as the primary decoder's: what the chunks say they
	// decode to (uncompressed pages, a lower bound of the arrays).
	var est int64
	chunks := d.pf.Metadata().RowGroups[rg].Columns
	for _, leaf := range c.leaves {
		if leaf < len(chunks) {
			est += chunks[leaf].MetaData.TotalUncompressedSize
		}
	}
	if est > d.maxBytes || rows > math.MaxInt32 {
		return nil, fmt.Errorf("%d rows would decode to at least %d bytes, over the limit of %d: %w; the footer is corrupt, or the row groups are too large: rewrite them smaller or raise loader.WithMaxRowGroupBytes (the cap on one column chunk's decoded bytes)",
			rows, est, d.maxBytes, ErrCorrupt)
	}
	fr, err := pqarrow.NewFileReader(pr, pqarrow.ArrowReadProperties{BatchSize: max(rows, 1)}, mem)
	if err != nil {
		return nil, classify(err, d.opts.Kept)
	}
	tbl, err := fr.ReadRowGroups(ctx, c.leaves, []int{rg})
	if err != nil {
		return nil, classify(err, d.opts.Kept)
	}
	defer tbl.Release()
	if tbl.NumCols() != 1 {
		return nil, fmt.Errorf("arrow-go returned %d columns, want 1: %w", tbl.NumCols(), ErrCorrupt)
	}
	parts := tbl.Column(0).Data().Chunks()
	var col arrow.Array
	switch len(parts) {
	case 0:
		return nil, fmt.Errorf("arrow-go returned no data: %w", ErrCorrupt)
	case 1:
		col = parts[0]
		col.Retain()
	default:
		if col, err = array.Concatenate(parts, mem); err != nil {
			return nil, err
		}
	}
	defer col.Release()
	if col.Len() == 0 && rows > 0 {
		return nil, fmt.Errorf("arrow-go decoded 0 of the footer's %d rows: %w; the column chunk starts with a data page of 0 values (which arrow-go and pyarrow take for its end: pyarrow reads no row of it either), or the file is corrupt: rewrite the file", rows, ErrCorrupt)
	}
	if int64(col.Len()) != rows {
		return nil, fmt.Errorf("decoded %d rows, footer says %d: %w", col.Len(), rows, ErrCorrupt)
	}
	return c.conform(col, mem)
}

// conform checks nulls against the column's rules (filling them when a fill
// value is set) and views the array as the output type.
func (c *colDecoder) conform(col arrow.Array, mem memory.Allocator) (arrow.Array, error) {
	data := col.Data()
	if c.kind == kindArrow {
		return c.conformArrow(data)
	}
	if c.kind == kindBinary {
		switch data.DataType().ID() {
		case arrow.STRING, arrow.BINARY:
			return makeArray(retype(data, c.field.Type)), nil
		}
		// Dictionary-encoded or large (the stored ARROW:schema says so):
		// decode to the plain type.
		return plainBinary(col, c.field.Type, mem)
	}
	var inner arrow.ArrayData = data
	switch c.kind {
	case kindFixedList, kindList:
		if c.keep && nullsIn(data) > 0 {
			return makeArray(viewAs(data, c.field.Type)), nil
		}
		if data.NullN() > 0 {
			if c.kind == kindFixedList || c.fill == nil {
				return nil, fmt.Errorf("%d null lists: %w; give the column a fill value (null lists become empty) or clean the data", data.NullN(), ErrNull)
			}
		}
		inner = data.Children()[0]
	}
	if inner.NullN() > 0 && c.kind == kindPrimitive && c.fill == nil && c.keep {
		return makeArray(retype(data, c.field.Type)), nil
	}
	if inner.NullN() > 0 {
		if c.kind != kindPrimitive || c.fill == nil {
			return nil, fmt.Errorf("%d nulls: %w; give the column a fill value or clean the data", inner.NullN(), ErrNull)
		}
		// Fill: copy the values and write the fill where the bitmap is clear.
		n := inner.Len()
		buf := newBuf(mem, elemBytes(c.elemSize, n))
		defer buf.Release()
		src := inner.Buffers()[1].Bytes()
		off := inner.Offset()
		if c.elemSize == 0 {
			bitutil.CopyBitmap(src, off, n, buf.Bytes(), 0)
		} else {
			copy(buf.Bytes(), src[off*c.elemSize:(off+n)*c.elemSize])
		}
		valid := inner.Buffers()[0].Bytes()
		for i := 0; i < n; i++ {
			if !bitutil.BitIsSet(valid, off+i) {
				putFill(buf.Bytes(), i, c.elem.ID(), c.elemSize, *c.fill)
			}
		}
		filled := array.NewData(c.field.Type, n, []*memory.Buffer{nil, buf}, nil, 0, 0)
		defer filled.Release()
		return array.MakeFromData(filled), nil
	}
	// Drop validity bitmaps that hold no nulls, so the output matches the
	// primary path's layout.
	return makeArray(stripValidity(data, c.field.Type)), nil
}

// stripValidity views data as type t without validity bitmaps (no nulls).
func stripValidity(data arrow.ArrayData, t arrow.DataType) arrow.ArrayData {
	var children []arrow.ArrayData
	switch tt := t.(type) {
	case *arrow.FixedSizeListType:
		children = []arrow.ArrayData{stripValidity(data.Children()[0], tt.Elem())}
	case *arrow.ListType:
		children = []arrow.ArrayData{stripValidity(data.Children()[0], tt.Elem())}
	}
	bufs := append([]*memory.Buffer(nil), data.Buffers()...)
	if len(bufs) > 0 {
		bufs[0] = nil
	}
	out := array.NewData(t, data.Len(), bufs, children, 0, data.Offset())
	for _, c := range children {
		c.Release()
	}
	return out
}

// conformArrow checks a column arrow-go decoded against its planned type
// and its nulls against the column's rules.
func (c *colDecoder) conformArrow(data arrow.ArrayData) (arrow.Array, error) {
	if !sameLayout(data.DataType(), c.field.Type) {
		if u, ok := unwrapLegacy(data, c.field.Type); ok { // legacy lists of lists
			defer u.Release()
			data = u
		}
	}
	if !sameLayout(data.DataType(), c.field.Type) {
		return nil, fmt.Errorf("arrow-go decoded %s, the plan says %s: %w; the files disagree with their footers: rewrite them", data.DataType(), c.field.Type, ErrCorrupt)
	}
	if n := nullsIn(data); n > 0 && !c.keep {
		return nil, fmt.Errorf("%d nulls (in the column or inside its values): %w; request the column without a fill value over Flight (nulls arrive as Arrow nulls) or clean the data", n, ErrNull)
	}
	return makeArray(viewAs(data, c.field.Type)), nil
}

// nullsIn counts the nulls of data and of its children.
func nullsIn(data arrow.ArrayData) int {
	n := data.NullN()
	for _, ch := range data.Children() {
		n += nullsIn(ch)
	}
	return n
}

// sameLayout reports whether a and b have the same physical layout and
// logical meaning (field names aside): data of a can be viewed as b.
func sameLayout(a, b arrow.DataType) bool {
	if arrow.TypeEqual(a, b) {
		return true
	}
	if ea, ok := a.(arrow.ExtensionType); ok {
		a = ea.StorageType()
	}
	if a.ID() != b.ID() {
		return false
	}
	if ta, ok := a.(*arrow.TimestampType); ok {
		// INT96: arrow-go labels the instants UTC, pyarrow (the plan) not.
		return ta.Unit == b.(*arrow.TimestampType).Unit
	}
	na, oka := a.(arrow.NestedType)
	nb, okb := b.(arrow.NestedType)
	if !oka || !okb {
		return arrow.TypeEqual(a, b)
	}
	fa, fb := na.Fields(), nb.Fields()
	if len(fa) != len(fb) {
		return false
	}
	if la, ok := a.(*arrow.FixedSizeListType); ok && la.Len() != b.(*arrow.FixedSizeListType).Len() {
		return false
	}
	for i := range fa {
		if !sameLayout(fa[i].Type, fb[i].Type) {
			return false
		}
		if _, isStruct := a.(*arrow.StructType); isStruct && fa[i].Name != fb[i].Name {
			return false
		}
	}
	return true
}

// viewAs views data as type t (sameLayout), sharing its buffers.
func viewAs(data arrow.ArrayData, t arrow.DataType) arrow.ArrayData {
	if arrow.TypeEqual(data.DataType(), t) {
		data.Retain()
		return data
	}
	var children []arrow.ArrayData
	if nt, ok := t.(arrow.NestedType); ok {
		for i, f := range nt.Fields() {
			children = append(children, viewAs(data.Children()[i], f.Type))
		}
	}
	out := array.NewData(t, data.Len(), data.Buffers(), children, data.NullN(), data.Offset())
	for _, c := range children {
		c.Release()
	}
	return out
}

// plainBinary copies a dictionary-encoded or large string/binary array into a
// plain one of type t (string or binary). Fallback only: it loops over rows.
func plainBinary(col arrow.Array, t arrow.DataType, mem memory.Allocator) (arrow.Array, error) {
	idx := func(i int) int { return i }
	vals := col
	if d, ok := col.(*array.Dictionary); ok {
		idx, vals = d.GetValueIndex, d.Dictionary()
	}
	var get func(i int) []byte
	switch v := vals.(type) {
	case *array.String:
		get = func(i int) []byte { return []byte(v.Value(i)) }
	case *array.LargeString:
		get = func(i int) []byte { return []byte(v.Value(i)) }
	case *array.Binary:
		get = v.Value
	case *array.LargeBinary:
		get = v.Value
	default:
		return nil, fmt.Errorf("arrow-go decoded %s, want %s: %w", col.DataType(), t, ErrUnsupported)
	}
	bld := array.NewBinaryBuilder(mem, arrow.BinaryTypes.Binary)
	defer bld.Release()
	bld.Reserve(col.Len())
	for i := 0; i < col.Len(); i++ {
		if col.IsNull(i) {
			bld.AppendNull()
			continue
		}
		b := get(idx(i))
		if bld.DataLen()+len(b) > math.MaxInt32 {
			return nil, fmt.Errorf("more than 2 GiB of string data in one row group: %w; write smaller row groups", ErrUnsupported)
		}
		bld.Append(b)
	}
	out := bld.NewArray()
	defer out.Release()
	return makeArray(retype(out.Data(), t)), nil
}

// withoutEmptyPages is ra with the column chunks of c in row group rg seen
// with their data pages of 0 values last (withoutEmptyPages), where one
// comes before values: arrow-go would stop reading at it.
func (d *parquetDecoder) withoutEmptyPages(ra io.ReaderAt, c *colDecoder, rg int) io.ReaderAt {
	sr, ok := ra.(Fetched)
	if !ok {
		return ra
	}
	meta := d.pf.Metadata().RowGroups[rg].Columns
	var ov []overlay
	for _, leaf := range c.leaves {
		if leaf >= len(meta) {
			continue
		}
		off, n := chunkRange(&meta[leaf].MetaData)
		if b, ok := sr.BytesAt(off, n); ok {
			if stripped := withoutEmptyPages(b); stripped != nil {
				ov = append(ov, overlay{off: off, b: stripped})
			}
		}
	}
	if len(ov) == 0 {
		return ra
	}
	return &overlayReaderAt{ReaderAt: ra, ov: ov}
}

// overlay replaces the bytes at [off, off+len(b)) of a file.
type overlay struct {
	off int64
	b   []byte
}

// overlayReaderAt reads from ReaderAt, with the overlays' bytes where they lie.
type overlayReaderAt struct {
	io.ReaderAt
	ov []overlay
}

func (r *overlayReaderAt) ReadAt(p []byte, off int64) (int, error) {
	n, err := r.ReaderAt.ReadAt(p, off)
	for _, o := range r.ov {
		lo, hi := max(off, o.off), min(off+int64(n), o.off+int64(len(o.b)))
		if lo < hi {
			copy(p[lo-off:hi-off], o.b[lo-o.off:hi-o.off])
		}
	}
	return n, err
}
