package format

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"strings"
	"sync"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	flatbuffers "github.com/google/flatbuffers/go"
)

// Arrow IPC files (Feather v2): a row group is one record batch. arrow-go's
// FileReader does not expose the footer's block list, and row counts live in
// each batch's metadata message, so planning parses the footer flatbuffer and
// reads each batch's (small) metadata message; data reads fetch one batch's
// metadata and body and decode them as a one-batch IPC stream.

const ipcMagic = "ARROW1"

type ipcBlock struct {
	offset  int64
	metaLen int32
	bodyLen int64
	rows    int64
}

type ipcFooter struct {
	uri       string
	sch       *arrow.Schema
	schemaMsg []byte // the schema as an IPC stream message, for decoding
	blocks    []ipcBlock
}

// ReadIPCFooter reads and checks the footer of the Arrow IPC file src: its
// schema and record batches (a row group each). Of o it uses
// FooterReadLength and Kept.
//
// Length: one pass of checks over the footer, each refusing what it finds.
func ReadIPCFooter(ctx context.Context, src Source, o Options) (ft Footer, err error) {
	obj := struct {
		URI  string
		Size int64
	}{src.URI(), src.Size()}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("format: %s: %s: %w; the file is truncated or not an Arrow IPC file: rewrite it", obj.URI, fmt.Sprintf(format, args...), ErrCorrupt)
	}
	defer func() {
		if r := recover(); r != nil {
			ft, err = nil, bad("undecodable footer (%v)", r)
		}
	}()
	const trailer = 4 + len(ipcMagic)
	if obj.Size < int64(8+trailer) {
		return nil, bad("%d bytes is too small", obj.Size)
	}
	tail := make([]byte, min(obj.Size, int64(o.FooterReadLength)))
	tailOff := obj.Size - int64(len(tail))
	if err := src.ReadAt(ctx, tail, tailOff); err != nil {
		return nil, fmt.Errorf("format: %s: reading Arrow IPC footer: %w", obj.URI, err)
	}
	if string(tail[len(tail)-len(ipcMagic):]) != ipcMagic {
		return nil, bad("no %q magic at the end", ipcMagic)
	}
	flen := int64(int32(binary.LittleEndian.Uint32(tail[len(tail)-trailer:])))
	if flen <= 0 || flen > obj.Size-int64(trailer)-8 {
		return nil, bad("footer length %d out of range", flen)
	}
	fstart := obj.Size - int64(trailer) - flen
	var fb []byte
	if fstart >= tailOff {
		fb = tail[fstart-tailOff : fstart-tailOff+flen]
	} else {
		fb = make([]byte, flen)
		if err := src.ReadAt(ctx, fb, fstart); err != nil {
			return nil, fmt.Errorf("format: %s: reading Arrow IPC footer: %w", obj.URI, err)
		}
	}

	if err := checkFooterFB(fb); err != nil {
		return nil, bad("%v", err)
	}
	// arrow-go's reader would read dictionary batches from outside the footer
	// region: refuse them here, by name.
	if names, found := ipcDictionaryFields(fb); found {
		return nil, fmt.Errorf("format: %s: dictionary-encoded Arrow IPC columns %s: %w; "+
			"cast them to their value type before writing (pyarrow: table.cast with the dictionary's value type), "+
			"or write Parquet, whose dictionary encoding meshfeed reads", obj.URI, strings.Join(names, ", "), ErrUnsupported)
	}
	// Schema: let arrow-go parse the footer's schema by handing it the whole
	// footer region through a ReaderAt that serves only the trailer.
	region := append(append([]byte(nil), fb...), tail[len(tail)-trailer:]...)
	fr, err := ipc.NewFileReader(&readerAtSeeker{
		ReaderAt: &tailReaderAt{ReaderAt: outsideFooter{fstart, obj.Size}, off: fstart, tail: region},
		size:     obj.Size,
	})
	if err != nil {
		return nil, bad("%v", err)
	}
	sch := fr.Schema()
	fr.Close()

	blocks, err := ipcBlocks(fb)
	if err != nil {
		return nil, bad("%v", err)
	}
	// Row counts: read each batch's metadata message (bounded concurrency).
	errs := make([]error, len(blocks))
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for i := range blocks {
		b := &blocks[i]
		if b.offset < 8 || b.metaLen < 8 || b.bodyLen < 0 || b.offset+int64(b.metaLen)+b.bodyLen > fstart {
			return nil, bad("record batch %d block [%d, +%d+%d) out of range", i, b.offset, b.metaLen, b.bodyLen)
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			meta := make([]byte, b.metaLen)
			if err := src.ReadAt(ctx, meta, b.offset); err != nil {
				errs[i] = fmt.Errorf("format: %s row group %d: %w", obj.URI, i, err)
				return
			}
			rows, body, err := ipcBatchRows(meta)
			if err == nil && body != b.bodyLen {
				err = fmt.Errorf("message body length %d, footer block says %d", body, b.bodyLen)
			}
			if err != nil {
				errs[i] = bad("record batch %d: %v", i, err)
				return
			}
			b.rows = rows
		}()
	}
	wg.Wait()
	for _, e := range errs {
		if e != nil {
			return nil, e
		}
	}
	var sm bytes.Buffer
	w := ipc.NewWriter(&sm, ipc.WithSchema(sch))
	if err := w.Close(); err != nil {
		return nil, fmt.Errorf("format: %s: re-encoding schema: %w", obj.URI, err)
	}
	msg := sm.Bytes()[:sm.Len()-8] // drop the end-of-stream marker
	return &ipcFooter{uri: obj.URI, sch: sch, schemaMsg: msg, blocks: blocks}, nil
}

// outsideFooter refuses reads outside the footer region that arrow-go's
// FileReader is handed (it must only read the footer and schema).
type outsideFooter struct{ off, size int64 }

func (o outsideFooter) ReadAt(p []byte, off int64) (int, error) {
	return 0, fmt.Errorf("read [%d, %d) outside the footer region [%d, %d)", off, off+int64(len(p)), o.off, o.size)
}

// ipcBlocks reads Footer.recordBatches (field 3: a vector of Block structs of
// 24 bytes: offset int64, metaDataLength int32, pad, bodyLength int64).
func ipcBlocks(fb []byte) ([]ipcBlock, error) {
	if len(fb) < 8 {
		return nil, fmt.Errorf("footer of %d bytes", len(fb))
	}
	var t flatbuffers.Table
	t.Bytes = fb
	t.Pos = flatbuffers.GetUOffsetT(fb)
	o := flatbuffers.UOffsetT(t.Offset(4 + 2*3))
	if o == 0 {
		return nil, nil
	}
	vec := t.Vector(o)
	n := t.VectorLen(o)
	if int(vec)+n*24 > len(fb) {
		return nil, fmt.Errorf("block vector of %d entries overruns the footer", n)
	}
	out := make([]ipcBlock, n)
	for i := range out {
		p := int(vec) + i*24
		out[i] = ipcBlock{
			offset:  int64(binary.LittleEndian.Uint64(fb[p:])),
			metaLen: int32(binary.LittleEndian.Uint32(fb[p+8:])),
			bodyLen: int64(binary.LittleEndian.Uint64(fb[p+16:])),
		}
	}
	return out, nil
}

// ipcDictionaryFields reports whether the footer fb lists dictionary batches
// or its schema has a dictionary-encoded field, with the names of the top-level
// fields that are (quoted; "a nested field" when only a child is). Footer:
// schema is field 1, dictionaries field 2; Schema.fields is field 1; Field:
// name 0, dictionary 4, children 5. The footer was checked (checkFooterFB).
func ipcDictionaryFields(fb []byte) (names []string, found bool) {
	var ft flatbuffers.Table
	ft.Bytes, ft.Pos = fb, flatbuffers.GetUOffsetT(fb)
	if o := flatbuffers.UOffsetT(ft.Offset(4 + 2*2)); o != 0 && ft.VectorLen(o) > 0 {
		found = true
	}
	o := flatbuffers.UOffsetT(ft.Offset(4 + 2*1))
	if o == 0 {
		return names, found
	}
	var sch flatbuffers.Table
	sch.Bytes, sch.Pos = fb, ft.Indirect(o+ft.Pos)
	var nested func(f flatbuffers.Table) bool
	nested = func(f flatbuffers.Table) bool {
		if f.Offset(4+2*4) != 0 {
			return true
		}
		co := flatbuffers.UOffsetT(f.Offset(4 + 2*5))
		if co == 0 {
			return false
		}
		for i := 0; i < f.VectorLen(co); i++ {
			var c flatbuffers.Table
			c.Bytes, c.Pos = fb, f.Indirect(f.Vector(co)+flatbuffers.UOffsetT(i*4))
			if nested(c) {
				return true
			}
		}
		return false
	}
	fo := flatbuffers.UOffsetT(sch.Offset(4 + 2*1))
	if fo == 0 {
		return names, found
	}
	for i := 0; i < sch.VectorLen(fo); i++ {
		var f flatbuffers.Table
		f.Bytes, f.Pos = fb, sch.Indirect(sch.Vector(fo)+flatbuffers.UOffsetT(i*4))
		if !nested(f) {
			continue
		}
		found = true
		if no := flatbuffers.UOffsetT(f.Offset(4)); no != 0 {
			names = append(names, fmt.Sprintf("%q", f.String(no+f.Pos)))
		} else {
			names = append(names, "a nested field")
		}
	}
	return names, found
}

// ipcBatchRows reads RecordBatch.length from an encapsulated message:
// [0xFFFFFFFF][int32 length][Message flatbuffer]; Message.header (field 2)
// is a RecordBatch whose field 0 is length.
func ipcBatchRows(meta []byte) (rows, body int64, err error) {
	defer func() {
		if r := recover(); r != nil {
			rows, body, err = 0, 0, fmt.Errorf("malformed flatbuffer (%v)", r)
		}
	}()
	msg, err := fbMessage(meta)
	if err != nil {
		return 0, 0, err
	}
	var m flatbuffers.Table
	m.Bytes = msg
	m.Pos = flatbuffers.GetUOffsetT(msg)
	if ht := m.Offset(4 + 2*1); ht == 0 || m.GetByte(flatbuffers.UOffsetT(ht)+m.Pos) != 3 { // MessageHeader.RecordBatch
		return 0, 0, fmt.Errorf("message is not a record batch")
	}
	if bo := flatbuffers.UOffsetT(m.Offset(4 + 2*3)); bo != 0 {
		body = m.GetInt64(bo + m.Pos)
	}
	ho := flatbuffers.UOffsetT(m.Offset(4 + 2*2))
	if ho == 0 {
		return 0, 0, fmt.Errorf("record batch without header")
	}
	var rb flatbuffers.Table
	m.Union(&rb, ho)
	// nodes (slot 1, 16-byte structs) and buffers (slot 2, 16-byte structs)
	// are allocated from by arrow-go's reader.
	for _, slot := range []int{1, 2} {
		if _, _, _, err := fbVector(&rb, slot, 16); err != nil {
			return 0, 0, err
		}
	}
	if lo := flatbuffers.UOffsetT(rb.Offset(4)); lo != 0 {
		rows = rb.GetInt64(lo + rb.Pos)
	}
	if rows < 0 {
		return 0, 0, fmt.Errorf("negative length %d", rows)
	}
	return rows, body, nil
}

// Schema is the file's schema.
func (f *ipcFooter) Schema() *arrow.Schema { return f.sch }

// OutputField is the field column j is delivered as.
func (f *ipcFooter) OutputField(j int) (arrow.Field, error) { return outputField(f.sch.Field(j)) }

// MayHoldNulls is false: the footer of an Arrow IPC file records no nulls
// (a batch's are found when it is decoded).
func (f *ipcFooter) MayHoldNulls(string) (bool, int64, bool) { return false, 0, true }

// RowGroups returns the record batches, one chunk each (the whole batch).
func (f *ipcFooter) RowGroups(proj []int) ([]RowGroupMeta, error) {
	out := make([]RowGroupMeta, len(f.blocks))
	for i, b := range f.blocks {
		n := int64(b.metaLen) + b.bodyLen
		out[i] = RowGroupMeta{Rows: b.rows, Bytes: n, DecodedBytes: b.bodyLen, Chunks: []Chunk{{Column: "", Offset: b.offset, Length: n}}}
	}
	return out, nil
}

type ipcDecoder struct {
	maxBytes int64
	uri      string
	opts     Options
	ft       *ipcFooter
	proj     []int
	sch      *arrow.Schema
}

// Decoder prepares the decoding of the projected columns of src.
func (f *ipcFooter) Decoder(src Source, proj []int, out []arrow.Field, o Options) (Decoder, error) {
	for i, fi := range proj {
		fld := f.sch.Field(fi)
		switch fld.Type.ID() {
		case arrow.LARGE_STRING, arrow.LARGE_BINARY, arrow.LARGE_LIST, arrow.DICTIONARY:
			return nil, fmt.Errorf("format: %s column %q: Arrow IPC column of type %s: %w; write it as string, binary or list", f.uri, fld.Name, fld.Type, ErrUnsupported)
		}
		if fld.Nullable && !isBinary(out[i].Type) {
			if _, ok := o.Fill[fld.Name]; ok {
				return nil, fmt.Errorf("format: %s column %q: fill values for Arrow IPC input: %w", f.uri, fld.Name, ErrUnsupported)
			}
		}
	}
	return &ipcDecoder{maxBytes: o.MaxBytes, uri: src.URI(), opts: o, ft: f, proj: proj, sch: arrow.NewSchema(out, nil)}, nil
}

func isBinary(t arrow.DataType) bool {
	return t.ID() == arrow.STRING || t.ID() == arrow.BINARY
}

// DecodeRowGroup decodes record batch rg from ra into a record of the
// projected columns allocated from outer.
func (d *ipcDecoder) DecodeRowGroup(ctx context.Context, rg int, ra Fetched, outer memory.Allocator) (rec arrow.RecordBatch, err error) {
	mem := newScopedAllocator(outer)
	defer func() {
		if r := recover(); r != nil {
			rec = nil
			if err = faultErr(d.uri, rg, r, d.opts.Missing); err == nil {
				err = fmt.Errorf("format: %s row group %d: undecodable record batch (%v): %w; the file is corrupt: rewrite it", d.uri, rg, r, ErrCorrupt)
			}
		}
		if err != nil {
			mem.freeAll() // what a failed decode left allocated
		}
	}()
	b := d.ft.blocks[rg]
	n := int64(b.metaLen) + b.bodyLen
	stream := make([]byte, len(d.ft.schemaMsg)+int(n)+8)
	copy(stream, d.ft.schemaMsg)
	if _, err := ra.ReadAt(stream[len(d.ft.schemaMsg):len(d.ft.schemaMsg)+int(n)], b.offset); err != nil {
		return nil, fmt.Errorf("format: %s row group %d: %w", d.uri, rg, classify(err, d.opts.Kept))
	}
	copy(stream[len(stream)-8:], []byte{0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0})
	if err := checkBatchBuffers(stream[len(d.ft.schemaMsg):len(d.ft.schemaMsg)+int(n)], int(b.metaLen), d.maxBytes); err != nil {
		return nil, fmt.Errorf("format: %s row group %d: %w: %w; the file is corrupt: rewrite it", d.uri, rg, err, ErrCorrupt)
	}
	rd, err := ipc.NewReader(bytes.NewReader(stream), ipc.WithAllocator(mem))
	if err != nil {
		return nil, fmt.Errorf("format: %s row group %d: %w", d.uri, rg, classify(err, d.opts.Kept))
	}
	defer rd.Release()
	if !rd.Next() {
		if err := rd.Err(); err != nil {
			return nil, fmt.Errorf("format: %s row group %d: %w", d.uri, rg, classify(err, d.opts.Kept))
		}
		return nil, fmt.Errorf("format: %s row group %d: no record batch: %w", d.uri, rg, ErrCorrupt)
	}
	full := rd.RecordBatch()
	if full.NumRows() != b.rows {
		return nil, fmt.Errorf("format: %s row group %d: batch has %d rows, metadata says %d: %w", d.uri, rg, full.NumRows(), b.rows, ErrCorrupt)
	}
	cols := make([]arrow.Array, len(d.proj))
	for i, fi := range d.proj {
		col := full.Column(fi)
		if col.NullN() > 0 && !isBinary(d.sch.Field(i).Type) {
			return nil, fmt.Errorf("format: %s row group %d column %q: %d nulls: %w; clean the data (fill values apply to Parquet input)", d.uri, rg, d.sch.Field(i).Name, col.NullN(), ErrNull)
		}
		cols[i] = makeArray(retype(col.Data(), d.sch.Field(i).Type))
	}
	rec = array.NewRecordBatch(d.sch, cols, b.rows)
	for _, c := range cols {
		c.Release()
	}
	return rec, nil
}

// retype views data as the output type (same layout: extension storage,
// non-nullable list children), sharing its buffers.
func retype(data arrow.ArrayData, t arrow.DataType) arrow.ArrayData {
	if arrow.TypeEqual(data.DataType(), t) {
		data.Retain()
		return data
	}
	var children []arrow.ArrayData
	switch tt := t.(type) {
	case *arrow.FixedSizeListType:
		children = []arrow.ArrayData{retype(data.Children()[0], tt.Elem())}
	case *arrow.ListType:
		children = []arrow.ArrayData{retype(data.Children()[0], tt.Elem())}
	}
	out := array.NewData(t, data.Len(), data.Buffers(), children, data.NullN(), data.Offset())
	for _, c := range children {
		c.Release()
	}
	return out
}

// makeArray wraps data in an array and drops the caller's reference to data.
func makeArray(data arrow.ArrayData) arrow.Array {
	a := array.MakeFromData(data)
	data.Release()
	return a
}

// scopedAllocator tracks what one decode allocates, so that when arrow-go's
// IPC reader panics half-way (it panics on some corrupt bodies), everything
// it had allocated can be freed: the caller's allocator stays balanced.
type scopedAllocator struct {
	memory.Allocator
	mu   sync.Mutex
	live map[*byte][]byte
}

func newScopedAllocator(mem memory.Allocator) *scopedAllocator {
	return &scopedAllocator{Allocator: mem, live: map[*byte][]byte{}}
}

func (s *scopedAllocator) Allocate(n int) []byte {
	b := s.Allocator.Allocate(n)
	if len(b) > 0 {
		s.mu.Lock()
		s.live[&b[0]] = b
		s.mu.Unlock()
	}
	return b
}

func (s *scopedAllocator) Reallocate(n int, b []byte) []byte {
	s.mu.Lock()
	if len(b) > 0 {
		delete(s.live, &b[0])
	}
	s.mu.Unlock()
	nb := s.Allocator.Reallocate(n, b)
	if len(nb) > 0 {
		s.mu.Lock()
		s.live[&nb[0]] = nb
		s.mu.Unlock()
	}
	return nb
}

func (s *scopedAllocator) Free(b []byte) {
	if len(b) > 0 {
		s.mu.Lock()
		delete(s.live, &b[0])
		s.mu.Unlock()
	}
	s.Allocator.Free(b)
}

// freeAll frees every allocation not yet freed (after a failed decode).
func (s *scopedAllocator) freeAll() {
	s.mu.Lock()
	live := s.live
	s.live = map[*byte][]byte{}
	s.mu.Unlock()
	for _, b := range live {
		s.Allocator.Free(b)
	}
}
