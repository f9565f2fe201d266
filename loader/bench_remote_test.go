package loader_test

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"

	"github.com/meshfeed/meshfeed/internal/arrowmem"
	"github.com/meshfeed/meshfeed/internal/datagen"
	"github.com/meshfeed/meshfeed/loader"
	"github.com/meshfeed/meshfeed/objstore"
	"github.com/meshfeed/meshfeed/objstore/objstoretest"
)

// BenchmarkRemoteStores reads BenchmarkGCS's dataset from each remote
// store's in-process emulator (gs:// on fake-gcs-server, s3:// on gofakes3,
// https:// on a loopback FakeHTTP over plain HTTP), charged the projected
// compressed bytes, two ways: store (the projected ranges through the
// store's ReadAt, GOMAXPROCS in flight) and loader (Dataset.NewReader over
// every row group: fetch and decode). The files are named one by one (HTTP
// has no listing).
func BenchmarkRemoteStores(b *testing.B) {
	ctx := context.Background()
	rows := min(benchRows(b), gcsBenchRows)
	spec := decodeSpec(rows, datagen.CompressionSnappy)
	spec.Tokens = false
	dir := cachedDataset(b, spec)
	fakeS3 := objstoretest.NewFakeS3(b, "bench")
	web := objstoretest.NewFakeHTTP(b, false)
	remotes := []struct {
		name  string
		store objstore.Store
		uris  []string
	}{
		{name: "gs", store: objstoretest.StartFakeGCS(b, "bench")},
		{name: "s3", store: fakeS3.Store(b)},
		{name: "https", store: web.Store(b)},
	}
	for _, p := range datasetFiles(b, dir) {
		data, err := os.ReadFile(p)
		if err != nil {
			b.Fatal(err)
		}
		name := "ds/" + filepath.Base(p)
		web.Write(b, name, data)
		for i := range remotes {
			uri := map[string]string{"gs": "gs://bench/" + name, "s3": "s3://bench/" + name, "https": web.URI(name)}[remotes[i].name]
			if remotes[i].name != "https" {
				objstoretest.PutObject(b, remotes[i].store, uri, data)
			}
			remotes[i].uris = append(remotes[i].uris, uri)
		}
	}
	workers := runtime.GOMAXPROCS(0)
	for _, r := range remotes {
		ds, err := loader.Open(ctx, r.store, r.uris, loader.WithColumns(benchColsBase...))
		if err != nil {
			b.Fatal(err)
		}
		ranges, projected := chunkRanges(ds)
		var maxRange int64
		for _, rg := range ranges {
			maxRange = max(maxRange, rg.n)
		}
		bufs := make([][]byte, workers)
		for i := range bufs {
			bufs[i] = make([]byte, maxRange)
		}
		b.Run(r.name+"/store", func(b *testing.B) {
			b.SetBytes(projected)
			b.ReportAllocs()
			for b.Loop() {
				readRanges(b, ranges, workers, func(w int, rg byteRange) error {
					return r.store.ReadAt(ctx, rg.obj, bufs[w][:rg.n], rg.off)
				})
			}
		})
		b.Run(r.name+"/loader", func(b *testing.B) {
			mem := arrowmem.NewPoolAllocator()
			b.SetBytes(projected)
			b.ReportAllocs()
			ops := 0
			for b.Loop() {
				rd := ds.NewReader(ctx, ds.RowGroups(), mem)
				if got := drain(b, rd); got != rows {
					b.Fatalf("read %d rows, want %d", got, rows)
				}
				rd.Close()
				ops++
			}
			reportRows(b, rows, ops)
		})
	}
}

// chunkRanges is projectedRanges for any store: the projected column chunks
// of every row group, touching chunks merged, and their total size.
func chunkRanges(ds *loader.Dataset) ([]byteRange, int64) {
	var out []byteRange
	var total int64
	for _, ref := range ds.RowGroups() {
		f := ds.Files[ref.File]
		chunks := slices.Clone(f.RowGroups[ref.Index].Chunks)
		slices.SortFunc(chunks, func(x, y loader.Chunk) int { return int(x.Offset - y.Offset) })
		start := len(out)
		for _, c := range chunks {
			total += c.Length
			if last := len(out) - 1; last >= start && out[last].off+out[last].n == c.Offset {
				out[last].n += c.Length
				continue
			}
			out = append(out, byteRange{obj: f.Object, off: c.Offset, n: c.Length})
		}
	}
	return out, total
}
