package feed

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/meshfeed/meshfeed/loader"
	"github.com/meshfeed/meshfeed/transport"
)

// TestPipelineNullsAsValidity: over Flight a column without a fill delivers
// its nulls as Arrow nulls, and GetFlightInfo's schema says so (nullable, with
// the footers' null count); with a fill, the nulls become the fill.
func TestPipelineNullsAsValidity(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a.parquet"), nullFile(t), 0o644); err != nil {
		t.Fatal(err)
	}
	mem := checkedMem(t)
	p, err := NewPipeline(context.Background(), WithAllocator(mem), WithLoaderOptions(loader.WithFooterCache(nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	ts := startServer(t, viaTCP, p, []transport.Option{transport.WithAllowedRoots(dir)})
	for _, fill := range []string{"", "-1"} {
		req := pipeRequest(dir, 8, 1, []int{0}, transport.LastBatchDrop)
		req.Epochs = 1
		req.Columns = []transport.Column{{Name: "id"}}
		want := "[1 2 (null) 4 5 6 7 8]"
		if fill != "" {
			req.Columns[0].Fill = []byte(fill)
			want = "[1 2 -1 4 5 6 7 8]"
		}
		info, err := ts.Client.GetFlightInfo(context.Background(), cmdDescriptor(t, req))
		if err != nil {
			t.Fatalf("fill %q: GetFlightInfo: %v", fill, err)
		}
		sch, err := flight.DeserializeSchema(info.Schema, memory.DefaultAllocator)
		if err != nil {
			t.Fatal(err)
		}
		f := sch.Field(0)
		nc, _ := f.Metadata.GetValue("meshfeed.null_count")
		if fill == "" && (!f.Nullable || nc != "1") {
			t.Errorf("no fill: schema field %v, want nullable with meshfeed.null_count 1", f)
		}
		if fill != "" && (f.Nullable || nc != "") {
			t.Errorf("fill: schema field %v, want non-nullable without null count", f)
		}
		s, err := ts.Client.DoGet(context.Background(), ticket(t, req))
		if err != nil {
			t.Fatal(err)
		}
		rdr, err := flight.NewRecordReader(s)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for rdr.Next() {
			got := rdr.RecordBatch().Column(0).(*array.Int64).String()
			if got != want {
				t.Errorf("fill %q: id = %s, want %s", fill, got, want)
			}
			n++
		}
		if err := rdr.Err(); err != nil || n != 1 {
			t.Errorf("fill %q: %d steps, err %v; want 1 step", fill, n, err)
		}
		rdr.Release()
	}
}
