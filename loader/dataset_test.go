package loader_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"

	"github.com/meshfeed/meshfeed/loader"
	"github.com/meshfeed/meshfeed/objstore"
	"github.com/meshfeed/meshfeed/objstore/objstoretest"
)

// recordingStore wraps a Store and records every ranged read.
type recordingStore struct {
	objstore.Store
	mu    sync.Mutex
	reads []readRec
}

type readRec struct {
	uri      string
	off, len int64
}

func (s *recordingStore) ReadAt(ctx context.Context, obj objstore.Object, p []byte, off int64) error {
	s.mu.Lock()
	s.reads = append(s.reads, readRec{obj.URI, off, int64(len(p))})
	s.mu.Unlock()
	return s.Store.ReadAt(ctx, obj, p, off)
}

func (s *recordingStore) take() []readRec {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.reads
	s.reads = nil
	return r
}

// idRecord is a small dataset row block: id, label, features[4].
func idRecord(start, n int) arrow.RecordBatch {
	mem := memory.NewGoAllocator()
	sch := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "label", Type: arrow.PrimitiveTypes.Int32},
		{Name: "features", Type: arrow.FixedSizeListOf(4, arrow.PrimitiveTypes.Float32)},
	}, nil)
	b := array.NewRecordBuilder(mem, sch)
	defer b.Release()
	for i := start; i < start+n; i++ {
		b.Field(0).(*array.Int64Builder).Append(int64(i))
		b.Field(1).(*array.Int32Builder).Append(int32(i % 10))
		fl := b.Field(2).(*array.FixedSizeListBuilder)
		fl.Append(true)
		for j := 0; j < 4; j++ {
			fl.ValueBuilder().(*array.Float32Builder).Append(float32(i*4 + j))
		}
	}
	return b.NewRecordBatch()
}

// writeIDFiles writes files of rowsPerFile rows with row groups of rg rows;
// ids run on across files in URI order.
func writeIDFiles(t testing.TB, dir string, files, rowsPerFile, rg int) []string {
	t.Helper()
	var paths []string
	for f := 0; f < files; f++ {
		p := filepath.Join(dir, fmt.Sprintf("part-%05d.parquet", f))
		rec := idRecord(f*rowsPerFile, rowsPerFile)
		writeParquet(t, p, rec, parquet.WithMaxRowGroupLength(int64(rg)), parquet.WithCompression(compress.Codecs.Snappy), parquet.WithDictionaryDefault(false))
		rec.Release()
		paths = append(paths, p)
	}
	return paths
}

func TestPlanningReadsOnlyFooters(t *testing.T) {
	dir := t.TempDir()
	paths := writeIDFiles(t, dir, 3, 1000, 300)
	rs := &recordingStore{Store: objstore.NewLocalStore()}
	defer rs.Close()
	ctx := context.Background()
	// Default: one optimistic tail read per file.
	if _, err := loader.Open(ctx, rs, []string{dir + "/*.parquet"}, loader.WithFooterCache(nil)); err != nil {
		t.Fatal(err)
	}
	if reads := rs.take(); len(reads) != len(paths) {
		t.Errorf("planning issued %d reads, want one per file (%d): %v", len(reads), len(paths), reads)
	}
	// Exact footer reads: trailer, then footer; no byte of a data page.
	ds, err := loader.Open(ctx, rs, []string{dir + "/*.parquet"}, loader.WithFooterCache(nil), loader.WithFooterReadLength(8))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := ds.NumRows(), int64(3000); got != want {
		t.Fatalf("NumRows() = %d, want %d", got, want)
	}
	if got := len(ds.RowGroups()); got != 12 {
		t.Fatalf("len(RowGroups()) = %d, want 12 (4 per file)", got)
	}
	// Every read during planning lies after the last data byte of its file.
	dataEnd := map[string]int64{}
	for _, f := range ds.Files {
		for _, rg := range f.RowGroups {
			for _, c := range rg.Chunks {
				dataEnd[f.Object.URI] = max(dataEnd[f.Object.URI], c.Offset+c.Length)
			}
		}
	}
	reads := rs.take()
	if len(reads) != 2*len(paths) {
		t.Errorf("planning issued %d reads, want two per file (%d): %v", len(reads), 2*len(paths), reads)
	}
	for _, r := range reads {
		if r.off < dataEnd[r.uri] {
			t.Errorf("planning read [%d, %d) of %s, which overlaps data pages ending at %d", r.off, r.off+r.len, r.uri, dataEnd[r.uri])
		}
	}
}

func TestFooterCache(t *testing.T) {
	dir := t.TempDir()
	paths := writeIDFiles(t, dir, 2, 500, 200)
	rs := &recordingStore{Store: objstore.NewLocalStore()}
	defer rs.Close()
	cache := loader.NewFooterCache(16)
	ctx := context.Background()
	if _, err := loader.Open(ctx, rs, []string{dir}, loader.WithFooterCache(cache)); err != nil {
		t.Fatal(err)
	}
	rs.take()
	if _, err := loader.Open(ctx, rs, []string{dir}, loader.WithFooterCache(cache)); err != nil {
		t.Fatal(err)
	}
	if reads := rs.take(); len(reads) != 0 {
		t.Errorf("second Open read %d ranges, want 0 (footers cached): %v", len(reads), reads)
	}
	// A rewritten file (new size and mtime) is read again.
	rec := idRecord(0, 700)
	writeParquet(t, paths[0], rec)
	rec.Release()
	ds, err := loader.Open(ctx, rs, []string{dir}, loader.WithFooterCache(cache))
	if err != nil {
		t.Fatal(err)
	}
	if got := ds.Files[0].NumRows; got != 700 {
		t.Errorf("after rewrite NumRows = %d, want 700", got)
	}
	if reads := rs.take(); len(reads) != 1 || reads[0].uri != paths[0] {
		t.Errorf("after rewrite reads = %v, want one footer read of %s", reads, paths[0])
	}
}

func TestProjectionAndCoalescing(t *testing.T) {
	dir := t.TempDir()
	writeIDFiles(t, dir, 1, 2000, 2000)
	rs := &recordingStore{Store: objstore.NewLocalStore()}
	defer rs.Close()
	ctx := context.Background()
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)

	cases := []struct {
		name      string
		cols      []string
		gap       int64
		wantReads int
	}{
		{"one column", []string{"features"}, 0, 1},
		{"two apart, no gap allowed", []string{"id", "features"}, 0, 2},
		{"two apart, merged by gap", []string{"id", "features"}, 1 << 20, 1},
		{"all adjacent", []string{"id", "label", "features"}, 0, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ds, err := loader.Open(ctx, rs, []string{dir}, loader.WithColumns(tc.cols...), loader.WithCoalesceGap(tc.gap))
			if err != nil {
				t.Fatal(err)
			}
			rs.take()
			rec, err := ds.ReadRowGroup(ctx, 0, 0, mem)
			if err != nil {
				t.Fatal(err)
			}
			defer rec.Release()
			if got := rec.Schema().Fields(); len(got) != len(tc.cols) {
				t.Fatalf("schema has %d fields, want %v", len(got), tc.cols)
			}
			for i, c := range tc.cols {
				if rec.ColumnName(i) != c {
					t.Errorf("column %d = %q, want %q", i, rec.ColumnName(i), c)
				}
			}
			reads := rs.take()
			if len(reads) != tc.wantReads {
				t.Errorf("%d ranged reads, want %d: %v", len(reads), tc.wantReads, reads)
			}
			var fetched, projected int64
			for _, r := range reads {
				fetched += r.len
			}
			for _, c := range ds.Files[0].RowGroups[0].Chunks {
				projected += c.Length
			}
			if tc.gap == 0 && fetched != projected {
				t.Errorf("fetched %d bytes, want exactly the projected chunks' %d", fetched, projected)
			}
		})
	}
}

func TestSchemaMismatch(t *testing.T) {
	dir := t.TempDir()
	a := idRecord(0, 10)
	defer a.Release()
	writeParquet(t, filepath.Join(dir, "a.parquet"), a)
	// b: label is int64 instead of int32.
	mem := memory.NewGoAllocator()
	sch := arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}, {Name: "label", Type: arrow.PrimitiveTypes.Int64}}, nil)
	bb := array.NewRecordBuilder(mem, sch)
	bb.Field(0).(*array.Int64Builder).AppendValues([]int64{1, 2}, nil)
	bb.Field(1).(*array.Int64Builder).AppendValues([]int64{1, 2}, nil)
	b := bb.NewRecordBatch()
	bb.Release()
	defer b.Release()
	writeParquet(t, filepath.Join(dir, "b.parquet"), b)

	store := objstore.NewLocalStore()
	defer store.Close()
	ctx := context.Background()
	_, err := loader.Open(ctx, store, []string{dir}, loader.WithColumns("id", "label"))
	if !errors.Is(err, loader.ErrSchemaMismatch) {
		t.Fatalf("Open = %v, want ErrSchemaMismatch", err)
	}
	for _, want := range []string{"a.parquet", "b.parquet", `"label"`, "int32", "int64"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
	// Projecting only the agreeing column works.
	if _, err := loader.Open(ctx, store, []string{dir}, loader.WithColumns("id")); err != nil {
		t.Errorf("Open(id only) = %v, want nil", err)
	}
	// A column missing from a file names it and lists what is there.
	_, err = loader.Open(ctx, store, []string{dir}, loader.WithColumns("id", "features"))
	if !errors.Is(err, loader.ErrSchemaMismatch) || !strings.Contains(err.Error(), "b.parquet") || !strings.Contains(err.Error(), `"features"`) {
		t.Errorf("Open(features) = %v, want ErrSchemaMismatch naming b.parquet and features", err)
	}
}

func TestNullWithoutFill(t *testing.T) {
	dir := t.TempDir()
	rec := testRecord(t, rand.New(rand.NewPCG(1, 2)), 100, true)
	defer rec.Release()
	path := filepath.Join(dir, "nulls.parquet")
	writeParquet(t, path, rec)
	store := objstore.NewLocalStore()
	defer store.Close()
	ctx := context.Background()
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	// The footer records the nulls: refused at plan time.
	_, err := loader.Open(ctx, store, []string{path}, loader.WithColumns("id", "maybe"))
	if !errors.Is(err, loader.ErrNull) {
		t.Fatalf("Open = %v, want ErrNull", err)
	}
	for _, want := range []string{path, "row group 0", `"maybe"`, "11 nulls", "fill"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	// Written without statistics: found while decoding, at the first null.
	nostats := filepath.Join(dir, "nostats.parquet")
	writeParquet(t, nostats, rec, parquet.WithStats(false))
	ds, err := loader.Open(ctx, store, []string{nostats}, loader.WithColumns("id", "maybe"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = ds.ReadRowGroup(ctx, 0, 0, mem)
	if !errors.Is(err, loader.ErrNull) {
		t.Fatalf("ReadRowGroup = %v, want ErrNull", err)
	}
	for _, want := range []string{nostats, "row group 0", `"maybe"`, "row 4", "fill"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	// Kept as validity: the values and nulls of the source, the field
	// nullable with the footers' count (or "unknown" without statistics).
	for file, count := range map[string]string{path: "11", nostats: "unknown"} {
		ds, err := loader.Open(ctx, store, []string{file}, loader.WithColumns("maybe"), loader.WithNullsAsValidity())
		if err != nil {
			t.Fatal(err)
		}
		f := ds.Schema.Field(0)
		if nc, _ := f.Metadata.GetValue("meshfeed.null_count"); !f.Nullable || nc != count {
			t.Errorf("%s: field %v, want nullable with meshfeed.null_count %s", file, f, count)
		}
		got, err := ds.ReadRowGroup(ctx, 0, 0, mem)
		if err != nil {
			t.Fatal(err)
		}
		want := rec.Column(int(rec.Schema().FieldIndices("maybe")[0]))
		if !array.Equal(got.Column(0), want) {
			t.Errorf("%s: maybe = %v, want %v", file, got.Column(0), want)
		}
		got.Release()
	}
	// Nullable strings pass through with their nulls.
	ds, err = loader.Open(ctx, store, []string{path}, loader.WithColumns("names"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := ds.ReadRowGroup(ctx, 0, 0, mem)
	if err != nil {
		t.Fatal(err)
	}
	defer got.Release()
	if n := got.Column(0).NullN(); n != 11 {
		t.Errorf("names has %d nulls, want 11", n)
	}
}

// corruptions of a valid file, each with what the error must say.
func TestBadFiles(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.parquet")
	rec := idRecord(0, 500)
	writeParquet(t, good, rec, parquet.WithCompression(compress.Codecs.Uncompressed), parquet.WithDictionaryDefault(false))
	rec.Release()
	data, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	flen := int(uint32(data[len(data)-8]) | uint32(data[len(data)-7])<<8 | uint32(data[len(data)-6])<<16 | uint32(data[len(data)-5])<<24)
	footerStart := len(data) - 8 - flen

	corrupt := func(f func([]byte) []byte) []byte { return f(append([]byte(nil), data...)) }
	cases := []struct {
		name     string
		data     []byte
		atRead   bool // the error comes when reading data, not when planning
		sentinel error
		mention  []string
	}{
		{"empty.parquet", nil, false, loader.ErrCorrupt, []string{"empty", "0 bytes"}},
		{"tiny.parquet", []byte("PAR1"), false, loader.ErrCorrupt, []string{"too small"}},
		{"truncated.parquet", data[:len(data)/2], false, loader.ErrCorrupt, []string{"footer"}},
		{"badmagic.parquet", corrupt(func(b []byte) []byte { copy(b[len(b)-4:], "XXXX"); return b }), false, loader.ErrCorrupt, []string{"footer"}},
		{"badfooter.parquet", corrupt(func(b []byte) []byte {
			for i := footerStart; i < footerStart+flen/2; i++ {
				b[i] ^= 0xA5
			}
			return b
		}), false, loader.ErrCorrupt, []string{"rewrite"}},
		{"badlength.parquet", corrupt(func(b []byte) []byte { b[len(b)-8], b[len(b)-7], b[len(b)-6] = 0xFF, 0xFF, 0x7F; return b }), false, loader.ErrCorrupt, []string{"footer"}},
		{"badpage.parquet", corrupt(func(b []byte) []byte {
			for i := 4; i < footerStart-16; i += 7 { // page headers and values
				b[i] ^= 0xFF
			}
			return b
		}), true, loader.ErrCorrupt, []string{"row group 0"}},
	}
	store := objstore.NewLocalStore()
	defer store.Close()
	ctx := context.Background()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, tc.name)
			if err := os.WriteFile(p, tc.data, 0o644); err != nil {
				t.Fatal(err)
			}
			mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
			defer mem.AssertSize(t, 0)
			ds, err := loader.Open(ctx, store, []string{p}, loader.WithFooterCache(nil))
			if err == nil && tc.atRead {
				for rg := range ds.Files[0].RowGroups {
					var rec arrow.RecordBatch
					rec, err = ds.ReadRowGroup(ctx, 0, rg, mem)
					if err != nil {
						break
					}
					rec.Release()
				}
			}
			if !errors.Is(err, tc.sentinel) {
				t.Fatalf("got %v, want %v", err, tc.sentinel)
			}
			msg := err.Error()
			if !strings.Contains(msg, p) {
				t.Errorf("error %q does not name the file", msg)
			}
			for _, w := range tc.mention {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not mention %q", msg, w)
				}
			}
		})
	}
}

func TestNoMatch(t *testing.T) {
	store := objstore.NewLocalStore()
	defer store.Close()
	dir := t.TempDir()
	_, err := loader.Open(context.Background(), store, []string{dir + "/*.parquet"})
	if !errors.Is(err, loader.ErrNotFound) || !strings.Contains(err.Error(), dir) {
		t.Errorf("Open(no match) = %v, want ErrNotFound naming the pattern", err)
	}
}

// TestReaderOrderAndBudget reads every row group through the read-ahead
// reader: order kept, ids contiguous, in-flight bytes within the budget.
func TestReaderOrderAndBudget(t *testing.T) {
	dir := t.TempDir()
	writeIDFiles(t, dir, 3, 1000, 128)
	store := objstore.NewLocalStore()
	defer store.Close()
	ctx := context.Background()
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	ds, err := loader.Open(ctx, store, []string{dir}, loader.WithReadAhead(20<<10), loader.WithDecodeWorkers(2))
	if err != nil {
		t.Fatal(err)
	}
	refs := ds.RowGroups()
	r := ds.NewReader(ctx, refs, mem)
	defer r.Close()
	next := int64(0)
	for i := 0; ; i++ {
		rec, ref, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if ref != refs[i] {
			t.Errorf("Next #%d = %+v, want %+v", i, ref, refs[i])
		}
		ids := rec.Column(0).(*array.Int64)
		for j := 0; j < ids.Len(); j++ {
			if ids.Value(j) != next {
				t.Fatalf("row group %d row %d: id %d, want %d", i, j, ids.Value(j), next)
			}
			next++
		}
		rec.Release()
	}
	if next != 3000 {
		t.Errorf("read %d rows, want 3000", next)
	}
	st := r.Stats()
	if st.Misses.Load() != 0 {
		t.Errorf("%d decoder reads missed the fetched ranges, want 0", st.Misses.Load())
	}
	if peak := r.PeakInFlight(); peak > 20<<10 && peak > ds.Files[0].RowGroups[0].Bytes+ds.Files[0].RowGroups[0].DecodedBytes {
		t.Errorf("peak in-flight %d bytes exceeds the 20 KiB budget", peak)
	}
}

// TestReaderCancel closes readers at random points: nothing leaks.
func TestReaderCancel(t *testing.T) {
	seed := testSeed(t)
	rng := rand.New(rand.NewPCG(seed, 7))
	dir := t.TempDir()
	writeIDFiles(t, dir, 2, 1000, 100)
	store := objstore.NewLocalStore()
	defer store.Close()
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	ds, err := loader.Open(context.Background(), store, []string{dir})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 50; i++ {
		ctx, cancel := context.WithCancel(context.Background())
		r := ds.NewReader(ctx, ds.RowGroups(), mem)
		for k := rng.IntN(25); k > 0; k-- {
			rec, _, err := r.Next()
			if err != nil {
				break
			}
			rec.Release()
		}
		if rng.IntN(2) == 0 {
			cancel()
		}
		r.Close()
		cancel()
	}
}

// TestGCSSameAsLocal runs the oracle comparison through the in-process GCS
// emulator: the same bytes decode to the same values.
func TestGCSSameAsLocal(t *testing.T) {
	dir := t.TempDir()
	rec := testRecord(t, rand.New(rand.NewPCG(testSeed(t), 3)), 2000, false)
	defer rec.Release()
	path := filepath.Join(dir, "all.parquet")
	writeParquet(t, path, rec, parquet.WithMaxRowGroupLength(600), parquet.WithCompression(compress.Codecs.Zstd))
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	gcs := objstoretest.StartFakeGCS(t, "bucket")
	uri := objstoretest.URI("bucket", "train/all.parquet")
	objstoretest.PutObject(t, gcs, uri, data)
	ctx := context.Background()
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	local := objstore.NewLocalStore()
	defer local.Close()
	dl, err := loader.Open(ctx, local, []string{path})
	if err != nil {
		t.Fatal(err)
	}
	dg, err := loader.Open(ctx, gcs, []string{"gs://bucket/train/*.parquet"})
	if err != nil {
		t.Fatal(err)
	}
	if dg.Files[0].Object.URI != uri || dg.NumRows() != dl.NumRows() {
		t.Fatalf("GCS dataset %s with %d rows, want %s with %d", dg.Files[0].Object.URI, dg.NumRows(), uri, dl.NumRows())
	}
	for rg := range dl.Files[0].RowGroups {
		a, err := dl.ReadRowGroup(ctx, 0, rg, mem)
		if err != nil {
			t.Fatal(err)
		}
		b, err := dg.ReadRowGroup(ctx, 0, rg, mem)
		if err != nil {
			t.Fatal(err)
		}
		if !array.RecordEqual(a, b) {
			t.Errorf("row group %d differs between local disk and GCS", rg)
		}
		a.Release()
		b.Release()
	}
}

// TestReaderOwnBudget: a reader's own budget overrides the dataset's.
func TestReaderOwnBudget(t *testing.T) {
	dir := t.TempDir()
	writeIDFiles(t, dir, 1, 2000, 100)
	store := objstore.NewLocalStore()
	defer store.Close()
	ctx := context.Background()
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	ds, err := loader.Open(ctx, store, []string{dir}, loader.WithReadAhead(1<<30))
	if err != nil {
		t.Fatal(err)
	}
	var one int64 // the largest row group's cost: one always fits
	for _, rg := range ds.Files[0].RowGroups {
		one = max(one, rg.Bytes+rg.DecodedBytes)
	}
	for _, budget := range []int64{0, one, 3 * one} {
		r := ds.NewReader(ctx, ds.RowGroups(), mem, loader.WithReaderReadAhead(budget), loader.WithReaderDecodeWorkers(2))
		n := 0
		for {
			rec, _, err := r.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			n++
			time.Sleep(time.Millisecond) // a slow consumer lets read-ahead fill up
			rec.Release()
		}
		peak := r.PeakInFlight()
		if peak > max(budget, one) {
			t.Errorf("budget %d: peak in flight %d, want at most %d", budget, peak, max(budget, one))
		}
		if budget == 3*one && peak <= one {
			t.Errorf("budget %d: peak in flight %d: no read-ahead happened", budget, peak)
		}
		if n != 20 {
			t.Errorf("budget %d: read %d row groups, want 20", budget, n)
		}
		r.Close()
	}
}
