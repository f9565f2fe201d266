package datagen

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
)

// Creator opens a new object for writing. Whatever was written becomes visible
// under uri only when Close returns nil. To abandon an object, Write calls
// Abort() error if the writer has it; otherwise it cancels the context it passed
// to Create and then calls Close (a cloud storage writer discards the object
// when its context is cancelled).
type Creator interface {
	Create(ctx context.Context, uri string) (io.WriteCloser, error)
}

// LocalCreator is a Creator for local paths. Each file is written to a temporary
// file beside it and renamed into place on Close, so a reader never sees a
// partial file and a failed write leaves nothing behind. (There is no fsync:
// atomic against failures of the writer, not against power loss.) Parent
// directories are created as needed.
type LocalCreator struct{}

// Create implements Creator.
func (LocalCreator) Create(_ context.Context, path string) (io.WriteCloser, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("datagen: %w", err)
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return nil, fmt.Errorf("datagen: %w", err)
	}
	return &atomicFile{f: f, path: path}, nil
}

type atomicFile struct {
	f    *os.File
	path string
	done bool
}

func (a *atomicFile) Write(p []byte) (int, error) { return a.f.Write(p) }

// Close commits the file: chmod to 0644 (CreateTemp makes 0600), close, rename.
func (a *atomicFile) Close() error {
	if a.done {
		return nil
	}
	a.done = true
	err := a.f.Chmod(0o644)
	if cerr := a.f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(a.f.Name(), a.path)
	}
	if err != nil {
		os.Remove(a.f.Name())
		return fmt.Errorf("datagen: commit %s: %w", a.path, err)
	}
	return nil
}

// Abort discards the temporary file.
func (a *atomicFile) Abort() error {
	if a.done {
		return nil
	}
	a.done = true
	a.f.Close()
	return os.Remove(a.f.Name())
}

// Option configures Write.
type Option func(*config)

type config struct {
	mem         memory.Allocator
	chunkBudget int64
}

func newConfig(opts []Option) config {
	c := config{mem: memory.DefaultAllocator, chunkBudget: 64 << 20}
	for _, o := range opts {
		o(&c)
	}
	return c
}

// WithAllocator sets the allocator the Parquet and IPC writers use for their
// buffers. Default: memory.DefaultAllocator; nil keeps the default. (The
// generated column data itself lives in Go slices that are reused from one
// row group to the next.)
func WithAllocator(mem memory.Allocator) Option {
	return func(c *config) {
		if mem != nil {
			c.mem = mem
		}
	}
}

// withChunkBudget sets how many bytes of generated Arrow data one Parquet write
// holds (default 64 MiB); a row group larger than that is written in chunks.
func withChunkBudget(n int64) Option { return func(c *config) { c.chunkBudget = max(n, 1) } }

// FileResult is one written file.
type FileResult struct {
	// URI is dir joined with the file name.
	URI string
	// FirstRow is the global id of the file's first row; Rows its row count.
	FirstRow, Rows int64
	// RowGroups is the row count of each row group (Parquet) or record batch (Arrow).
	RowGroups []int64
	// Bytes is the file size.
	Bytes int64
}

// Result is what Write wrote.
type Result struct {
	// Spec is the spec the files were written from.
	Spec Spec
	// Files are the files, in row order.
	Files []FileResult
	// Rows and Bytes are totals over Files.
	Rows, Bytes int64
	// Elapsed is the wall time of Write.
	Elapsed time.Duration
}

// JoinURI joins a directory URI (a local path or scheme://bucket/prefix) and a file name with one slash.
func JoinURI(dir, name string) string {
	if dir == "" {
		return name
	}
	return strings.TrimRight(dir, "/") + "/" + name
}

// Write writes the dataset s describes into dir (a local path or a URI that c
// understands) as the files of s.Plan(), one at a time, each through c. It
// stops at the first error, abandoning the file being written (files written
// before it stay) and returns the error naming the file. It honours ctx between
// row groups.
func Write(ctx context.Context, c Creator, dir string, s Spec, opts ...Option) (Result, error) {
	start := time.Now()
	cfg := newConfig(opts)
	plan, err := s.Plan()
	if err != nil {
		return Result{}, err
	}
	sc, err := s.Schema()
	if err != nil {
		return Result{}, err
	}
	res := Result{Spec: s}
	g := newGenerator(s, sc)
	for _, fp := range plan {
		uri := JoinURI(dir, fp.Name)
		n, err := writeFile(ctx, c, uri, s, sc, fp, g, cfg)
		if err != nil {
			return res, fmt.Errorf("datagen: write %s: %w", uri, err)
		}
		res.Files = append(res.Files, FileResult{URI: uri, FirstRow: fp.FirstRow, Rows: fp.Rows, RowGroups: fp.RowGroups, Bytes: n})
		res.Rows += fp.Rows
		res.Bytes += n
	}
	res.Elapsed = time.Since(start)
	return res, nil
}

// countingWriter counts bytes and hides the destination's Close from the
// Parquet writer (which closes any io.Closer it is given).
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

func writeFile(ctx context.Context, c Creator, uri string, s Spec, sc *arrow.Schema, fp FilePlan, g *generator, cfg config) (n int64, err error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wc, err := c.Create(fctx, uri)
	if err != nil {
		return 0, err
	}
	closed := false
	defer func() {
		if err == nil || closed {
			return // a failed Close has already disposed of the object
		}
		if a, ok := wc.(interface{ Abort() error }); ok {
			a.Abort()
			return
		}
		cancel()
		wc.Close()
	}()
	bw := bufio.NewWriterSize(wc, 1<<20)
	cw := &countingWriter{w: bw}
	switch s.Format {
	case FormatParquet:
		err = writeParquet(ctx, cw, s, sc, fp, g, cfg)
	case FormatArrow:
		err = writeArrow(ctx, cw, s, sc, fp, g, cfg)
	default:
		err = fmt.Errorf("%w: format %v", ErrInvalidSpec, s.Format)
	}
	if err != nil {
		return 0, err
	}
	if err = bw.Flush(); err != nil {
		return 0, err
	}
	closed = true
	if err = wc.Close(); err != nil {
		return 0, err
	}
	return cw.n, nil
}

func parquetCodec(c Compression) (compress.Compression, error) {
	switch c {
	case CompressionNone:
		return compress.Codecs.Uncompressed, nil
	case CompressionSnappy:
		return compress.Codecs.Snappy, nil
	case CompressionZstd:
		return compress.Codecs.Zstd, nil
	case CompressionGzip:
		return compress.Codecs.Gzip, nil
	case CompressionLZ4:
		return compress.Codecs.Lz4Raw, nil
	}
	return 0, fmt.Errorf("%w: compression %v", ErrInvalidSpec, c)
}

// storageSchema replaces extension types by their storage and stores the full
// schema, base64 IPC-encoded, under ARROW:schema: arrow-go's Parquet writer
// cannot map an extension type over fixed_size_list (v18.8.0: "not implemented:
// support for FIXED_SIZE_LIST"), but its reader restores one from ARROW:schema.
func storageSchema(sc *arrow.Schema, mem memory.Allocator) (*arrow.Schema, error) {
	var buf bytes.Buffer
	w := ipc.NewWriter(&buf, ipc.WithSchema(sc), ipc.WithAllocator(mem))
	if err := w.Close(); err != nil {
		return nil, fmt.Errorf("serialize schema: %w", err)
	}
	fields := make([]arrow.Field, sc.NumFields())
	for i, f := range sc.Fields() {
		if et, ok := f.Type.(arrow.ExtensionType); ok {
			f.Type = et.StorageType()
		}
		fields[i] = f
	}
	md := arrow.NewMetadata([]string{"ARROW:schema"}, []string{base64.StdEncoding.EncodeToString(buf.Bytes())})
	return arrow.NewSchema(fields, &md), nil
}

func writeParquet(ctx context.Context, w io.Writer, s Spec, sc *arrow.Schema, fp FilePlan, g *generator, cfg config) error {
	codec, err := parquetCodec(s.Compression)
	if err != nil {
		return err
	}
	ssc, err := storageSchema(sc, cfg.mem)
	if err != nil {
		return err
	}
	pprops := []parquet.WriterProperty{
		parquet.WithAllocator(cfg.mem),
		parquet.WithCompression(codec),
		parquet.WithDictionaryDefault(s.Dictionary),
		parquet.WithMaxRowGroupLength(s.RowGroupRows),
		parquet.WithCreatedBy("meshfeed datagen (arrow-go v18)"),
		parquet.WithPageIndexEnabled(s.PageIndex),
	}
	if s.PageBytes > 0 {
		pprops = append(pprops, parquet.WithDataPageSize(s.PageBytes))
	}
	if s.Dictionary {
		// Dictionary on means dictionary pages: turn off the writer's cost-based
		// fallback to plain (on by default for uncompressed columns). The
		// dictionary page size limit still applies.
		pqs, err := pqarrow.ToParquet(ssc, nil, pqarrow.DefaultWriterProps())
		if err != nil {
			return err
		}
		for i := 0; i < pqs.NumColumns(); i++ {
			pprops = append(pprops, parquet.WithDictionaryCostFallbackFor(pqs.Column(i).Path(), false))
		}
	}
	props := parquet.NewWriterProperties(pprops...)
	fw, err := pqarrow.NewFileWriter(ssc, w, props, pqarrow.NewArrowWriterProperties(pqarrow.WithAllocator(cfg.mem)))
	if err != nil {
		return err
	}
	chunk := max(1, min(s.RowGroupRows, cfg.chunkBudget/g.rowBytes()))
	row := fp.FirstRow
	for rg, rows := range fp.RowGroups {
		if err := ctx.Err(); err != nil {
			fw.Close()
			return err
		}
		if rows <= chunk {
			rec := g.record(ssc, row, int(rows), false)
			err = fw.Write(rec)
			rec.Release()
		} else {
			// A row group larger than the chunk budget: append chunks to one
			// buffered row group (its encoded pages are held until it closes).
			fw.NewBufferedRowGroup()
			for off := int64(0); off < rows && err == nil; off += chunk {
				rec := g.record(ssc, row+off, int(min(chunk, rows-off)), false)
				err = fw.WriteBuffered(rec)
				rec.Release()
			}
		}
		if err != nil {
			fw.Close()
			return fmt.Errorf("row group %d: %w", rg, err)
		}
		row += rows
	}
	return fw.Close()
}

func writeArrow(ctx context.Context, w io.Writer, s Spec, sc *arrow.Schema, fp FilePlan, g *generator, cfg config) error {
	opts := []ipc.Option{ipc.WithSchema(sc), ipc.WithAllocator(cfg.mem)}
	switch s.Compression {
	case CompressionNone:
	case CompressionZstd:
		opts = append(opts, ipc.WithZstd())
	case CompressionLZ4:
		opts = append(opts, ipc.WithLZ4())
	default:
		return fmt.Errorf("%w: compression %v with format arrow", ErrInvalidSpec, s.Compression)
	}
	fw, err := ipc.NewFileWriter(w, opts...)
	if err != nil {
		return err
	}
	row := fp.FirstRow
	for b, rows := range fp.RowGroups {
		if err := ctx.Err(); err != nil {
			fw.Close()
			return err
		}
		rec := g.record(sc, row, int(rows), true)
		err := fw.Write(rec)
		rec.Release()
		if err != nil {
			fw.Close()
			return fmt.Errorf("record batch %d: %w", b, err)
		}
		row += rows
	}
	return fw.Close()
}

// generator builds record batches of a Spec from Go slices it reuses between
// calls: the arrays wrap those slices, so a batch must be written before the
// next call.
type generator struct {
	s       Spec
	sc      *arrow.Schema
	image   *TensorType
	ids     []int64
	labels  []int32
	feats   []float32
	offsets []int32
	toks    []int32
	pix     []uint8
}

func newGenerator(s Spec, sc *arrow.Schema) *generator {
	g := &generator{s: s, sc: sc}
	if i := sc.FieldIndices("image"); len(i) == 1 {
		g.image = sc.Field(i[0]).Type.(*TensorType)
	}
	return g
}

// rowBytes is an upper bound of the generated bytes per row.
func (g *generator) rowBytes() int64 {
	n := int64(8 + 4 + 4*g.s.Features)
	if g.s.Tokens {
		n += 4 * int64(g.s.TokensMax+1)
	}
	if g.s.HasImage() {
		n += int64(g.s.Image[0] * g.s.Image[1] * g.s.Image[2])
	}
	return n
}

func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

func bytesOf[T int32 | int64 | float32 | uint8](s []T) *memory.Buffer {
	switch v := any(s).(type) {
	case []int64:
		return memory.NewBufferBytes(arrow.Int64Traits.CastToBytes(v))
	case []int32:
		return memory.NewBufferBytes(arrow.Int32Traits.CastToBytes(v))
	case []float32:
		return memory.NewBufferBytes(arrow.Float32Traits.CastToBytes(v))
	case []uint8:
		return memory.NewBufferBytes(v)
	}
	panic("unreachable")
}

// record returns rows [first, first+n) as a record batch of schema sc. With
// ext, the image column is a TensorArray; otherwise its storage.
func (g *generator) record(sc *arrow.Schema, first int64, n int, ext bool) arrow.RecordBatch {
	s := g.s
	cols := make([]arrow.Array, 0, sc.NumFields())
	g.ids = grow(g.ids, n)
	g.labels = grow(g.labels, n)
	for i := range n {
		id := first + int64(i)
		g.ids[i] = id
		g.labels[i] = Label(s.Seed, id)
	}
	cols = append(cols, primitive(arrow.PrimitiveTypes.Int64, n, bytesOf(g.ids)),
		primitive(arrow.PrimitiveTypes.Int32, n, bytesOf(g.labels)))
	if s.Features > 0 {
		f := s.Features
		g.feats = grow(g.feats, n*f)
		for i := range n {
			Features(s.Seed, first+int64(i), g.feats[i*f:(i+1)*f])
		}
		child := array.NewData(arrow.PrimitiveTypes.Float32, n*f, []*memory.Buffer{nil, bytesOf(g.feats)}, nil, 0, 0)
		cols = append(cols, fixedList(sc.Field(len(cols)).Type, n, child))
	}
	if s.Tokens {
		g.offsets = grow(g.offsets, n+1)
		total := 0
		for i := range n {
			g.offsets[i] = int32(total)
			total += TokenLen(s.Seed, first+int64(i), s.TokensMin, s.TokensMax)
		}
		g.offsets[n] = int32(total)
		g.toks = grow(g.toks, total)
		for i := range n {
			fillTokens(g.toks[g.offsets[i]:g.offsets[i+1]], s.Seed, first+int64(i))
		}
		child := array.NewData(arrow.PrimitiveTypes.Int32, total, []*memory.Buffer{nil, bytesOf(g.toks)}, nil, 0, 0)
		data := array.NewData(sc.Field(len(cols)).Type, n, []*memory.Buffer{nil, bytesOf(g.offsets)}, []arrow.ArrayData{child}, 0, 0)
		child.Release()
		cols = append(cols, array.MakeFromData(data))
		data.Release()
	}
	if g.image != nil {
		e := s.Image[0] * s.Image[1] * s.Image[2]
		g.pix = grow(g.pix, n*e)
		for i := range n {
			Pixels(s.Seed, first+int64(i), g.pix[i*e:(i+1)*e])
		}
		child := array.NewData(arrow.PrimitiveTypes.Uint8, n*e, []*memory.Buffer{nil, bytesOf(g.pix)}, nil, 0, 0)
		storage := fixedList(g.image.StorageType(), n, child)
		if ext {
			cols = append(cols, array.NewExtensionArrayWithStorage(g.image, storage))
			storage.Release()
		} else {
			cols = append(cols, storage)
		}
	}
	rec := array.NewRecordBatch(sc, cols, int64(n))
	for _, c := range cols {
		c.Release()
	}
	return rec
}

// primitive returns a non-null array of type t and length n over buf.
func primitive(t arrow.DataType, n int, buf *memory.Buffer) arrow.Array {
	data := array.NewData(t, n, []*memory.Buffer{nil, buf}, nil, 0, 0)
	defer data.Release()
	return array.MakeFromData(data)
}

// fixedList wraps child (released here) as a fixed_size_list array of type t and length n.
func fixedList(t arrow.DataType, n int, child arrow.ArrayData) arrow.Array {
	data := array.NewData(t, n, []*memory.Buffer{nil}, []arrow.ArrayData{child}, 0, 0)
	child.Release()
	defer data.Release()
	return array.MakeFromData(data)
}
