package datagen

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
)

var randSeed = flag.Uint64("datagen.seed", 0, "seed of TestWriteRandomSpecs (0: random; env DATAGEN_SEED also works)")

func TestMain(m *testing.M) {
	RegisterTensorType()
	RegisterTensorType() // idempotent
	os.Exit(m.Run())
}

// wantCodec is what each Compression must put in a Parquet column chunk.
var wantCodec = map[Compression]compress.Compression{
	CompressionNone:   compress.Codecs.Uncompressed,
	CompressionSnappy: compress.Codecs.Snappy,
	CompressionZstd:   compress.Codecs.Zstd,
	CompressionGzip:   compress.Codecs.Gzip,
	CompressionLZ4:    compress.Codecs.Lz4Raw,
}

// Magic numbers that start each compressed Arrow IPC buffer (after its
// 8-byte uncompressed length).
var (
	zstdMagic = []byte{0x28, 0xB5, 0x2F, 0xFD}
	lz4Magic  = []byte{0x04, 0x22, 0x4D, 0x18}
)

// checkDataset reads every file of res back with arrow-go's own readers and
// checks it against s: file names, schema, row groups, codec, dictionary
// pages, and every value against the pure functions.
func checkDataset(t *testing.T, dir string, s Spec, res Result, mem memory.Allocator) {
	t.Helper()
	plan, err := s.Plan()
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Files) != len(plan) || res.Rows != s.Rows {
		t.Fatalf("Write wrote %d files, %d rows, want %d, %d", len(res.Files), res.Rows, len(plan), s.Rows)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != len(plan) {
		t.Errorf("%s holds %d entries, want %d files (no temporaries)", dir, len(entries), len(plan))
	}
	sc, _ := s.Schema()
	var total int64
	for i, fp := range plan {
		fr := res.Files[i]
		if fr.URI != filepath.Join(dir, fp.Name) || fr.FirstRow != fp.FirstRow || fr.Rows != fp.Rows {
			t.Errorf("file %d = %+v, want %s from row %d, %d rows", i, fr, fp.Name, fp.FirstRow, fp.Rows)
		}
		raw, err := os.ReadFile(fr.URI)
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(raw)) != fr.Bytes {
			t.Errorf("%s: Result says %d bytes, file has %d", fp.Name, fr.Bytes, len(raw))
		}
		total += fr.Bytes
		var cols []*arrow.Chunked
		switch s.Format {
		case FormatParquet:
			cols = readParquet(t, raw, s, fp, mem)
		case FormatArrow:
			cols = readArrow(t, raw, s, fp, sc, mem)
		}
		checkValues(t, fp.Name, s, fp, sc, cols)
		for _, c := range cols {
			c.Release()
		}
	}
	if total != res.Bytes {
		t.Errorf("Result.Bytes = %d, files sum to %d", res.Bytes, total)
	}
}

func readParquet(t *testing.T, raw []byte, s Spec, fp FilePlan, mem memory.Allocator) []*arrow.Chunked {
	t.Helper()
	r, err := file.NewParquetReader(bytes.NewReader(raw), file.WithReadProps(parquet.NewReaderProperties(mem)))
	if err != nil {
		t.Fatalf("%s: %v", fp.Name, err)
	}
	defer r.Close()
	if r.MetaData().KeyValueMetadata().FindValue("ARROW:schema") == nil {
		t.Errorf("%s: no ARROW:schema in the key-value metadata", fp.Name)
	}
	if got := r.NumRowGroups(); got != len(fp.RowGroups) {
		t.Fatalf("%s: %d row groups, want %d", fp.Name, got, len(fp.RowGroups))
	}
	for g, want := range fp.RowGroups {
		rg := r.MetaData().RowGroup(g)
		if rg.NumRows() != want {
			t.Errorf("%s: row group %d has %d rows, want %d", fp.Name, g, rg.NumRows(), want)
		}
		for c := 0; c < rg.NumColumns(); c++ {
			cc, err := rg.ColumnChunk(c)
			if err != nil {
				t.Fatal(err)
			}
			if cc.Compression() != wantCodec[s.Compression] {
				t.Errorf("%s: row group %d column %s codec %v, want %v", fp.Name, g, cc.PathInSchema(), cc.Compression(), wantCodec[s.Compression])
			}
			// The test files are far below the 1 MiB dictionary page limit, so
			// with Dictionary every column chunk has a dictionary page.
			if dict := cc.HasDictionaryPage(); dict != s.Dictionary {
				t.Errorf("%s: row group %d column %s dictionary page %v, want %v", fp.Name, g, cc.PathInSchema(), dict, s.Dictionary)
			}
		}
	}
	fr, err := pqarrow.NewFileReader(r, pqarrow.ArrowReadProperties{BatchSize: 1000}, mem)
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := fr.ReadTable(context.Background())
	if err != nil {
		t.Fatalf("%s: ReadTable: %v", fp.Name, err)
	}
	defer tbl.Release()
	if tbl.NumRows() != fp.Rows {
		t.Errorf("%s: ReadTable has %d rows, want %d", fp.Name, tbl.NumRows(), fp.Rows)
	}
	cols := make([]*arrow.Chunked, tbl.NumCols())
	for i := range cols {
		cols[i] = tbl.Column(i).Data()
		cols[i].Retain()
	}
	checkSchema(t, fp.Name, s, tbl.Schema())
	return cols
}

func readArrow(t *testing.T, raw []byte, s Spec, fp FilePlan, sc *arrow.Schema, mem memory.Allocator) []*arrow.Chunked {
	t.Helper()
	r, err := ipc.NewFileReader(bytes.NewReader(raw), ipc.WithAllocator(mem))
	if err != nil {
		t.Fatalf("%s: %v", fp.Name, err)
	}
	defer r.Close()
	checkSchema(t, fp.Name, s, r.Schema())
	if r.NumRecords() != len(fp.RowGroups) {
		t.Fatalf("%s: %d record batches, want %d", fp.Name, r.NumRecords(), len(fp.RowGroups))
	}
	chunks := make([][]arrow.Array, sc.NumFields())
	for b, want := range fp.RowGroups {
		rec, err := r.RecordBatchAt(b)
		if err != nil {
			t.Fatalf("%s: batch %d: %v", fp.Name, b, err)
		}
		if rec.NumRows() != want {
			t.Errorf("%s: batch %d has %d rows, want %d", fp.Name, b, rec.NumRows(), want)
		}
		for c := range chunks {
			chunks[c] = append(chunks[c], rec.Column(c))
		}
		defer rec.Release()
	}
	cols := make([]*arrow.Chunked, len(chunks))
	for c := range cols {
		cols[c] = arrow.NewChunked(sc.Field(c).Type, chunks[c])
	}
	hasZstd, hasLZ4 := bytes.Contains(raw, zstdMagic), bytes.Contains(raw, lz4Magic)
	if hasZstd != (s.Compression == CompressionZstd) || hasLZ4 != (s.Compression == CompressionLZ4) {
		t.Errorf("%s: zstd frames %v, lz4 frames %v, want compression %v", fp.Name, hasZstd, hasLZ4, s.Compression)
	}
	return cols
}

func checkSchema(t *testing.T, name string, s Spec, got *arrow.Schema) {
	t.Helper()
	want, _ := s.Schema()
	if got.NumFields() != want.NumFields() {
		t.Fatalf("%s: schema %v, want %v", name, got, want)
	}
	for i, w := range want.Fields() {
		g := got.Field(i)
		if g.Name != w.Name || !arrow.TypeEqual(g.Type, w.Type) || g.Nullable {
			t.Errorf("%s: field %d = %v, want %v", name, i, g, w)
		}
	}
}

func checkValues(t *testing.T, name string, s Spec, fp FilePlan, sc *arrow.Schema, cols []*arrow.Chunked) {
	t.Helper()
	bad := 0
	fail := func(format string, args ...any) {
		if bad++; bad <= 10 {
			t.Errorf("%s: "+format, append([]any{name}, args...)...)
		}
	}
	for c, f := range sc.Fields() {
		row := fp.FirstRow
		for _, ch := range cols[c].Chunks() {
			if ch.NullN() != 0 {
				fail("column %s has %d nulls", f.Name, ch.NullN())
			}
			if ext, ok := ch.(array.ExtensionArray); ok {
				ch = ext.Storage()
			}
			for i := 0; i < ch.Len(); i++ {
				id := row + int64(i)
				switch f.Name {
				case "id":
					if v := ch.(*array.Int64).Value(i); v != id {
						fail("id at row %d = %d", id, v)
					}
				case "label":
					if v, w := ch.(*array.Int32).Value(i), Label(s.Seed, id); v != w {
						fail("label(%d) = %d, want %d", id, v, w)
					}
				case "features":
					l := ch.(*array.FixedSizeList)
					st, end := l.ValueOffsets(i)
					vals := l.ListValues().(*array.Float32).Float32Values()[st:end]
					if len(vals) != s.Features {
						fail("features(%d) has %d values, want %d", id, len(vals), s.Features)
					}
					for j, v := range vals {
						if w := Feature(s.Seed, id, j); v != w {
							fail("features(%d)[%d] = %v, want %v", id, j, v, w)
						}
					}
				case "tokens":
					l := ch.(*array.List)
					st, end := l.ValueOffsets(i)
					vals := l.ListValues().(*array.Int32).Int32Values()[st:end]
					want := Tokens(s.Seed, id, s.TokensMin, s.TokensMax)
					if fmt.Sprint(vals) != fmt.Sprint(want) {
						fail("tokens(%d) = %v, want %v", id, vals, want)
					}
				case "image":
					l := ch.(*array.FixedSizeList)
					st, end := l.ValueOffsets(i)
					vals := l.ListValues().(*array.Uint8).Uint8Values()[st:end]
					if len(vals) != s.Image[0]*s.Image[1]*s.Image[2] {
						fail("image(%d) has %d values", id, len(vals))
					}
					for j, v := range vals {
						if w := Pixel(s.Seed, id, j); v != w {
							fail("image(%d)[%d] = %v, want %v", id, j, v, w)
						}
					}
				}
			}
			row += int64(ch.Len())
		}
		if row != fp.FirstRow+fp.Rows {
			fail("column %s has %d rows, want %d", f.Name, row-fp.FirstRow, fp.Rows)
		}
	}
}

func writeAndCheck(t *testing.T, s Spec, opts ...Option) Result {
	t.Helper()
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	dir := t.TempDir()
	res, err := Write(context.Background(), LocalCreator{}, dir, s, append([]Option{WithAllocator(mem)}, opts...)...)
	if err != nil {
		t.Fatalf("Write(%+v) = %v", s, err)
	}
	if res.Spec != s {
		t.Errorf("Result.Spec = %+v, want %+v", res.Spec, s)
	}
	checkDataset(t, dir, s, res, mem)
	return res
}

// Every combination of format, compression, dictionary and optional columns.
func TestWriteMatrix(t *testing.T) {
	for _, format := range []Format{FormatParquet, FormatArrow} {
		for c := range compressionNames {
			comp := Compression(c)
			for _, dict := range []bool{false, true} {
				for _, cols := range []string{"plain", "tokens", "image", "all"} {
					s := Spec{Rows: 203, Files: 2, RowGroupRows: 40, Features: 5, Format: format, Compression: comp, Dictionary: dict, Seed: 11}
					if cols == "tokens" || cols == "all" {
						s.Tokens, s.TokensMin, s.TokensMax = true, 0, 6
					}
					if cols == "image" || cols == "all" {
						s.Image = [3]int{3, 2, 3}
					}
					name := fmt.Sprintf("%v/%v/dict=%v/%s", format, comp, dict, cols)
					t.Run(name, func(t *testing.T) {
						if err := s.Validate(); err != nil {
							if !errors.Is(err, ErrInvalidSpec) {
								t.Fatalf("Validate() = %v, want ErrInvalidSpec", err)
							}
							if _, werr := Write(context.Background(), LocalCreator{}, t.TempDir(), s); !errors.Is(werr, ErrInvalidSpec) {
								t.Errorf("Write of an invalid spec = %v, want ErrInvalidSpec", werr)
							}
							return
						}
						writeAndCheck(t, s)
					})
				}
			}
		}
	}
}

// A row group larger than the chunk budget is written in chunks into one
// buffered row group; the file must read back the same.
func TestWriteChunkedRowGroups(t *testing.T) {
	s := Spec{Rows: 1000, Files: 1, RowGroupRows: 300, Features: 16, Tokens: true, TokensMax: 9, Image: [3]int{4, 4, 1}, Compression: CompressionSnappy, Seed: 5}
	writeAndCheck(t, s, withChunkBudget(7*1024)) // about 50 rows a chunk
	writeAndCheck(t, s, withChunkBudget(1))      // one row a chunk
}

func TestWriteDeterministic(t *testing.T) {
	s := Spec{Rows: 500, Files: 2, RowGroupRows: 100, Features: 8, Tokens: true, TokensMax: 5, Compression: CompressionZstd, Seed: 99}
	read := func() [][]byte {
		dir := t.TempDir()
		res, err := Write(context.Background(), LocalCreator{}, dir, s)
		if err != nil {
			t.Fatal(err)
		}
		var out [][]byte
		for _, f := range res.Files {
			b, err := os.ReadFile(f.URI)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, b)
		}
		return out
	}
	a, b := read(), read()
	for i := range a {
		if !bytes.Equal(a[i], b[i]) {
			t.Errorf("file %d differs between two writes of the same spec", i)
		}
	}
	s.Seed++
	c := read()
	if bytes.Equal(a[0], c[0]) {
		t.Errorf("file 0 is the same under seeds %d and %d", s.Seed-1, s.Seed)
	}
}

// randomSeed returns the seed of a randomized test and logs it.
func randomSeed(t *testing.T) uint64 {
	seed := *randSeed
	if env := os.Getenv("DATAGEN_SEED"); seed == 0 && env != "" {
		v, err := strconv.ParseUint(env, 10, 64)
		if err != nil {
			t.Fatalf("DATAGEN_SEED=%q: %v", env, err)
		}
		seed = v
	}
	if seed == 0 {
		seed = rand.Uint64()
	}
	t.Logf("seed %d (rerun with -datagen.seed=%d or DATAGEN_SEED=%d)", seed, seed, seed)
	return seed
}

func TestWriteRandomSpecs(t *testing.T) {
	rng := rand.New(rand.NewPCG(randomSeed(t), 0))
	for i := 0; i < 12; i++ {
		s := Spec{
			Files:        1 + rng.IntN(4),
			RowGroupRows: 1 + rng.Int64N(100),
			Features:     rng.IntN(20),
			Format:       Format(rng.IntN(2)),
			Seed:         rng.Uint64(),
		}
		s.Rows = int64(s.Files) + rng.Int64N(400)
		if s.Format == FormatArrow {
			s.Compression = []Compression{CompressionNone, CompressionZstd, CompressionLZ4}[rng.IntN(3)]
		} else {
			s.Compression = Compression(rng.IntN(len(compressionNames)))
			s.Dictionary = rng.IntN(2) == 0
		}
		if rng.IntN(2) == 0 {
			s.Tokens, s.TokensMin = true, rng.IntN(4)
			s.TokensMax = s.TokensMin + rng.IntN(8)
		}
		if rng.IntN(2) == 0 {
			s.Image = [3]int{1 + rng.IntN(4), 1 + rng.IntN(4), 1 + rng.IntN(3)}
		}
		t.Run(strconv.Itoa(i), func(t *testing.T) {
			t.Logf("spec %+v", s)
			writeAndCheck(t, s)
		})
	}
}

// Without the tensor type registered, readers give the storage type and keep
// the extension's name and metadata on the field.
func TestImageWithoutRegisteredType(t *testing.T) {
	if err := arrow.UnregisterExtensionType(TensorExtensionName); err != nil {
		t.Fatal(err)
	}
	defer RegisterTensorType()
	for _, format := range []Format{FormatParquet, FormatArrow} {
		s := Spec{Rows: 3, Files: 1, RowGroupRows: 3, Image: [3]int{2, 2, 2}, Format: format}
		dir := t.TempDir()
		res, err := Write(context.Background(), LocalCreator{}, dir, s)
		if err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(res.Files[0].URI)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		var sc *arrow.Schema
		if format == FormatParquet {
			r, err := file.NewParquetReader(f)
			if err != nil {
				t.Fatal(err)
			}
			fr, err := pqarrow.NewFileReader(r, pqarrow.ArrowReadProperties{}, memory.DefaultAllocator)
			if err != nil {
				t.Fatal(err)
			}
			if sc, err = fr.Schema(); err != nil {
				t.Fatal(err)
			}
		} else {
			r, err := ipc.NewFileReader(f)
			if err != nil {
				t.Fatal(err)
			}
			sc = r.Schema()
		}
		img := sc.Field(2)
		name, _ := img.Metadata.GetValue("ARROW:extension:name")
		meta, _ := img.Metadata.GetValue("ARROW:extension:metadata")
		if img.Type.ID() != arrow.FIXED_SIZE_LIST || name != TensorExtensionName || meta != `{"shape":[2,2,2]}` {
			t.Errorf("%v: image field = %v, want fixed_size_list with %s {\"shape\":[2,2,2]}", format, img, TensorExtensionName)
		}
	}
}

// failingCreator fails writes after limit bytes, and records what happened
// to each writer.
type failingCreator struct {
	limit     int64
	abortable bool
	mu        sync.Mutex
	events    []string
}

type failingWriter struct {
	c   *failingCreator
	ctx context.Context
	n   int64
}

type abortableWriter struct{ *failingWriter }

func (w abortableWriter) Abort() error { w.c.log("abort"); return nil }

func (c *failingCreator) log(e string) { c.mu.Lock(); c.events = append(c.events, e); c.mu.Unlock() }

func (c *failingCreator) Create(ctx context.Context, uri string) (io.WriteCloser, error) {
	w := &failingWriter{c: c, ctx: ctx}
	if c.abortable {
		return abortableWriter{w}, nil
	}
	return w, nil
}

var errDiskFull = errors.New("disk full")

func (w *failingWriter) Write(p []byte) (int, error) {
	if w.n+int64(len(p)) > w.c.limit {
		return 0, errDiskFull
	}
	w.n += int64(len(p))
	return len(p), nil
}

func (w *failingWriter) Close() error {
	if w.ctx.Err() != nil {
		w.c.log("close after cancel")
	} else {
		w.c.log("close")
	}
	return nil
}

func TestWriteFailureAbandonsFile(t *testing.T) {
	s := Spec{Rows: 20000, Files: 2, RowGroupRows: 1000, Features: 64, Seed: 1}
	for _, tc := range []struct {
		abortable bool
		want      string
	}{
		{true, "[abort]"},
		{false, "[close after cancel]"},
	} {
		c := &failingCreator{limit: 1 << 20, abortable: tc.abortable}
		_, err := Write(context.Background(), c, "mem://x", s)
		if !errors.Is(err, errDiskFull) {
			t.Errorf("Write with a failing writer = %v, want errDiskFull", err)
		}
		if got := fmt.Sprint(c.events); got != tc.want {
			t.Errorf("abortable=%v: events %s, want %s", tc.abortable, got, tc.want)
		}
	}
}

// A failure on a local path leaves neither the file nor its temporary behind,
// and files written before it stay.
func TestLocalCreatorAtomic(t *testing.T) {
	dir := t.TempDir()
	w, err := LocalCreator{}.Create(context.Background(), filepath.Join(dir, "sub", "a.bin"))
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(w, "hello")
	if _, err := os.Stat(filepath.Join(dir, "sub", "a.bin")); !os.IsNotExist(err) {
		t.Errorf("a.bin visible before Close: %v", err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "sub", "a.bin")); err != nil || string(b) != "hello" {
		t.Errorf("a.bin = %q, %v, want hello", b, err)
	}
	w, _ = LocalCreator{}.Create(context.Background(), filepath.Join(dir, "sub", "b.bin"))
	io.WriteString(w, "partial")
	if err := w.(interface{ Abort() error }).Abort(); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(filepath.Join(dir, "sub")); len(entries) != 1 {
		t.Errorf("after Abort the directory holds %v, want only a.bin", entries)
	}
}

func TestWriteCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	dir := t.TempDir()
	_, err := Write(ctx, LocalCreator{}, dir, DefaultSpec())
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Write with a cancelled context = %v, want context.Canceled", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("cancelled Write left %v", entries)
	}
}

func TestJoinURI(t *testing.T) {
	for _, tc := range []struct{ dir, name, want string }{
		{"gs://b/p", "part-00000.parquet", "gs://b/p/part-00000.parquet"},
		{"gs://b/p/", "x", "gs://b/p/x"},
		{"/tmp/d", "x", "/tmp/d/x"},
		{"", "x", "x"},
	} {
		if got := JoinURI(tc.dir, tc.name); got != tc.want {
			t.Errorf("JoinURI(%q, %q) = %q, want %q", tc.dir, tc.name, got, tc.want)
		}
	}
}

func BenchmarkWrite(b *testing.B) {
	for _, tc := range []struct {
		name string
		s    Spec
	}{
		{"parquet/none/64k-rows", Spec{Rows: 65536, Files: 1, RowGroupRows: 65536, Features: 64}},
		{"parquet/snappy/64k-rows", Spec{Rows: 65536, Files: 1, RowGroupRows: 65536, Features: 64, Compression: CompressionSnappy}},
		{"arrow/none/64k-rows", Spec{Rows: 65536, Files: 1, RowGroupRows: 65536, Features: 64, Format: FormatArrow}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			dir := b.TempDir()
			b.SetBytes(tc.s.Rows * int64(12+4*tc.s.Features))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Write(context.Background(), LocalCreator{}, dir, tc.s); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
