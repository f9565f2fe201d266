package loader_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/meshfeed/meshfeed/internal/datagen"
	"github.com/meshfeed/meshfeed/loader"
	"github.com/meshfeed/meshfeed/objstore/objstoretest"
)

// BenchmarkPieceLatency: what locating a piece's pages costs on a remote
// store with latency (fake GCS behind an objstoretest.LatencyFront, 20 ms
// per request, 200 MB/s). One 200,000-row row group (id and 32 features:
// 26 MB; a features chunk of 25 pages of 1 MiB, or of 400 pages of 64 KiB
// with an offset index), read three ways with a fresh Dataset each time
// (nothing located before): whole, and the piece of rows [90,000,
// 110,000) (10%), with and without the offset index. Without it the piece
// walks the page headers (a first window of 64 KiB, then 4 KiB at each
// later page, one request per page larger than the window, the headers of
// pages of one size read ahead 16 at once: requests grow with the pages,
// not the piece). Reported: requests, bytes-frac (body bytes over the whole
// row group's) and ms.
//
//	go test ./loader/ -run '^$' -bench BenchmarkPieceLatency -benchtime 2x
func BenchmarkPieceLatency(b *testing.B) {
	ctx := context.Background()
	fake := objstoretest.NewFakeGCS(b, "bench")
	writer := fake.Store(b)
	for _, index := range []bool{false, true} {
		spec := datagen.DefaultSpec()
		spec.Rows, spec.Files, spec.RowGroupRows, spec.Features, spec.Seed = 200_000, 1, 200_000, 32, 1
		if index {
			spec.PageBytes, spec.PageIndex = 64<<10, true
		}
		root := fmt.Sprintf("gs://bench/piece-%v", index)
		if _, err := datagen.Write(ctx, writer, root, spec); err != nil {
			b.Fatal(err)
		}
		front := objstoretest.NewLatencyFront(b, fake.URL, 20*time.Millisecond, 200<<20)
		store := objstoretest.NewStore(b, front.URL())
		var wholeBytes int64
		for _, c := range []struct {
			name       string
			start, end int64
		}{{"whole", 0, 0}, {"piece-10pct", 90_000, 110_000}} {
			b.Run(fmt.Sprintf("index=%v/%s", index, c.name), func(b *testing.B) {
				var reqs, body int64
				var took time.Duration
				for b.Loop() {
					ds, err := loader.Open(ctx, store, []string{root + "/*.parquet"}, loader.WithFooterCache(nil), loader.WithColumns("id", "features"))
					if err != nil {
						b.Fatal(err)
					}
					ref := ds.RowGroups()[0]
					ref.Start, ref.End = c.start, c.end
					r0, b0, t0 := front.Requests(), front.BodyBytes(), time.Now()
					rd := ds.NewReader(ctx, []loader.RowGroupRef{ref}, memory.DefaultAllocator)
					for {
						rec, _, err := rd.Next()
						if err != nil {
							break
						}
						rec.Release()
					}
					rd.Close()
					reqs, body, took = front.Requests()-r0, front.BodyBytes()-b0, time.Since(t0)
				}
				if c.name == "whole" {
					wholeBytes = body
				}
				b.ReportMetric(float64(reqs), "requests")
				b.ReportMetric(float64(body)/float64(max(wholeBytes, 1)), "bytes-frac")
				b.ReportMetric(float64(took.Microseconds())/1e3, "ms")
			})
		}
	}
}
