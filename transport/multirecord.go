package transport

import (
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/bitutil"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// When every column of the slices is fixed-width without nulls (primitive,
// fixed_size_list of those) or a boolean whose slices start and end on byte
// boundaries (the pad mask), the concatenated buffers are exactly the
// slices' buffer ranges back to back: the step is then sent as a
// multiRecord, whose IPC body is those ranges (no byte moved) and whose
// metadata is that of the concatenation. The metadata comes from arrow-go's
// own encoder run over a "shape" record: arrays of the concatenated lengths
// whose buffers are slices of one shared, never-written zero buffer, so the
// message is byte for byte the stock writer's encoding of the concatenated
// record.

// forceConcat makes the server concatenate every step's slices into a new
// record (benchmarks compare the two); tests elsewhere set it through
// ForceConcat.
var forceConcat atomic.Bool

// shapeZeros is the zero buffer the shape records' buffers slice. It is
// only ever read (and in practice not even that: the encoder passes buffers
// of exact length through untouched), so it is shared by every stream.
var shapeZeros struct {
	mu sync.Mutex
	b  []byte
}

// zeroBuffer returns an n-byte buffer of zeros, slicing shapeZeros.
func zeroBuffer(n int) *memory.Buffer {
	shapeZeros.mu.Lock()
	if len(shapeZeros.b) < n {
		shapeZeros.b = make([]byte, max(n, 2*len(shapeZeros.b)))
	}
	b := shapeZeros.b[:n:n]
	shapeZeros.mu.Unlock()
	return memory.NewBufferBytes(b)
}

// zeroPad is the padding written after a body buffer whose length is not a
// multiple of 8, as the IPC writer pads.
var zeroPad [8]byte

// multiRecord is a step whose columns are its parts (the slices, in order)
// concatenated, without the concatenation being built: the zero-copy writer
// sends the parts' buffers. It implements arrow.RecordBatch; the methods
// that hand out columns build the concatenation on first use (from the
// allocator of the parts), which the record keeps until it is released.
//
// newMultiRecord takes one reference of each part; they are released with
// the record.
type multiRecord struct {
	schema *arrow.Schema
	parts  []arrow.RecordBatch
	rows   int64
	// bufs holds, for every body buffer of the concatenated record in the
	// IPC writer's order (column by column, depth first; the absent
	// validity bitmaps included), its pieces: the parts' byte ranges.
	bufs [][][]byte
	size int64 // bytes of the concatenated buffers
	mem  memory.Allocator
	refs atomic.Int64

	mu   sync.Mutex
	flat arrow.RecordBatch // the concatenation, once built
}

var _ arrow.RecordBatch = (*multiRecord)(nil)

// newMultiRecord returns the virtual concatenation of parts, which must all
// have schema, taking over the caller's reference of every part; or nil,
// taking nothing, when a column cannot be concatenated without copying (see
// appendLayout), when there are fewer than two parts or no rows, or when
// forceConcat is set.
func newMultiRecord(schema *arrow.Schema, parts []arrow.RecordBatch, mem memory.Allocator) *multiRecord {
	if len(parts) < 2 || forceConcat.Load() {
		return nil
	}
	var rows int64
	for _, p := range parts {
		if !p.Schema().Equal(schema) || p.NumCols() != int64(schema.NumFields()) {
			return nil
		}
		rows += p.NumRows()
	}
	if rows == 0 || rows > math.MaxInt32 {
		return nil
	}
	m := &multiRecord{schema: schema, parts: slices.Clone(parts), rows: rows, mem: mem}
	var layout [][]byte
	for j := range schema.NumFields() {
		base := len(m.bufs)
		for i, p := range parts {
			d := p.Column(j).Data()
			if int64(d.Len()) != p.NumRows() {
				return nil
			}
			var ok bool
			if layout, ok = appendLayout(layout[:0], d, 0, d.Len()); !ok {
				return nil
			}
			if i == 0 {
				for range layout {
					m.bufs = append(m.bufs, make([][]byte, 0, len(parts)))
				}
			} else if len(layout) != len(m.bufs)-base {
				return nil
			}
			for k, b := range layout {
				if len(b) > 0 {
					m.bufs[base+k] = append(m.bufs[base+k], b)
					m.size += int64(len(b))
				}
			}
		}
	}
	m.refs.Store(1)
	return m
}

// appendLayout appends to out the body buffers that the IPC writer sends
// for rows [start, start+n) of d, which must have no nulls, as byte ranges
// of d's buffers (nil for the dropped validity bitmap), and reports whether
// d's type can be concatenated by placing those ranges back to back: a
// fixed-width numeric, date, time or decimal type; a boolean whose rows
// start at a multiple of 8 and count a multiple of 8; a fixed_size_list of
// any of these.
func appendLayout(out [][]byte, d arrow.ArrayData, start, n int) ([][]byte, bool) {
	if d.NullN() != 0 {
		return nil, false
	}
	off := d.Offset() + start
	switch dt := d.DataType().(type) {
	case *arrow.BooleanType:
		buf := d.Buffers()[1]
		if off%8 != 0 || n%8 != 0 || buf == nil || buf.Len() < (off+n)/8 {
			return nil, false
		}
		return append(out, nil, buf.Bytes()[off/8:(off+n)/8]), true
	case *arrow.FixedSizeListType:
		if len(d.Children()) != 1 {
			return nil, false
		}
		size := int(dt.Len())
		return appendLayout(append(out, nil), d.Children()[0], off*size, n*size)
	case arrow.FixedWidthDataType:
		if !virtualFixedWidth(dt.ID()) || dt.BitWidth()%8 != 0 || len(d.Buffers()) != 2 {
			return nil, false
		}
		w := dt.BitWidth() / 8
		buf := d.Buffers()[1]
		if buf == nil || buf.Len() < (off+n)*w {
			return nil, false
		}
		return append(out, nil, buf.Bytes()[off*w:(off+n)*w]), true
	}
	return nil, false
}

// virtualFixedWidth reports whether arrays of type id are a validity bitmap
// and one values buffer of a fixed byte width per value, which the IPC
// writer sends as that buffer's range.
func virtualFixedWidth(id arrow.Type) bool {
	switch id {
	case arrow.INT8, arrow.INT16, arrow.INT32, arrow.INT64,
		arrow.UINT8, arrow.UINT16, arrow.UINT32, arrow.UINT64,
		arrow.FLOAT16, arrow.FLOAT32, arrow.FLOAT64,
		arrow.DATE32, arrow.DATE64, arrow.TIME32, arrow.TIME64, arrow.TIMESTAMP, arrow.DURATION,
		arrow.DECIMAL32, arrow.DECIMAL64, arrow.DECIMAL128, arrow.DECIMAL256:
		return true
	}
	return false
}

// shapeData returns null-free array data of type dt (one appendLayout
// accepts) and n rows whose buffers have the lengths of a concatenation of
// n rows, all zeros.
func shapeData(dt arrow.DataType, n int) arrow.ArrayData {
	switch dt := dt.(type) {
	case *arrow.BooleanType:
		return array.NewData(dt, n, []*memory.Buffer{nil, zeroBuffer(int(bitutil.BytesForBits(int64(n))))}, nil, 0, 0)
	case *arrow.FixedSizeListType:
		child := shapeData(dt.Elem(), n*int(dt.Len()))
		defer child.Release()
		return array.NewData(dt, n, []*memory.Buffer{nil}, []arrow.ArrayData{child}, 0, 0)
	case arrow.FixedWidthDataType:
		return array.NewData(dt, n, []*memory.Buffer{nil, zeroBuffer(n * dt.BitWidth() / 8)}, nil, 0, 0)
	}
	// Unreachable: newMultiRecord accepts no other type.
	return array.NewData(dt, n, []*memory.Buffer{nil}, nil, 0, 0)
}

// payload returns the IPC payload of the concatenated record, and its body
// as the pieces to send in its place: the payload's metadata is the
// concatenation's, its own body (of zeros) is not sent. Should arrow-go's
// encoder lay out the body otherwise than appendLayout expects, payload
// builds the concatenation and returns its payload, with a nil body.
func (m *multiRecord) payload(opts []ipc.Option) (ipc.Payload, *bodyParts, error) {
	cols := make([]arrow.Array, m.schema.NumFields())
	for j, f := range m.schema.Fields() {
		d := shapeData(f.Type, int(m.rows))
		cols[j] = array.MakeFromData(d)
		d.Release()
	}
	shape := array.NewRecordBatch(m.schema, cols, m.rows)
	for _, c := range cols {
		c.Release()
	}
	p, err := recordPayload(shape, opts)
	shape.Release()
	if err != nil {
		return ipc.Payload{}, nil, err
	}
	var zeros bodyParts
	if err := p.SerializeBody(&zeros); err != nil {
		p.Release()
		return ipc.Payload{}, nil, fmt.Errorf("transport: serialize record body: %w", err)
	}
	body := &bodyParts{parts: make([][]byte, 0, len(zeros.parts)*len(m.parts))}
	same := true
	k := 0 // next piece of zeros to compare
	expect := func(n int) {
		if k >= len(zeros.parts) || len(zeros.parts[k]) != n {
			same = false
		}
		k++
	}
	for _, pieces := range m.bufs {
		n := 0
		for _, b := range pieces {
			body.Write(b)
			n += len(b)
		}
		if n == 0 {
			continue
		}
		expect(n)
		if pad := int(bitutil.CeilByte64(int64(n))) - n; pad > 0 {
			body.Write(zeroPad[:pad])
			expect(pad)
		}
	}
	if same && k == len(zeros.parts) && body.n == zeros.n {
		return p, body, nil
	}
	p.Release()
	flat, err := m.concat()
	if err != nil {
		return ipc.Payload{}, nil, err
	}
	p, err = recordPayload(flat, opts)
	return p, nil, err
}

// concat returns the concatenated record, building it on first use; m
// keeps it until m is released.
func (m *multiRecord) concat() (arrow.RecordBatch, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.flat == nil {
		r, err := concatRecords(m.schema, m.parts, m.mem)
		if err != nil {
			return nil, fmt.Errorf("transport: concatenate slices: %w", err)
		}
		m.flat = r
	}
	return m.flat, nil
}

// flatRecord returns rec's columns as an ordinary record: the concatenation
// of a multiRecord (valid while rec is), else rec itself.
func flatRecord(rec arrow.RecordBatch) (arrow.RecordBatch, error) {
	if m, ok := rec.(*multiRecord); ok {
		return m.concat()
	}
	return rec, nil
}

// mustConcat is concat for the arrow.RecordBatch methods, which cannot
// return an error. Concatenating null-free fixed-width columns fails only
// when memory runs out.
func (m *multiRecord) mustConcat() arrow.RecordBatch {
	r, err := m.concat()
	if err != nil {
		panic(err)
	}
	return r
}

// Retain implements arrow.RecordBatch.
func (m *multiRecord) Retain() { m.refs.Add(1) }

// Release implements arrow.RecordBatch: the last release releases the parts
// and the concatenation, if built.
func (m *multiRecord) Release() {
	if m.refs.Add(-1) != 0 {
		return
	}
	for _, p := range m.parts {
		p.Release()
	}
	m.parts, m.bufs = nil, nil
	m.mu.Lock()
	if m.flat != nil {
		m.flat.Release()
		m.flat = nil
	}
	m.mu.Unlock()
}

// Schema implements arrow.RecordBatch.
func (m *multiRecord) Schema() *arrow.Schema { return m.schema }

// NumRows implements arrow.RecordBatch: the rows of all parts.
func (m *multiRecord) NumRows() int64 { return m.rows }

// NumCols implements arrow.RecordBatch.
func (m *multiRecord) NumCols() int64 { return int64(m.schema.NumFields()) }

// ColumnName implements arrow.RecordBatch.
func (m *multiRecord) ColumnName(i int) string { return m.schema.Field(i).Name }

// Columns implements arrow.RecordBatch: the concatenated columns.
func (m *multiRecord) Columns() []arrow.Array { return m.mustConcat().Columns() }

// Column implements arrow.RecordBatch: the concatenated column i.
func (m *multiRecord) Column(i int) arrow.Array { return m.mustConcat().Column(i) }

// SetColumn implements arrow.RecordBatch over the concatenation.
func (m *multiRecord) SetColumn(i int, col arrow.Array) (arrow.RecordBatch, error) {
	r, err := m.concat()
	if err != nil {
		return nil, err
	}
	return r.SetColumn(i, col)
}

// NewSlice implements arrow.RecordBatch over the concatenation.
func (m *multiRecord) NewSlice(i, j int64) arrow.RecordBatch { return m.mustConcat().NewSlice(i, j) }

// MarshalJSON implements json.Marshaler over the concatenation.
func (m *multiRecord) MarshalJSON() ([]byte, error) {
	r, err := m.concat()
	if err != nil {
		return nil, err
	}
	return r.MarshalJSON()
}
