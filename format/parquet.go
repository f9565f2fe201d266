package format

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/parquet-go/parquet-go"
	pqformat "github.com/parquet-go/parquet-go/format"
)

// parquetFooter is the parsed footer of one Parquet file.
type parquetFooter struct {
	uri    string
	size   int64
	kept   []error // Options.Kept: storage errors passed on as they are
	pf     *parquet.File
	sch    *arrow.Schema
	leaves map[string][]int // top-level field name -> leaf column indexes
	raw    []byte           // the footer's thrift bytes
	arrow  arrowFooter      // arrow-go's parse of raw, made on first use (arrowMD)
	// der is what arrow-go's reader (pqarrow, the same mapping as
	// pyarrow's) derives from the schema, made on first use (derived).
	derivedOnce sync.Once
	der         *arrowDerived
}

// sourceReaderAt adapts a Source to io.ReaderAt for the footer parser. It
// reports short reads as errors, as io.ReaderAt must.
type sourceReaderAt struct {
	ctx context.Context
	src Source
}

func (r *sourceReaderAt) ReadAt(p []byte, off int64) (int, error) {
	if off >= r.src.Size() {
		return 0, io.EOF
	}
	n := len(p)
	if rem := r.src.Size() - off; int64(n) > rem {
		n = int(rem)
	}
	if err := r.src.ReadAt(r.ctx, p[:n], off); err != nil {
		return 0, err
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// tailReaderAt serves reads that fall inside an already-fetched tail of the
// object from memory, and the rest from storage.
type tailReaderAt struct {
	io.ReaderAt
	off  int64
	tail []byte
}

func (t *tailReaderAt) ReadAt(p []byte, off int64) (int, error) {
	if off >= t.off && off+int64(len(p)) <= t.off+int64(len(t.tail)) {
		return copy(p, t.tail[off-t.off:]), nil
	}
	return t.ReaderAt.ReadAt(p, off)
}

// classify wraps ErrCorrupt unless err came from storage (kept: the
// caller's Options.Kept, such as unavailable or not found) or was cancelled,
// which keeps its own sentinel.
func classify(err error, kept []error) error {
	for _, keep := range append([]error{context.Canceled, context.DeadlineExceeded}, kept...) {
		if errors.Is(err, keep) {
			return err
		}
	}
	return fmt.Errorf("%w: %w", ErrCorrupt, err)
}

// ReadParquetFooter reads and checks the footer of the Parquet file src:
// its schema, row groups and column chunk ranges. Of o it uses
// FooterReadLength and Kept.
//
// Length: one pass of checks over the footer, each refusing what it finds.
func ReadParquetFooter(ctx context.Context, src Source, o Options) (ft Footer, err error) {
	obj := struct {
		URI  string
		Size int64
	}{src.URI(), src.Size()}
	const minSize = 4 + 4 + 4 // magic, footer length, magic
	if obj.Size < minSize {
		return nil, fmt.Errorf("format: %s: %d bytes is too small to be a Parquet file: %w; rewrite the file", obj.URI, obj.Size, ErrCorrupt)
	}
	defer func() {
		if r := recover(); r != nil {
			ft, err = nil, fmt.Errorf("format: %s: undecodable Parquet footer (%v): %w; the file is corrupt: rewrite it", obj.URI, r, ErrCorrupt)
		}
	}()
	// Read the tail once ourselves: the footer length is checked against the
	// file size before parquet-go allocates a buffer of that length, and
	// parquet-go's own reads of the tail are served from it.
	tailLen := min(obj.Size, int64(max(o.FooterReadLength, 8)))
	tail := make([]byte, tailLen)
	if err := src.ReadAt(ctx, tail, obj.Size-tailLen); err != nil {
		return nil, fmt.Errorf("format: %s: reading Parquet footer: %w", obj.URI, classify(err, o.Kept))
	}
	if flen := int64(binary.LittleEndian.Uint32(tail[tailLen-8:])); flen > obj.Size-minSize {
		return nil, fmt.Errorf("format: %s: footer length %d does not fit in the file's %d bytes: %w; the file is truncated or not Parquet: rewrite it", obj.URI, flen, obj.Size, ErrCorrupt)
	}
	if flen := int64(binary.LittleEndian.Uint32(tail[tailLen-8:])); flen+8 > tailLen {
		// The footer is longer than the tail: fetch it whole, once, for both
		// parsers (parquet-go's and arrow-go's).
		tailLen = flen + 8
		tail = make([]byte, tailLen)
		if err := src.ReadAt(ctx, tail, obj.Size-tailLen); err != nil {
			return nil, fmt.Errorf("format: %s: reading Parquet footer: %w", obj.URI, classify(err, o.Kept))
		}
	}
	ra := &tailReaderAt{ReaderAt: &sourceReaderAt{ctx: ctx, src: src}, off: obj.Size - tailLen, tail: tail}
	pf, err := parquet.OpenFile(ra, obj.Size,
		parquet.SkipMagicBytes(true),
		parquet.SkipPageIndex(true),
		parquet.SkipBloomFilters(true),
		parquet.OptimisticRead(true),
		parquet.ReadBufferSize(int(tailLen)),
	)
	if err != nil {
		err = classify(err, o.Kept)
		if errors.Is(err, ErrCorrupt) {
			return nil, fmt.Errorf("format: %s: reading Parquet footer: %w; the file is truncated or not Parquet: rewrite it", obj.URI, err)
		}
		return nil, fmt.Errorf("format: %s: reading Parquet footer: %w", obj.URI, err)
	}
	p := &parquetFooter{uri: obj.URI, size: obj.Size, kept: o.Kept, pf: pf, leaves: map[string][]int{}}
	for i, path := range pf.Schema().Columns() {
		p.leaves[path[0]] = append(p.leaves[path[0]], i)
	}
	// The stored ARROW:schema is checked (decodeArrowSchema) before arrow-go
	// reads it too: arrow-go trusts its counts and can exhaust memory.
	var stored *arrow.Schema
	if s, ok := pf.Lookup("ARROW:schema"); ok {
		if stored, err = decodeArrowSchema(s); err != nil {
			return nil, fmt.Errorf("format: %s: ARROW:schema metadata: %w", obj.URI, err)
		}
	}
	// Every ARROW:schema value arrow-go may read must pass the same check
	// (Lookup returns only the first).
	for _, kv := range pf.Metadata().KeyValueMetadata {
		if s, _ := pf.Lookup("ARROW:schema"); kv.Key == "ARROW:schema" && kv.Value != s {
			if _, err := decodeArrowSchema(kv.Value); err != nil {
				return nil, fmt.Errorf("format: %s: ARROW:schema metadata: %w", obj.URI, err)
			}
		}
	}
	// The footer's bytes, for arrow-go's parse if one is needed (arrowMD).
	flen := int64(binary.LittleEndian.Uint32(tail[tailLen-8:]))
	p.raw = bytes.Clone(tail[tailLen-8-flen : tailLen-8])
	if stored != nil {
		p.sch = p.reconcile(stored)
	} else {
		d := p.derived()
		if d.err != nil {
			return nil, fmt.Errorf("format: %s: %w", obj.URI, d.err)
		}
		p.sch = d.pysch
	}
	if _, err := p.RowGroups(nil); err != nil {
		return nil, err
	}
	return p, nil
}

// decodeArrowSchema decodes the base64 IPC schema message that Arrow writers
// (pyarrow, arrow-go pqarrow) store under the ARROW:schema key: it is one IPC
// message, so followed by an end-of-stream marker it is a valid IPC stream.
func decodeArrowSchema(s string) (*arrow.Schema, error) {
	raw, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		if raw, err = base64.RawStdEncoding.DecodeString(s); err != nil {
			return nil, fmt.Errorf("not base64: %w: %w", err, ErrCorrupt)
		}
	}
	if err := checkSchemaMessage(raw); err != nil {
		return nil, fmt.Errorf("not an Arrow IPC schema: %w: %w", err, ErrCorrupt)
	}
	stream := append(raw, 0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0)
	rd, err := ipc.NewReader(bytes.NewReader(stream))
	if err != nil {
		return nil, fmt.Errorf("not an Arrow IPC schema: %w: %w", err, ErrCorrupt)
	}
	defer rd.Release()
	return rd.Schema(), nil
}

func (p *parquetFooter) Schema() *arrow.Schema { return p.sch }

// RowGroups returns row counts and the byte ranges of the projected chunks,
// checking that every range lies inside the file's data region.
func (p *parquetFooter) RowGroups(proj []int) ([]RowGroupMeta, error) {
	md := p.pf.Metadata()
	dataEnd := p.size - 8 // footer length + magic; the footer itself is below that
	out := make([]RowGroupMeta, len(md.RowGroups))
	est := map[int]leafEstimate{}
	for _, fi := range proj {
		for _, leaf := range p.leaves[p.sch.Field(fi).Name] {
			est[leaf] = p.leafEstimate(leaf, p.sch.Field(fi).Type)
		}
	}
	for ri := range md.RowGroups {
		rg := &md.RowGroups[ri]
		if rg.NumRows < 0 {
			return nil, fmt.Errorf("format: %s row group %d: negative row count %d: %w", p.uri, ri, rg.NumRows, ErrCorrupt)
		}
		out[ri].Rows = rg.NumRows
		for _, fi := range proj {
			name := p.sch.Field(fi).Name
			for _, leaf := range p.leaves[name] {
				if leaf >= len(rg.Columns) {
					return nil, fmt.Errorf("format: %s row group %d column %q: footer lists %d column chunks, want more than %d: %w", p.uri, ri, name, len(rg.Columns), leaf, ErrCorrupt)
				}
				off, n := chunkRange(&rg.Columns[leaf].MetaData)
				if off < 4 || n < 0 || off+n > dataEnd {
					return nil, fmt.Errorf("format: %s row group %d column %q: chunk range [%d, %d) outside the file's data (%d bytes): %w; the file is corrupt: rewrite it",
						p.uri, ri, name, off, off+n, p.size, ErrCorrupt)
				}
				out[ri].Chunks = append(out[ri].Chunks, Chunk{Column: name, Offset: off, Length: n})
				out[ri].Bytes += n
				out[ri].DecodedBytes += decodedChunkBytes(&rg.Columns[leaf].MetaData, est[leaf])
			}
		}
	}
	return out, nil
}

func chunkRange(md *pqformat.ColumnMetaData) (off, n int64) {
	// The same base parquet-go's FilePages reads from.
	off = md.DataPageOffset
	if md.DictionaryPageOffset != 0 {
		off = md.DictionaryPageOffset
	}
	return off, md.TotalCompressedSize
}

// chunkSizes returns the compressed and uncompressed bytes of column c's
// chunks in row group rg, by the footer.
func (d *parquetDecoder) chunkSizes(c *colDecoder, rg int) (comp, dec int64) {
	cols := d.pf.Metadata().RowGroups[rg].Columns
	for _, leaf := range c.leaves {
		if leaf < len(cols) {
			comp += cols[leaf].MetaData.TotalCompressedSize
			dec += cols[leaf].MetaData.TotalUncompressedSize
		}
	}
	return comp, dec
}
