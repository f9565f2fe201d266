package loader_test

import (
	"context"
	"errors"
	"io"
	"sync/atomic"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/meshfeed/meshfeed/loader"
	"github.com/meshfeed/meshfeed/objstore"
)

// TestReaderTransform: the transform runs once on each record, with its
// place in the read order and its ref, before Next returns what it
// returned, whole row groups and pieces alike; its error is Next's, in the
// record's place, and nothing leaks.
func TestReaderTransform(t *testing.T) {
	dir := t.TempDir()
	writeIDFiles(t, dir, 3, 1000, 128)
	store := objstore.NewLocalStore()
	defer store.Close()
	ctx := context.Background()
	ds, err := loader.Open(ctx, store, []string{dir}, loader.WithDecodeWorkers(2))
	if err != nil {
		t.Fatal(err)
	}
	refs := ds.RowGroups()
	pieces := []loader.RowGroupRef{refs[0], refs[1], refs[1]}
	pieces[1].Start, pieces[1].End = 0, 50
	pieces[2].Start, pieces[2].End = 50, refs[1].Rows
	for _, reads := range [][]loader.RowGroupRef{refs, pieces} {
		mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
		var calls atomic.Int64
		r := ds.NewReader(ctx, reads, mem, loader.WithReaderTransform(func(k int, ref loader.RowGroupRef, rec arrow.RecordBatch) (arrow.RecordBatch, error) {
			calls.Add(1)
			if ref != reads[k] {
				t.Errorf("transform #%d of %+v, want %+v", k, ref, reads[k])
			}
			out := rec.NewSlice(0, 1) // one row, to see it is what Next returns
			rec.Release()
			return out, nil
		}))
		for i := 0; ; i++ {
			rec, _, err := r.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if rec.NumRows() != 1 {
				t.Errorf("Next #%d has %d rows, want the transform's 1", i, rec.NumRows())
			}
			rec.Release()
		}
		r.Close()
		if calls.Load() != int64(len(reads)) {
			t.Errorf("transform ran %d times for %d reads", calls.Load(), len(reads))
		}
		mem.AssertSize(t, 0)
	}
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	boom := errors.New("boom")
	r := ds.NewReader(ctx, refs, mem, loader.WithReaderTransform(func(k int, _ loader.RowGroupRef, rec arrow.RecordBatch) (arrow.RecordBatch, error) {
		if k == 1 {
			rec.Release()
			return nil, boom
		}
		return rec, nil
	}))
	rec, _, err := r.Next()
	if err != nil {
		t.Fatal(err)
	}
	rec.Release()
	if _, _, err := r.Next(); !errors.Is(err, boom) {
		t.Errorf("Next(transform failed) = %v, want its error", err)
	}
	r.Close()
	mem.AssertSize(t, 0)
}
