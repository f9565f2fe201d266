package feed

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/meshfeed/meshfeed/objstore"
	"github.com/meshfeed/meshfeed/transport"
)

// BenchmarkFilterPlanStored plans (Info, on a new Pipeline: no selection
// in memory) a scattered filter keeping 10% of BenchmarkFilter's dataset
// (400,000 rows, 40 row groups, label in [0, 1000)): from the footers,
// from a manifest that holds the filter's selections (meshfeed manifest
// --filters), and from the same manifest with a filter it holds none of
// (evaluated as from the footers). Reported: plan-ms and plan-data-bytes,
// the bytes of data files read to plan.
//
//	go test ./feed -run '^$' -bench FilterPlanStored -benchtime 5x
func BenchmarkFilterPlanStored(b *testing.B) {
	dir := filterBenchDataset(b, filterBenchSpec(false))
	const stored = `[["label", "<", 100]]`
	writeManifestWithSelections(b, dir, stored)
	for _, v := range []struct{ name, manifest, filters string }{
		{"footers", "off", stored},
		{"manifest-stored", "", stored},
		{"manifest-not-stored", "", `[["label", "<", 101]]`},
	} {
		b.Run(v.name, func(b *testing.B) {
			req := &transport.Request{Version: transport.Version, Datasets: []string{dir + "/*.parquet"}, GlobalBatchSize: 256,
				Columns: []transport.Column{{Name: "id"}, {Name: "features"}}, NumSlices: 1, Slices: []int{0},
				LastBatch: transport.LastBatchPad, Epochs: 1, Filters: json.RawMessage(v.filters), Manifest: v.manifest}
			var total time.Duration
			var bytes int64
			for range b.N {
				rc := &readCounter{Store: objstore.NewLocalStore(), bytes: map[string]int64{}}
				p, err := NewPipeline(context.Background(), WithStore(rc), WithCacheTTL(0))
				if err != nil {
					b.Fatal(err)
				}
				t0 := time.Now()
				if _, err := p.Info(context.Background(), req); err != nil {
					b.Fatal(err)
				}
				total += time.Since(t0)
				bytes += rc.dataBytes()
				p.Close()
			}
			b.ReportMetric(float64(total.Microseconds())/1e3/float64(b.N), "plan-ms")
			b.ReportMetric(float64(bytes)/float64(b.N), "plan-data-bytes")
		})
	}
}
