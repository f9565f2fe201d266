package feed

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"testing"
	"time"

	"github.com/meshfeed/meshfeed/internal/datagen"
	"github.com/meshfeed/meshfeed/loader"
	"github.com/meshfeed/meshfeed/objstore"
	"github.com/meshfeed/meshfeed/transport"
)

// filterBenchSpec: 400,000 rows in 4 files of 10,000-row row groups (40
// row groups), id sorted, label scattered in [0, 1000), 32 features: about
// 56 MB of Parquet; in pages of 1 MiB without a page index (the writer's
// defaults), or of 64 KiB with one (index true).
func filterBenchSpec(index bool) datagen.Spec {
	s := datagen.DefaultSpec()
	s.Rows, s.Files, s.RowGroupRows, s.Features, s.Seed = 400_000, 4, 10_000, 32, 3
	if index {
		s.PageBytes, s.PageIndex = 64<<10, true
	}
	return s
}

// filterBenchLargeSpec is filterBenchSpec in 2 files of 100,000-row row
// groups (4 row groups; features chunks of 12.8 MB: 13 pages of 1 MiB, or
// 200 of 64 KiB with an index).
func filterBenchLargeSpec(index bool) datagen.Spec {
	s := filterBenchSpec(index)
	s.Files, s.RowGroupRows = 2, 100_000
	return s
}

func filterBenchDataset(b *testing.B, spec datagen.Spec) string {
	dir := b.TempDir()
	if _, err := datagen.Write(context.Background(), datagen.LocalCreator{}, dir, spec); err != nil {
		b.Fatal(err)
	}
	return dir
}

// filterRun plans and streams one epoch of the dataset with filters (""
// for none) through a new Pipeline over its own local store (no cached
// selections), and returns the store's bytes read or mapped, the plan's
// time (Info, cold) and the epoch's (Open to the last step).
func filterRun(b *testing.B, dir, filters string, d int) (bytes int64, plan, epoch time.Duration, rows int64) {
	ctx := context.Background()
	store := objstore.NewLocalStore()
	defer store.Close()
	opts := []Option{WithStore(store), WithCacheTTL(0)}
	if os.Getenv("MESHFEED_FILTER_BENCH_MMAP") == "0" {
		opts = append(opts, WithLoaderOptions(loader.WithMmap(false)))
	}
	p, err := NewPipeline(ctx, opts...)
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	slices := make([]int, d)
	for i := range slices {
		slices[i] = i
	}
	req := &transport.Request{Version: transport.Version, Datasets: []string{dir + "/*.parquet"}, GlobalBatchSize: 256,
		Columns: []transport.Column{{Name: "id"}, {Name: "features"}}, NumSlices: d, Slices: slices,
		LastBatch: transport.LastBatchPad, Epochs: 1}
	if filters != "" {
		req.Filters = json.RawMessage(filters)
	}
	t0 := time.Now()
	info, err := p.Info(ctx, req)
	if err != nil {
		b.Fatal(err)
	}
	plan = time.Since(t0)
	t1 := time.Now()
	st, err := p.Open(ctx, req)
	if err != nil {
		b.Fatal(err)
	}
	for {
		step, err := st.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			b.Fatal(err)
		}
		step.Release()
	}
	st.Close()
	epoch = time.Since(t1)
	s := store.Stats()
	return s.BytesRead.Load() + s.BytesMapped.Load(), plan, epoch, info.NumRows
}

// BenchmarkFilter reads one epoch (id and 32 features, D = 1 and 4) of a dataset
// sorted by id, unfiltered and with filters keeping 10% of its rows: on the
// sorted column, aligned with row groups (the statistics decide every row
// group) and not (two row groups partly kept: their id column is read at
// plan time and kept for the stream, which takes it from there: HeldChunks);
// and on the scattered label column (every
// row group's label column read and evaluated at plan time, every row
// group read). Reported per run: bytes-frac, the storage bytes read or
// mapped (plan and epoch) over the unfiltered run's; plan-ms, the plan's
// time with no selection cached; epoch-ms, streaming the epoch;
// plan-vs-epoch, plan-ms over the unfiltered epoch's time. With D = 4, a
// stream whose edge falls inside a kept row group reads that row group
// pages, as its neighbour does (DESIGN.md, invariant 3), except that the
// slices of one stream fetch the pages they share once (loader.FetchShare):
// with 10% of the rows kept, those edges weigh ten times more than
// unfiltered. Datasets: 10,000-row row groups (about 2 pages of 1 MiB per
// features chunk) and 100,000-row ones (13 pages), with 1 MiB pages and no
// page index, or 64 KiB pages and a page index. Local files are mapped, as
// the server maps them; MESHFEED_FILTER_BENCH_MMAP=0 reads them instead, as
// every remote store does, where a piece's uncompressed edge pages are
// fetched in part (format.SparseFetcher; a mapping maps them whole).
//
//	go test ./feed -run '^$' -bench Filter -benchtime 3x
func BenchmarkFilter(b *testing.B) {
	small := []filterVariant{
		{"sorted-10pct-aligned", `[["id", "<", 40000]]`},
		{"sorted-10pct-unaligned", `[["id", ">=", 15000], ["id", "<", 55000]]`},
		{"unsorted-10pct", `[["label", "<", 100]]`},
	}
	large := []filterVariant{
		{"sorted-10pct-inside", `[["id", ">=", 150000], ["id", "<", 190000]]`},
		{"sorted-10pct-across", `[["id", ">=", 180000], ["id", "<", 220000]]`},
		{"unsorted-10pct", `[["label", "<", 100]]`},
	}
	for _, layout := range []struct {
		name     string
		spec     datagen.Spec
		variants []filterVariant
	}{
		{"rg=10k/pages=1MiB", filterBenchSpec(false), small},
		{"rg=10k/pages=64KiB+index", filterBenchSpec(true), small},
		{"rg=100k/pages=1MiB", filterBenchLargeSpec(false), large},
		{"rg=100k/pages=64KiB+index", filterBenchLargeSpec(true), large},
	} {
		dir := filterBenchDataset(b, layout.spec)
		for _, d := range []int{1, 4} {
			benchFilterRuns(b, layout.name, dir, d, layout.variants)
		}
	}
}

// filterVariant is one filter of BenchmarkFilter.
type filterVariant struct{ name, filters string }

// benchFilterRuns runs the filters of BenchmarkFilter on dir with D = d.
func benchFilterRuns(b *testing.B, layout, dir string, d int, variants []filterVariant) {
	allBytes, _, allEpoch, allRows := filterRun(b, dir, "", d)
	for _, v := range append([]filterVariant{{"unfiltered", ""}}, variants...) {
		benchFilterRun(b, fmt.Sprintf("%s/D=%d/%s", layout, d, v.name), dir, v.filters, d, allBytes, allRows, allEpoch)
	}
}

// benchFilterRun is one sub-benchmark of BenchmarkFilter.
func benchFilterRun(b *testing.B, name, dir, filters string, d int, allBytes, allRows int64, allEpoch time.Duration) {
	b.Run(name, func(b *testing.B) {
		var bytes int64
		var plan, epoch time.Duration
		var rows int64
		for b.Loop() {
			bytes, plan, epoch, rows = filterRun(b, dir, filters, d)
		}
		b.ReportMetric(float64(bytes)/float64(allBytes), "bytes-frac")
		b.ReportMetric(float64(rows)/float64(allRows), "rows-frac")
		b.ReportMetric(float64(plan.Microseconds())/1e3, "plan-ms")
		b.ReportMetric(float64(epoch.Microseconds())/1e3, "epoch-ms")
		b.ReportMetric(float64(plan)/float64(allEpoch), "plan-vs-epoch")
		b.Logf("%s: %d of %d rows, %d of %d bytes read (%.1f%%), plan %v, epoch %v (unfiltered epoch %v)",
			name, rows, allRows, bytes, allBytes, 100*float64(bytes)/float64(allBytes), plan, epoch, allEpoch)
	})
}
