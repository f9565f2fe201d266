package format

import (
	"path/filepath"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	pq "github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
)

// TestRoute: which decoder each column of fastRecord's file takes, by
// layout and codec (the pages of a fast route decide in the end).
func TestRoute(t *testing.T) {
	rec := fastRecord(0, 100)
	defer rec.Release()
	for _, tc := range []struct {
		codec compress.Compression
		v2    bool
		want  map[string]route
	}{
		{compress.Codecs.Snappy, false, map[string]route{
			"id": routeFastValues, "label": routeFastValues, "small": routeFastValues, "maybe": routeFastValues,
			"features": routeFastFixedList, "nfeatures": routeFastFixedList, "pixels": routeFastFixedList,
			"tokens": routeFastList, "etokens": routeFastList,
			"flag": routeEngine, // PLAIN booleans in v1 pages
		}},
		{compress.Codecs.Snappy, true, map[string]route{"id": routeFastValues, "tokens": routeFastList}},
		{compress.Codecs.Lz4Raw, false, map[string]route{"id": routeArrow, "features": routeArrow, "tokens": routeArrow}},
		{compress.Codecs.Brotli, false, map[string]route{"id": routeEngine, "features": routeEngine, "tokens": routeEngine}},
	} {
		path := filepath.Join(t.TempDir(), "f.parquet")
		ver := pq.DataPageV1
		if tc.v2 {
			ver = pq.DataPageV2
		}
		writeFastFile(t, path, []arrow.RecordBatch{rec}, pq.WithCompression(tc.codec), pq.WithDataPageVersion(ver))
		for col, want := range tc.want {
			d := mustOpen(t, path, []string{col}, validityOptions()).parquet()
			md := &d.pf.Metadata().RowGroups[0].Columns[d.cols[0].leaf].MetaData
			if got := d.cols[0].route(md); got != want {
				t.Errorf("%s v2=%v: route(%q) = %v, want %v", tc.codec, tc.v2, col, got, want)
			}
		}
	}
}
