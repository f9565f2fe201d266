package loader

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	pq "github.com/apache/arrow-go/v18/parquet"
)

// TestFetchShareConcurrentReaders: readers of neighbouring pieces reading
// at once through one share each get their rows right (run with -race),
// and the share holds nothing once they are done.
func TestFetchShareConcurrentReaders(t *testing.T) {
	rec := fastRecord(0, 20000)
	defer rec.Release()
	path := filepath.Join(t.TempDir(), "concurrent.parquet")
	writeFastFile(t, path, []arrow.RecordBatch{rec}, pq.WithDictionaryDefault(false), pq.WithMaxRowGroupLength(20000), pq.WithDataPageSize(16<<10))
	ds, mem := openChecked(t, path, WithColumns("id", "features"), WithMmap(false)) // mapped, pieces share the page cache (Dataset.mappedWindow)
	ctx := context.Background()
	whole, err := ds.ReadRowGroup(ctx, 0, 0, mem)
	if err != nil {
		t.Fatal(err)
	}
	defer whole.Release()
	edges := []int64{0, 3001, 7777, 12000, 16500, 20000}
	share := NewFetchShare(map[[2]int]int{{0, 0}: len(edges) - 1}, ds.RowGroups()[0].Bytes)
	errs := make(chan error, len(edges)-1)
	for i := range len(edges) - 1 {
		go func() {
			errs <- readPieceThrough(ctx, ds, mem, whole, edges[i], edges[i+1], share)
		}()
	}
	for range len(edges) - 1 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if share.Saved.Load() == 0 {
		t.Error("nothing served from the share")
	}
	if h := share.Held(); h != 0 {
		t.Errorf("the share holds %d bytes after every reader is done, want 0", h)
	}
}

// readPieceThrough reads rows [start, end) of row group 0 through share
// and compares them with whole's.
func readPieceThrough(ctx context.Context, ds *Dataset, mem memory.Allocator, whole arrow.RecordBatch, start, end int64, share *FetchShare) error {
	ref := ds.RowGroups()[0]
	ref.Start, ref.End = start, end
	rd := ds.NewReader(ctx, []RowGroupRef{ref}, mem, WithReaderFetchShare(share))
	defer rd.Close()
	got, _, err := rd.Next()
	if err != nil {
		return err
	}
	defer got.Release()
	want := whole.NewSlice(start, end)
	defer want.Release()
	if !array.RecordEqual(got, want) {
		return fmt.Errorf("rows [%d, %d) differ from the whole row group's", start, end)
	}
	return nil
}
