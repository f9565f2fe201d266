package format

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// The tests open files as package loader does, without it: the footer read
// through a Source, the projection's output fields (nullable where the
// footers leave room for nulls, under NullsAsValidity), the decoder, and
// row groups decoded from the whole file in memory.

// bytesSource is a file's bytes as a Source.
type bytesSource struct {
	uri string
	b   []byte
}

func (s bytesSource) URI() string { return s.uri }
func (s bytesSource) Size() int64 { return int64(len(s.b)) }
func (s bytesSource) ReadAt(_ context.Context, p []byte, off int64) error {
	if off < 0 || off+int64(len(p)) > int64(len(s.b)) {
		return fmt.Errorf("read [%d, %d) of %d bytes: %w", off, off+int64(len(p)), len(s.b), io.ErrUnexpectedEOF)
	}
	copy(p, s.b[off:])
	return nil
}

// wholeFile is a file fetched whole, in memory (Fetched).
type wholeFile struct{ b []byte }

func (f wholeFile) ReadAt(p []byte, off int64) (int, error) {
	if off >= int64(len(f.b)) {
		return 0, io.EOF
	}
	n := copy(p, f.b[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}
func (f wholeFile) BytesAt(off, n int64) ([]byte, bool) {
	if off < 0 || off+n > int64(len(f.b)) {
		return nil, false
	}
	return f.b[off : off+n], true
}
func (f wholeFile) Mapped() bool { return false }
func (f wholeFile) Release()     {}

// testOptions are loader's defaults.
func testOptions() Options {
	return Options{MaxBytes: 4 << 30, FooterReadLength: 64 << 10}
}

// testFile is one file opened for the projection of cols.
type testFile struct {
	src bytesSource
	ft  Footer
	rgs []RowGroupMeta // the projected chunks
	dec Decoder
}

// parquet returns the file's Parquet decoder.
func (f *testFile) parquet() *parquetDecoder { return f.dec.(*parquetDecoder) }

// readRowGroup decodes row group rg from the file in memory.
func (f *testFile) readRowGroup(ctx context.Context, rg int, mem memory.Allocator) (arrow.RecordBatch, error) {
	return f.dec.DecodeRowGroup(ctx, rg, wholeFile{f.src.b}, mem)
}

// openFile opens the file at path for the projection of cols (every column
// when none), as loader.Open does.
func openFile(t testing.TB, path string, cols []string, o Options) (*testFile, error) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return openBytes(path, b, cols, o)
}

func openBytes(uri string, b []byte, cols []string, o Options) (*testFile, error) {
	ctx := context.Background()
	f := &testFile{src: bytesSource{uri: uri, b: b}}
	var err error
	switch strings.ToLower(filepath.Ext(uri)) {
	case ".arrow", ".feather", ".ipc", ".arrows":
		f.ft, err = ReadIPCFooter(ctx, f.src, o)
	default:
		f.ft, err = ReadParquetFooter(ctx, f.src, o)
	}
	if err != nil {
		return nil, err
	}
	if len(cols) == 0 {
		for _, fld := range f.ft.Schema().Fields() {
			cols = append(cols, fld.Name)
		}
	}
	proj := make([]int, len(cols))
	fields := make([]arrow.Field, len(cols))
	for i, name := range cols {
		idx := f.ft.Schema().FieldIndices(name)
		if len(idx) == 0 {
			return nil, fmt.Errorf("%s: no column %q", uri, name)
		}
		proj[i] = idx[0]
		if fields[i], err = f.ft.OutputField(idx[0]); err != nil {
			return nil, fmt.Errorf("%s column %q: %w", uri, name, err)
		}
		if _, fill := o.Fill[name]; o.NullsAsValidity && !fill {
			if may, n, known := f.ft.MayHoldNulls(name); may {
				fields[i] = NullableField(fields[i], n, known)
			}
		}
	}
	if f.rgs, err = f.ft.RowGroups(proj); err != nil {
		return nil, err
	}
	if f.dec, err = f.ft.Decoder(f.src, proj, fields, o); err != nil {
		return nil, err
	}
	return f, nil
}

// mustOpen is openFile failing the test on an error.
func mustOpen(t testing.TB, path string, cols []string, o Options) *testFile {
	t.Helper()
	f, err := openFile(t, path, cols, o)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// validityOptions are testOptions with NullsAsValidity.
func validityOptions() Options {
	o := testOptions()
	o.NullsAsValidity = true
	return o
}

// fillOptions are testOptions with fill values.
func fillOptions(fill map[string]float64) Options {
	o := testOptions()
	o.Fill = fill
	return o
}

// Fetch serves a piece's reads from the file in memory (Fetcher).
func (f *testFile) Fetch(context.Context, int, []Chunk) (Fetched, error) {
	return wholeFile{f.src.b}, nil
}

// readRange decodes rows [lo, hi) of row group rg as a reader's piece
// does: charged first (its pages located), then decoded, sharing sh with
// the row group's other pieces.
func (f *testFile) readRange(ctx context.Context, rg int, lo, hi int64, sh *Shared, st *Stats, mem memory.Allocator) (arrow.RecordBatch, error) {
	p := Piece{RG: rg, Lo: lo, Hi: hi, Mem: mem, Stats: st, Shared: sh, Fetch: f}
	d := f.dec.(Ranged)
	if _, _, err := d.Charge(ctx, p); err != nil {
		return nil, err
	}
	return d.DecodeRange(ctx, p)
}

// testDS is a testFile as the tests that read it as a dataset of one file
// use it (what loader.Open gave them).
type testDS struct {
	*testFile
	Files  []testDSFile
	Schema *arrow.Schema // the projected output schema
}

type testDSFile struct{ RowGroups []RowGroupMeta }

// ReadRowGroup decodes row group rg of file 0.
func (d *testDS) ReadRowGroup(ctx context.Context, file, rg int, mem memory.Allocator) (arrow.RecordBatch, error) {
	if file != 0 {
		return nil, fmt.Errorf("file %d of a dataset of one", file)
	}
	return d.readRowGroup(ctx, rg, mem)
}

// openDS opens the file at path as a dataset of one file.
func openDS(t testing.TB, path string, cols []string, o Options) (*testDS, error) {
	t.Helper()
	f, err := openFile(t, path, cols, o)
	if err != nil {
		return nil, err
	}
	var sch *arrow.Schema
	switch d := f.dec.(type) {
	case *parquetDecoder:
		sch = d.sch
	case *ipcDecoder:
		sch = d.sch
	}
	return &testDS{testFile: f, Files: []testDSFile{{RowGroups: f.rgs}}, Schema: sch}, nil
}
