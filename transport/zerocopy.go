package transport

// The zero-copy DoGet write path.
//
// arrow-go's flight.Writer serializes every record body into a bytes.Buffer
// and gRPC's proto codec then marshals the FlightData into a second, freshly
// zeroed buffer: two copies of every step before HTTP/2 framing. Here each
// step's FlightData protobuf is encoded by hand as a mem.BufferSlice whose
// large pieces are the Arrow buffers themselves; a server codec hands that
// slice to gRPC as the marshalled message. The bytes on the wire are exactly
// those of proto.Marshal of the FlightData the stock writer sends.
//
// gRPC may still hold the buffers after SendMsg returns (its transport
// writes them out later, from its own goroutine), so the IPC payload, and the
// step's record and budget share with it, are released only when gRPC has
// freed every buffer borrowed from the record.

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/bitutil"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // registers the "proto" codec delegated to
	"google.golang.org/grpc/mem"
)

// zeroCopyMinBuffer is the smallest body buffer handed to gRPC in place.
// Smaller buffers, the padding and the protobuf framing are copied into
// small heap chunks: gRPC refcounts only buffers above its pooling threshold
// (1 KiB), and a few large pieces write faster than many small ones.
const zeroCopyMinBuffer = 32 << 10

// Protobuf tags of the FlightData fields sent (wire type 2, length-delimited):
// data_header = 2, app_metadata = 3, data_body = 1000.
const (
	tagDataHeader  = 2<<3 | 2
	tagAppMetadata = 3<<3 | 2
	tagDataBody    = 1000<<3 | 2
)

// frame is one FlightData message encoded for gRPC: the protobuf bytes as a
// BufferSlice whose large pieces are the body buffers of an IPC payload. It
// is the mem.BufferPool of its borrowed pieces: when gRPC and the sender have
// freed them all, the payload is released and release runs.
type frame struct {
	bufs    mem.BufferSlice
	size    int
	payload ipc.Payload
	pending atomic.Int32 // borrowed pieces not yet freed
	release func()       // runs once, when the last borrowed piece is freed
}

// Get implements mem.BufferPool. gRPC does not allocate from a frame; it
// answers a fresh slice should that ever change.
func (f *frame) Get(n int) *[]byte {
	b := make([]byte, n)
	return &b
}

// Put implements mem.BufferPool: gRPC calls it once per borrowed piece, when
// that piece's last reference is freed.
func (f *frame) Put(*[]byte) {
	if f.pending.Add(-1) == 0 {
		f.done()
	}
}

// done releases the payload and runs release.
func (f *frame) done() {
	f.payload.Release()
	if f.release != nil {
		f.release()
	}
}

// free drops the sender's references to the frame's pieces. Call it once,
// after SendMsg returned (whether or not it failed).
func (f *frame) free() { f.bufs.Free() }

// bodyParts collects the slices SerializeBody writes, without copying them.
type bodyParts struct {
	parts [][]byte
	n     int
}

func (b *bodyParts) Write(p []byte) (int, error) {
	b.parts = append(b.parts, p)
	b.n += len(p)
	return len(p), nil
}

// newFrame encodes the FlightData message of payload with appMeta, taking
// ownership of payload: it is released, and then release runs, once gRPC and
// the caller (with free) have dropped the frame. On error payload is
// released and release runs before newFrame returns.
func newFrame(payload ipc.Payload, appMeta []byte, release func()) (f *frame, err error) {
	return newFrameBody(payload, nil, appMeta, release)
}

// newFrameBody is newFrame with the message body given as its pieces (the
// bytes the payload's body would serialize to), or, when body is nil, taken
// from the payload.
func newFrameBody(payload ipc.Payload, body *bodyParts, appMeta []byte, release func()) (f *frame, err error) {
	f = &frame{payload: payload, release: release}
	if body == nil {
		body = &bodyParts{}
		if err := f.payload.SerializeBody(body); err != nil {
			f.done()
			return nil, fmt.Errorf("transport: serialize record body: %w", err)
		}
	}
	meta := f.payload.Meta()
	var header []byte
	if meta != nil {
		header = meta.Bytes()
		defer meta.Release()
	}

	// Fields in number order, empty ones omitted, as proto.Marshal does for
	// proto3 bytes fields; flight_descriptor (1) is never set on DoGet.
	small := make([]byte, 0, 32+len(header)+len(appMeta))
	small = appendBytesField(small, tagDataHeader, header)
	small = appendBytesField(small, tagAppMetadata, appMeta)
	if body.n > 0 {
		small = appendVarint(small, tagDataBody)
		small = appendVarint(small, uint64(body.n))
	}
	var borrowed []mem.Buffer
	for _, p := range body.parts {
		if len(p) < zeroCopyMinBuffer || mem.IsBelowBufferPoolingThreshold(len(p)) {
			small = append(small, p...)
			continue
		}
		if len(small) > 0 {
			f.bufs = append(f.bufs, mem.SliceBuffer(small))
			small = make([]byte, 0, 256)
		}
		p = p[:len(p):len(p)] // mem.NewBuffer pools by capacity: make it the length
		b := mem.NewBuffer(&p, f)
		f.bufs = append(f.bufs, b)
		borrowed = append(borrowed, b)
	}
	if len(small) > 0 {
		f.bufs = append(f.bufs, mem.SliceBuffer(small))
	}
	f.size = f.bufs.Len()
	f.pending.Store(int32(len(borrowed)))
	if len(borrowed) == 0 {
		// Everything was copied: nothing ties the payload to gRPC.
		f.done()
	}
	return f, nil
}

// appendBytesField appends a length-delimited field unless v is empty.
func appendBytesField(b []byte, tag uint64, v []byte) []byte {
	if len(v) == 0 {
		return b
	}
	b = appendVarint(b, tag)
	b = appendVarint(b, uint64(len(v)))
	return append(b, v...)
}

// appendVarint appends v as a protobuf base-128 varint.
func appendVarint(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

// flightCodec is the server's gRPC codec: it marshals a *frame as its
// pre-encoded buffers and delegates everything else to gRPC's proto codec.
// It is forced on the server (grpc.ForceServerCodecV2), so no global codec
// registration changes.
type flightCodec struct {
	proto encoding.CodecV2
}

// newFlightCodec wraps gRPC's registered proto codec.
func newFlightCodec() (flightCodec, error) {
	c := encoding.GetCodecV2("proto")
	if c == nil {
		return flightCodec{}, errors.New("transport: gRPC proto codec is not registered")
	}
	return flightCodec{proto: c}, nil
}

// Marshal implements encoding.CodecV2. A frame's pieces gain one reference,
// which gRPC frees when it has written (or dropped) the message.
func (c flightCodec) Marshal(v any) (mem.BufferSlice, error) {
	if f, ok := v.(*frame); ok {
		f.bufs.Ref()
		return slices.Clone(f.bufs), nil
	}
	return c.proto.Marshal(v)
}

// Unmarshal implements encoding.CodecV2.
func (c flightCodec) Unmarshal(data mem.BufferSlice, v any) error {
	return c.proto.Unmarshal(data, v)
}

// Name implements encoding.CodecV2: the wire format is protobuf.
func (c flightCodec) Name() string { return c.proto.Name() }

// zeroCopyFrames counts the steps sent zero-copy (tests check the path is
// taken); forceStockWriter makes new streams use the stock flight.Writer
// (benchmarks compare the two). Neither is exposed.
// multiFrames counts those of them sent as the virtual concatenation of
// their slices (a multiRecord).
var (
	zeroCopyFrames   atomic.Int64
	multiFrames      atomic.Int64
	forceStockWriter atomic.Bool
)

// zeroCopyWriter sends records as frames on a gRPC server stream whose
// server forces flightCodec.
type zeroCopyWriter struct {
	ss     grpc.ServerStream
	schema *arrow.Schema
	opts   []ipc.Option
}

// newZeroCopyWriter returns a writer over w when the zero-copy path can send
// this stream: w is a gRPC server stream (so its messages go through
// flightCodec), the bodies are not compressed and the schema has no
// dictionaries (whose batches only the stock ipc.Writer emits). Otherwise it
// returns nil and the stock flight.Writer is used.
func newZeroCopyWriter(w flight.DataStreamWriter, schema *arrow.Schema, zstd bool, alloc memory.Allocator) *zeroCopyWriter {
	ss, ok := w.(grpc.ServerStream)
	if !ok || zstd || forceStockWriter.Load() || schemaHasDictionary(schema) {
		return nil
	}
	return &zeroCopyWriter{ss: ss, schema: schema, opts: []ipc.Option{ipc.WithAllocator(alloc)}}
}

// write sends rec with appMeta as one FlightData message. release runs once
// gRPC no longer needs rec's buffers (possibly after write returns, from
// another goroutine; before it returns on an encoding error): the caller
// must keep rec alive until then.
func (z *zeroCopyWriter) write(rec arrow.RecordBatch, appMeta []byte, release func()) (err error) {
	if !rec.Schema().Equal(z.schema) {
		release()
		return errors.New("transport: arrow/ipc: tried to write record batch with different schema")
	}
	var (
		payload ipc.Payload
		body    *bodyParts
	)
	if m, ok := rec.(*multiRecord); ok {
		payload, body, err = m.payload(z.opts)
	} else {
		payload, err = recordPayload(rec, z.opts)
	}
	if err != nil {
		release()
		return err
	}
	f, err := newFrameBody(payload, body, appMeta, release)
	if err != nil {
		return err
	}
	defer f.free()
	zeroCopyFrames.Add(1)
	if body != nil {
		multiFrames.Add(1)
	}
	return z.ss.SendMsg(f)
}

// recordPayload is ipc.GetRecordBatchPayload, with a panic of the encoder
// turned into an error.
func recordPayload(rec arrow.RecordBatch, opts []ipc.Option) (p ipc.Payload, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("transport: encode record batch: %v", r)
		}
	}()
	p, err = ipc.GetRecordBatchPayload(rec, opts...)
	if err != nil {
		return ipc.Payload{}, fmt.Errorf("transport: encode record batch: %w", err)
	}
	return p, nil
}

// schemaHasDictionary reports whether any field, at any depth, is
// dictionary-encoded.
func schemaHasDictionary(s *arrow.Schema) bool {
	for _, f := range s.Fields() {
		if typeHasDictionary(f.Type) {
			return true
		}
	}
	return false
}

func typeHasDictionary(dt arrow.DataType) bool {
	switch t := dt.(type) {
	case *arrow.DictionaryType:
		return true
	case arrow.ExtensionType:
		return typeHasDictionary(t.StorageType())
	case arrow.NestedType:
		for _, f := range t.Fields() {
			if typeHasDictionary(f.Type) {
				return true
			}
		}
	}
	return false
}

// The virtual concatenation of a step's slices.
//
// A step is its slices concatenated, one Arrow buffer per column buffer.
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

// forceConcat makes the pipeline concatenate every step's slices into a new
// record (benchmarks compare the two). It is not exposed.
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
