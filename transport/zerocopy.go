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
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/apache/arrow-go/v18/arrow"
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
	pending atomic.Int32 // borrowed pieces not yet freed
	rel     *frameRelease
}

// frameRelease is what a frame releases, once: by done when gRPC and the
// sender have freed its borrowed pieces, or else by a cleanup once the frame
// is garbage. (gRPC drops, without freeing it, a message whose stream ended
// while SendMsg was queueing it: a stream cancelled by its client, or one
// the idle timeout gave up on. Its step, and its share of the memory
// account, would otherwise never come back.) Nothing can read a garbage
// frame's pieces, so releasing them then is safe.
type frameRelease struct {
	once    sync.Once
	payload ipc.Payload
	release func() // runs once, after the payload is released
}

func (r *frameRelease) run() {
	r.once.Do(func() {
		r.payload.Release()
		if r.release != nil {
			r.release()
		}
	})
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
func (f *frame) done() { f.rel.run() }

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
	f = &frame{rel: &frameRelease{payload: payload, release: release}}
	if body == nil {
		body = &bodyParts{}
		if err := payload.SerializeBody(body); err != nil {
			f.done()
			return nil, fmt.Errorf("transport: serialize record body: %w", err)
		}
	}
	meta := payload.Meta()
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
		return f, nil
	}
	runtime.AddCleanup(f, (*frameRelease).run, f.rel)
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
