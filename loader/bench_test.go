package loader_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/klauspost/compress/snappy"

	"github.com/meshfeed/meshfeed/internal/arrowmem"
	"github.com/meshfeed/meshfeed/internal/datagen"
	"github.com/meshfeed/meshfeed/loader"
	"github.com/meshfeed/meshfeed/objstore"
	"github.com/meshfeed/meshfeed/objstore/objstoretest"
)

// End-to-end benchmarks of the loader through its public API, on synthetic
// datasets (see benchdata_test.go). b.SetBytes is the decoded Arrow bytes of
// one pass (BenchmarkDecode, BenchmarkMemcpy*, BenchmarkPqarrow: their MB/s
// compare directly) or the fetched compressed bytes (BenchmarkGCS). Dataset
// size: MESHFEED_BENCH_ROWS rows (default 2,000,000).
//
//	MESHFEED_BENCH_ROWS=500000 go test -run '^$' -bench . -benchtime=3x ./loader

// benchColSets are the projections of BenchmarkDecode and BenchmarkPqarrow.
var benchColSets = []struct {
	name string
	cols []string
}{
	{"cols=id,label,features", benchColsBase},
	{"cols=+tokens", benchColsTokens},
}

// reportRows adds a rows/s metric for rows read per iteration.
func reportRows(b *testing.B, rowsPerOp int64, ops int) {
	if s := b.Elapsed().Seconds(); s > 0 {
		b.ReportMetric(float64(rowsPerOp)*float64(ops)/s, "rows/s")
	}
}

// BenchmarkDecode reads every row group of the dataset through
// Dataset.NewReader (page cache warm), releasing each record, with one
// decode worker or GOMAXPROCS of them, into memory.DefaultAllocator or (pool,)
// a loader.PoolAllocator, which reuses the released records' memory without
// clearing it. mapcache keeps the files mapped between passes
// (objstore.WithMapCache). One pass runs before the timer in every variant
// (it fills the pool and, with mapcache, maps the files). Local files are mapped (WithMmap); MESHFEED_BENCH_MMAP=0
// reads them with ReadAt instead, for comparison.
func BenchmarkDecode(b *testing.B) {
	rows := benchRows(b)
	for _, codec := range benchCodecs {
		b.Run(codec.String(), func(b *testing.B) {
			dir := cachedDataset(b, decodeSpec(rows, codec))
			for _, cs := range benchColSets {
				b.Run(cs.name, func(b *testing.B) {
					all := runtime.GOMAXPROCS(0)
					for _, w := range []struct {
						name     string
						n        int
						pool     bool
						mapCache bool
					}{
						{"workers=1", 1, false, false}, {"workers=all", all, false, false},
						{"pool,workers=1", 1, true, false}, {"pool,workers=all", all, true, false},
						{"pool,mapcache,workers=1", 1, true, true}, {"pool,mapcache,workers=all", all, true, true},
					} {
						b.Run(w.name, func(b *testing.B) {
							benchDecode(b, dir, cs.cols, w.n, rows, w.pool, w.mapCache, 0)
						})
					}
				})
			}
		})
	}
}

// benchDecode reads every row group of dir, whole (piece 0) or in pieces of
// piece rows.
func benchDecode(b *testing.B, dir string, cols []string, workers int, rows int64, pool, mapCache bool, piece int64) {
	ctx := context.Background()
	warmPageCache(b, dir)
	size := measureDecoded(b, dir, cols, rows)
	var storeOpts []objstore.LocalOption
	if mapCache {
		storeOpts = append(storeOpts, objstore.WithMapCache(1<<40))
	}
	store := objstore.NewLocalStore(storeOpts...)
	defer store.Close()
	opts := []loader.Option{loader.WithColumns(cols...), loader.WithDecodeWorkers(workers)}
	if os.Getenv("MESHFEED_BENCH_MMAP") == "0" {
		opts = append(opts, loader.WithMmap(false))
	}
	ds, err := loader.Open(ctx, store, []string{dir}, opts...)
	if err != nil {
		b.Fatal(err)
	}
	refs := ds.RowGroups()
	if piece > 0 {
		refs = piecesOf(refs, piece)
	}
	var mem memory.Allocator = memory.DefaultAllocator
	if pool {
		mem = arrowmem.NewPoolAllocator()
	}
	pass := func() {
		r := ds.NewReader(ctx, refs, mem)
		got := drain(b, r)
		r.Close()
		if got != rows {
			b.Fatalf("read %d rows, want %d", got, rows)
		}
	}
	pass() // untimed: fills the pool, maps the files (mapcache)
	b.SetBytes(size.Bytes)
	b.ReportAllocs()
	ops := 0
	for b.Loop() {
		pass()
		ops++
	}
	reportRows(b, rows, ops)
}

// BenchmarkMemcpy copies as many bytes as one decode pass of the uncompressed
// dataset produces (projection id, label, features), one row group's decoded
// size at a time: the machine's memory bandwidth, in the same units as
// BenchmarkDecode.
func BenchmarkMemcpy(b *testing.B) {
	src, dst, chunk := memcpyBuffers(b)
	b.SetBytes(int64(len(src)))
	b.ReportAllocs()
	for b.Loop() {
		copyChunks(dst, src, chunk)
	}
}

// BenchmarkMemcpyParallel is BenchmarkMemcpy with GOMAXPROCS goroutines, each
// copying a contiguous share of the buffer.
func BenchmarkMemcpyParallel(b *testing.B) {
	src, dst, chunk := memcpyBuffers(b)
	procs := runtime.GOMAXPROCS(0)
	share := (len(src) + procs - 1) / procs
	b.SetBytes(int64(len(src)))
	b.ReportAllocs()
	for b.Loop() {
		var wg sync.WaitGroup
		for lo := 0; lo < len(src); lo += share {
			hi := min(lo+share, len(src))
			wg.Go(func() { copyChunks(dst[lo:hi], src[lo:hi], chunk) })
		}
		wg.Wait()
	}
}

// memcpyBuffers returns a source and a destination of the decoded size of the
// uncompressed dataset, both touched (no page faults in the timed loop), and
// the chunk size: the largest row group's decoded bytes.
func memcpyBuffers(b *testing.B) (src, dst []byte, chunk int) {
	rows := benchRows(b)
	dir := cachedDataset(b, decodeSpec(rows, datagen.CompressionNone))
	size := measureDecoded(b, dir, benchColsBase, rows)
	if need := 2 * size.Bytes; testing.Short() && need > 1<<30 {
		b.Skipf("-short: the two buffers need %d MB; use a smaller %s", need>>20, benchRowsEnv)
	}
	src = make([]byte, size.Bytes)
	dst = make([]byte, size.Bytes)
	for i := range src {
		src[i] = byte(i)
	}
	copy(dst, src)
	return src, dst, int(size.MaxRG)
}

func copyChunks(dst, src []byte, chunk int) {
	for off := 0; off < len(src); off += chunk {
		end := min(off+chunk, len(src))
		copy(dst[off:end], src[off:end])
	}
}

// BenchmarkPqarrow reads the same files and columns as BenchmarkDecode with
// arrow-go's pqarrow (ReadRowGroups, one row group at a time, one goroutine),
// charged the same decoded bytes: the reference the Parquet decoder is held
// against. File readers are opened before the timer, as the loader's footers
// are.
func BenchmarkPqarrow(b *testing.B) {
	rows := benchRows(b)
	for _, codec := range benchCodecs {
		b.Run(codec.String(), func(b *testing.B) {
			dir := cachedDataset(b, decodeSpec(rows, codec))
			for _, cs := range benchColSets {
				b.Run(cs.name, func(b *testing.B) {
					benchPqarrow(b, dir, cs.cols, rows)
				})
			}
		})
	}
}

type pqFile struct {
	fr      *pqarrow.FileReader
	leaves  []int // leaf column indices of the projection
	nGroups int
}

func benchPqarrow(b *testing.B, dir string, cols []string, rows int64) {
	ctx := context.Background()
	warmPageCache(b, dir)
	size := measureDecoded(b, dir, cols, rows)
	mem := memory.DefaultAllocator
	var files []pqFile
	for _, p := range datasetFiles(b, dir) {
		rdr, err := file.OpenParquetFile(p, false)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { rdr.Close() })
		fr, err := pqarrow.NewFileReader(rdr, pqarrow.ArrowReadProperties{BatchSize: 64 << 10}, mem)
		if err != nil {
			b.Fatal(err)
		}
		sc := rdr.MetaData().Schema
		var leaves []int
		for i := range sc.NumColumns() {
			if slices.Contains(cols, sc.ColumnRoot(i).Name()) {
				leaves = append(leaves, i)
			}
		}
		if len(leaves) != len(cols) {
			b.Fatalf("%s: projection %v resolves to leaves %v", p, cols, leaves)
		}
		files = append(files, pqFile{fr: fr, leaves: leaves, nGroups: rdr.NumRowGroups()})
	}
	b.SetBytes(size.Bytes)
	b.ReportAllocs()
	ops := 0
	for b.Loop() {
		var got int64
		for _, f := range files {
			for rg := range f.nGroups {
				tbl, err := f.fr.ReadRowGroups(ctx, f.leaves, []int{rg})
				if err != nil {
					b.Fatal(err)
				}
				got += tbl.NumRows()
				tbl.Release()
			}
		}
		if got != rows {
			b.Fatalf("pqarrow read %d rows, want %d", got, rows)
		}
		ops++
	}
	reportRows(b, rows, ops)
}

// gcsBenchRows is the size of BenchmarkGCS's dataset: 1,000,000 rows of id,
// label and features[64], snappy, in 4 files of 4 row groups (268 MB
// decoded), held in the emulator's memory. Enough row groups that the
// loader's throughput is its steady state, reading ahead while it decodes,
// not the fill and drain of a pipeline of 4 row groups.
const gcsBenchRows = 1_000_000

// putDataset uploads every file of dir (with its base name) under
// gs://bucket/prefix/ and returns the prefix URI.
func putDataset(b *testing.B, store objstore.Store, dir, bucket, prefix string) string {
	b.Helper()
	for _, p := range datasetFiles(b, dir) {
		data, err := os.ReadFile(p)
		if err != nil {
			b.Fatal(err)
		}
		objstoretest.PutObject(b, store, objstoretest.URI(bucket, prefix+"/"+filepath.Base(p)), data)
	}
	return objstoretest.URI(bucket, prefix) + "/"
}

// byteRange is one ranged read of an object.
type byteRange struct {
	obj     objstore.Object
	off, n  int64
	objName string
}

// projectedRanges returns the projected column chunks of every row group,
// touching chunks merged into one range (no byte outside the projection is
// read), and their total size.
func projectedRanges(b *testing.B, ds *loader.Dataset) ([]byteRange, int64) {
	b.Helper()
	var out []byteRange
	var total int64
	for _, ref := range ds.RowGroups() {
		f := ds.Files[ref.File]
		_, name, err := objstore.ParseGCSURI(f.Object.URI)
		if err != nil {
			b.Fatal(err)
		}
		chunks := slices.Clone(f.RowGroups[ref.Index].Chunks)
		slices.SortFunc(chunks, func(x, y loader.Chunk) int { return int(x.Offset - y.Offset) })
		start := len(out)
		for _, c := range chunks {
			total += c.Length
			if last := len(out) - 1; last >= start && out[last].off+out[last].n == c.Offset {
				out[last].n += c.Length
				continue
			}
			out = append(out, byteRange{obj: f.Object, off: c.Offset, n: c.Length, objName: name})
		}
	}
	return out, total
}

// readRanges calls read for every range, from workers goroutines (read's
// first argument is the worker's index), and fails b on the first error.
func readRanges(b *testing.B, ranges []byteRange, workers int, read func(w int, r byteRange) error) {
	b.Helper()
	next := make(chan byteRange)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for r := range next {
				if errs[w] == nil {
					errs[w] = read(w, r)
				}
			}
		})
	}
	for _, r := range ranges {
		next <- r
	}
	close(next)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkGCS reads a 200,000-row snappy dataset (id, label, features; 4
// files) from the in-process fake GCS two ways, both charged the projected
// compressed bytes, so loader MB/s ÷ raw MB/s is the loader's efficiency
// (target >= 0.8):
//
//   - raw: the storage client alone (NewRangeReader + ReadFull) on every row
//     group's projected byte ranges, GOMAXPROCS reads in flight, buffers
//     reused;
//   - store: the same ranges through GCSStore.ReadAt (the store's overhead
//     alone: tracking transport, stall watchdog, retry loop);
//   - loader: Dataset.NewReader over every row group (fetch and decode) with
//     default options.
func BenchmarkGCS(b *testing.B) {
	ctx := context.Background()
	rows := min(benchRows(b), gcsBenchRows)
	spec := decodeSpec(rows, datagen.CompressionSnappy)
	spec.Tokens = false
	dir := cachedDataset(b, spec)
	const bucket = "bench-gcs"
	store := objstoretest.StartFakeGCS(b, bucket)
	prefix := putDataset(b, store, dir, bucket, "ds")
	ds, err := loader.Open(ctx, store, []string{prefix}, loader.WithColumns(benchColsBase...))
	if err != nil {
		b.Fatal(err)
	}
	ranges, projected := projectedRanges(b, ds)

	workers := runtime.GOMAXPROCS(0)
	var maxRange int64
	for _, r := range ranges {
		maxRange = max(maxRange, r.n)
	}
	bufs := make([][]byte, workers)
	for i := range bufs {
		bufs[i] = make([]byte, maxRange)
	}
	client := store.Client()
	b.Run("raw", func(b *testing.B) {
		b.SetBytes(projected)
		b.ReportAllocs()
		for b.Loop() {
			readRanges(b, ranges, workers, func(w int, r byteRange) error {
				h := client.Bucket(bucket).Object(r.objName).Generation(r.obj.Generation)
				rd, err := h.NewRangeReader(ctx, r.off, r.n)
				if err != nil {
					return err
				}
				defer rd.Close()
				_, err = io.ReadFull(rd, bufs[w][:r.n])
				return err
			})
		}
	})
	b.Run("store", func(b *testing.B) {
		b.SetBytes(projected)
		b.ReportAllocs()
		for b.Loop() {
			readRanges(b, ranges, workers, func(w int, r byteRange) error {
				return store.ReadAt(ctx, r.obj, bufs[w][:r.n], r.off)
			})
		}
	})

	b.Run("loader", func(b *testing.B) {
		refs := ds.RowGroups()
		mem := arrowmem.NewPoolAllocator() // the server's allocator
		b.SetBytes(projected)
		b.ReportAllocs()
		var fetched int64
		ops := 0
		for b.Loop() {
			r := ds.NewReader(ctx, refs, mem)
			got := drain(b, r)
			fetched += r.Stats().FetchedBytes.Load()
			r.Close()
			if got != rows {
				b.Fatalf("read %d rows, want %d", got, rows)
			}
			ops++
		}
		b.ReportMetric(float64(fetched)/float64(ops), "fetched-B/op")
		reportRows(b, rows, ops)
	})
}

// BenchmarkPlan1000Files measures loader.Open (list, read 1,000 footers,
// project) with the footer cache off, on 1,000 files of 100 rows, from the
// fake GCS (target < 2 s per op on loopback) and from local disk. The GCS
// store is reused between ops (a warm connection pool, as in a server); the
// local store is made afresh each op (no open file handles carried over).
func BenchmarkPlan1000Files(b *testing.B) {
	ctx := context.Background()
	const files = 1000
	spec := datagen.DefaultSpec()
	spec.Rows, spec.Files, spec.Seed = 100*files, files, 1
	dir := cachedDataset(b, spec)

	check := func(b *testing.B, ds *loader.Dataset) {
		if len(ds.Files) != files || ds.NumRows() != spec.Rows {
			b.Fatalf("planned %d files, %d rows; want %d, %d", len(ds.Files), ds.NumRows(), files, spec.Rows)
		}
	}
	b.Run("gcs", func(b *testing.B) {
		const bucket = "bench-plan"
		store := objstoretest.StartFakeGCS(b, bucket)
		prefix := putDataset(b, store, dir, bucket, "plan")
		b.ReportAllocs()
		for b.Loop() {
			ds, err := loader.Open(ctx, store, []string{prefix}, loader.WithFooterCache(nil))
			if err != nil {
				b.Fatal(err)
			}
			check(b, ds)
		}
	})
	b.Run("local", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			store := objstore.NewLocalStore()
			ds, err := loader.Open(ctx, store, []string{dir}, loader.WithFooterCache(nil))
			store.Close()
			if err != nil {
				b.Fatal(err)
			}
			check(b, ds)
		}
	})
}

// BenchmarkSnappyAlone decompresses snappy blocks of 1 MiB (the page size of
// the bench datasets) holding the decoded bytes of one pass of the
// uncompressed dataset's projection (random float32 features, as the
// datasets hold), with one goroutine and with GOMAXPROCS, each into a
// pre-touched destination: the codec alone, without the loader, so the
// decoder's scaling over cores can be set against the codec's own.
func BenchmarkSnappyAlone(b *testing.B) {
	src, dst, _ := memcpyBuffers(b)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i+4 <= len(src); i += 4 {
		binary.LittleEndian.PutUint32(src[i:], math.Float32bits(rng.Float32()))
	}
	const block = 1 << 20
	var blocks [][]byte
	for off := 0; off < len(src); off += block {
		blocks = append(blocks, snappy.Encode(nil, src[off:min(off+block, len(src))]))
	}
	for _, workers := range []int{1, runtime.GOMAXPROCS(0)} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			b.SetBytes(int64(len(src)))
			for b.Loop() {
				var wg sync.WaitGroup
				for w := range workers {
					wg.Go(func() {
						for i := w; i < len(blocks); i += workers {
							off := i * block
							if _, err := snappy.Decode(dst[off:min(off+block, len(dst))], blocks[i]); err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
				wg.Wait()
			}
		})
	}
}

// BenchmarkPieces reads every row group of a dataset in pieces, as the
// server's slices read row groups larger than their share of the read-ahead
// budget (feed budget.go), with one decode worker, the pool allocator and the
// map cache: what a piece costs beyond its own rows' bytes (pages at its
// edges that it shares with the pieces beside it). "whole" reads the same
// row groups whole, for reference. MB/s counts the decoded bytes. Datasets:
//
//   - wide: id int64, features float32[1024] (4 KiB rows, 1 MiB pages of
//     about 255 rows), row groups of 4,096 rows, pieces of 384 rows;
//     MESHFEED_BENCH_ROWS / 16 rows.
//   - images: id int64, image uint8[128, 128, 3] (stored as INT32: 196 KB
//     per row, 1 MiB pages of about 5 rows), row groups of 256 rows, pieces
//     of 32 rows; MESHFEED_BENCH_ROWS / 1,000 rows.
func BenchmarkPieces(b *testing.B) {
	for _, w := range []struct {
		name         string
		rows, rg, pc int64
		features     int
		image        [3]int
		cols         []string
	}{
		{"wide", max(benchRows(b)/16/4096*4096, 4096), 4096, 384, 1024, [3]int{}, []string{"id", "features"}},
		{"images", max(benchRows(b)/1000/256*256, 256), 256, 32, 0, [3]int{128, 128, 3}, []string{"id", "image"}},
	} {
		for _, codec := range []datagen.Compression{datagen.CompressionNone, datagen.CompressionSnappy} {
			s := datagen.DefaultSpec()
			s.Rows, s.Files, s.RowGroupRows, s.Features, s.Image, s.Compression, s.Seed = w.rows, 1, w.rg, w.features, w.image, codec, 1
			dir := cachedDataset(b, s)
			for _, piece := range []int64{w.pc, 0} {
				name := fmt.Sprintf("%s/%s/piece=%d", w.name, codec, piece)
				if piece == 0 {
					name = fmt.Sprintf("%s/%s/whole", w.name, codec)
				}
				b.Run(name, func(b *testing.B) { benchDecode(b, dir, w.cols, 1, w.rows, true, true, piece) })
			}
		}
	}
}

// piecesOf splits every ref into consecutive pieces of n rows (the last of
// each row group holding the rest).
func piecesOf(refs []loader.RowGroupRef, n int64) []loader.RowGroupRef {
	var out []loader.RowGroupRef
	for _, ref := range refs {
		for s := int64(0); s < ref.Rows; s += n {
			p := ref
			p.Start, p.End = s, min(ref.Rows, s+n)
			out = append(out, p)
		}
	}
	return out
}
