package loader_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/meshfeed/meshfeed/internal/datagen"
	"github.com/meshfeed/meshfeed/loader"
	"github.com/meshfeed/meshfeed/objstore"
)

// Helpers of bench_test.go: synthetic datasets generated once into a cache
// directory under os.TempDir() keyed by their parameters, page-cache warming,
// and the decoded Arrow size of a dataset, measured once per process.

// benchRowsEnv overrides the row count of the decode benchmarks' datasets.
const benchRowsEnv = "MESHFEED_BENCH_ROWS"

// defaultBenchRows is the row count the issue quotes figures for.
const defaultBenchRows = 2_000_000

// Column projections of the decode benchmarks.
var (
	benchColsBase   = []string{"id", "label", "features"}
	benchColsTokens = []string{"id", "label", "features", "tokens"}
)

// benchCodecs are the Parquet codecs the decode benchmarks sweep.
var benchCodecs = []datagen.Compression{datagen.CompressionNone, datagen.CompressionSnappy, datagen.CompressionZstd}

// benchRows returns MESHFEED_BENCH_ROWS, or 2,000,000 when it is unset.
func benchRows(b *testing.B) int64 {
	b.Helper()
	s := os.Getenv(benchRowsEnv)
	if s == "" {
		return defaultBenchRows
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 1 {
		b.Fatalf("%s=%q: want a positive row count", benchRowsEnv, s)
	}
	return n
}

// decodeSpec is the dataset of BenchmarkDecode and friends: id, label,
// features[64] and tokens (8 to 56 int32 per row, 32 on average), 4 files of
// 65,536-row row groups.
func decodeSpec(rows int64, c datagen.Compression) datagen.Spec {
	s := datagen.DefaultSpec()
	s.Rows = rows
	s.Files = int(min(4, rows))
	s.Features = 64
	s.Tokens, s.TokensMin, s.TokensMax = true, 8, 56
	s.Compression = c
	s.Seed = 1
	return s
}

// benchCacheRoot is where generated datasets are kept between runs.
func benchCacheRoot() string { return filepath.Join(os.TempDir(), "meshfeed-bench") }

// benchManifest is written last into a finished dataset directory. Its name
// starts with '_' so loader.Open skips it.
const benchManifest = "_bench_spec.json"

// specKey names a dataset directory after every field of the spec that
// changes the files.
func specKey(s datagen.Spec) string {
	s = s.Canonical()
	return fmt.Sprintf("%s-%s-rows%d-files%d-rg%d-f%d-tok%t_%d_%d-img%dx%dx%d-dict%t-seed%d",
		s.Format, s.Compression, s.Rows, s.Files, s.RowGroupRows, s.Features,
		s.Tokens, s.TokensMin, s.TokensMax, s.Image[0], s.Image[1], s.Image[2], s.Dictionary, s.Seed)
}

// cachedDataset returns the directory holding the dataset s describes,
// generating it first when it is absent (or was left half-written). The
// dataset is written to a temporary sibling and renamed into place, so
// concurrent runs never see a partial one.
func cachedDataset(b *testing.B, s datagen.Spec) string {
	b.Helper()
	dir := filepath.Join(benchCacheRoot(), specKey(s))
	want, err := json.Marshal(s.Canonical())
	if err != nil {
		b.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(dir, benchManifest)); err == nil && string(got) == string(want) {
		return dir
	}
	if err := os.MkdirAll(benchCacheRoot(), 0o755); err != nil {
		b.Fatal(err)
	}
	tmp, err := os.MkdirTemp(benchCacheRoot(), ".gen-")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	res, err := datagen.Write(context.Background(), datagen.LocalCreator{}, tmp, s)
	if err != nil {
		b.Fatalf("generate %s: %v", specKey(s), err)
	}
	if err := os.WriteFile(filepath.Join(tmp, benchManifest), want, 0o644); err != nil {
		b.Fatal(err)
	}
	b.Logf("generated %s: %d rows, %d files, %.1f MB in %v", dir, res.Rows, len(res.Files), float64(res.Bytes)/1e6, res.Elapsed)
	os.RemoveAll(dir) // a stale or partial directory
	if err := os.Rename(tmp, dir); err != nil {
		// Another run may have finished first; use its dataset if it is whole.
		if got, rerr := os.ReadFile(filepath.Join(dir, benchManifest)); rerr == nil && string(got) == string(want) {
			return dir
		}
		b.Fatal(err)
	}
	return dir
}

// datasetFiles lists the data files of a cached dataset, sorted.
func datasetFiles(b *testing.B, dir string) []string {
	b.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "part-*.parquet"))
	if err != nil || len(files) == 0 {
		b.Fatalf("no part-*.parquet in %s (%v)", dir, err)
	}
	return files
}

// warmPageCache reads every file of dir once, so the timed loops read from
// memory rather than disk.
func warmPageCache(b *testing.B, dir string) int64 {
	b.Helper()
	var total int64
	for _, p := range datasetFiles(b, dir) {
		f, err := os.Open(p)
		if err != nil {
			b.Fatal(err)
		}
		n, err := io.Copy(io.Discard, f)
		f.Close()
		if err != nil {
			b.Fatalf("warm %s: %v", p, err)
		}
		total += n
	}
	return total
}

// recordBufferBytes sums the lengths of every buffer of rec, children
// included: the decoded Arrow bytes a reader produced.
func recordBufferBytes(rec arrow.RecordBatch) int64 {
	var n int64
	var walk func(d arrow.ArrayData)
	walk = func(d arrow.ArrayData) {
		for _, buf := range d.Buffers() {
			if buf != nil {
				n += int64(buf.Len())
			}
		}
		for _, c := range d.Children() {
			walk(c)
		}
	}
	for _, c := range rec.Columns() {
		walk(c.Data())
	}
	return n
}

// decodedSize is what one full pass of the loader over a dataset produces.
type decodedSize struct {
	Rows      int64 // rows read
	RowGroups int   // row groups read
	Bytes     int64 // decoded Arrow bytes (sum of buffer lengths)
	MaxRG     int64 // decoded bytes of the largest row group
	Fetched   int64 // bytes fetched from storage
}

var (
	decodedMu    sync.Mutex
	decodedCache = map[string]decodedSize{}
)

// measureDecoded reads the whole dataset at dir projected on cols through
// the loader once, with a checked allocator, and returns its decoded size.
// It fails the benchmark if a buffer leaks or the row count is not rows. The
// result is memoized per process, so BenchmarkMemcpy and BenchmarkPqarrow
// charge exactly what BenchmarkDecode charges.
func measureDecoded(b *testing.B, dir string, cols []string, rows int64) decodedSize {
	b.Helper()
	key := fmt.Sprint(dir, cols)
	decodedMu.Lock()
	defer decodedMu.Unlock()
	if d, ok := decodedCache[key]; ok {
		return d
	}
	ctx := context.Background()
	store := objstore.NewLocalStore()
	defer store.Close()
	ds, err := loader.Open(ctx, store, []string{dir}, loader.WithColumns(cols...))
	if err != nil {
		b.Fatal(err)
	}
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(b, 0)
	r := ds.NewReader(ctx, ds.RowGroups(), mem)
	defer r.Close()
	var d decodedSize
	for {
		rec, ref, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			b.Fatal(err)
		}
		if rec.NumRows() != ref.Rows {
			rec.Release()
			b.Fatalf("row group (file %d, index %d): %d rows, footer says %d", ref.File, ref.Index, rec.NumRows(), ref.Rows)
		}
		n := recordBufferBytes(rec)
		d.Rows += rec.NumRows()
		d.RowGroups++
		d.Bytes += n
		d.MaxRG = max(d.MaxRG, n)
		rec.Release()
	}
	d.Fetched = r.Stats().FetchedBytes.Load()
	if d.Rows != rows {
		b.Fatalf("read %d rows of %s, want %d", d.Rows, dir, rows)
	}
	b.Logf("%s %v: %d rows, %d row groups, %d decoded bytes (%.1f per row), %d fetched",
		filepath.Base(dir), cols, d.Rows, d.RowGroups, d.Bytes, float64(d.Bytes)/float64(d.Rows), d.Fetched)
	decodedCache[key] = d
	return d
}

// drain reads every record of r, releases it, and returns the rows read.
func drain(b *testing.B, r *loader.RowGroupReader) int64 {
	b.Helper()
	var rows int64
	for {
		rec, _, err := r.Next()
		if errors.Is(err, io.EOF) {
			return rows
		}
		if err != nil {
			b.Fatal(err)
		}
		rows += rec.NumRows()
		rec.Release()
	}
}
