package loader

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	pq "github.com/apache/arrow-go/v18/parquet"

	"github.com/meshfeed/meshfeed/objstore"
)

// hopWindow is the bytes format reads at a page's start to walk the headers
// of pages larger than pageWindow (format/pieces_pages.go).
const hopWindow = 4 << 10

// TestPieceWalksLargePagesByTheirHeaders: without an offset index, a piece
// of a row group of 1 MiB pages finds its pages by reading each page's
// header alone (a first window of pageWindow bytes, then hopWindow bytes
// at each later page), so it fetches at most that much more than the same
// piece of the same file with an offset index: not a window of
// pageWindow bytes per page.
func TestPieceWalksLargePagesByTheirHeaders(t *testing.T) {
	rec := fastRecord(0, 200_000)
	defer rec.Release()
	dir := t.TempDir()
	fetched := map[bool]int64{}
	var pages int64
	for _, index := range []bool{true, false} {
		path := filepath.Join(dir, fmt.Sprintf("walk_%v.parquet", index))
		writeFastFile(t, path, []arrow.RecordBatch{rec}, pq.WithDictionaryDefault(false), pq.WithMaxRowGroupLength(200_000),
			pq.WithDataPageSize(1<<20), pq.WithPageIndexEnabled(index))
		ds, mem := openChecked(t, path, WithColumns("id", "features"))
		ref := ds.RowGroups()[0]
		ref.Start, ref.End = 90_000, 110_000
		st := checkPiece(t, ds, ref, mem, nil)
		fetched[index] = st.FetchedBytes.Load()
		for _, c := range ds.Files[0].RowGroups[0].Chunks {
			pages += c.Length/(1<<20) + 1
		}
	}
	pages /= 2
	walk := fetched[false] - fetched[true]
	limit := 2*pageWindow + pages*hopWindow
	t.Logf("piece of 20,000 rows: fetched %d bytes with an offset index, %d without (%d pages walked in 2 columns: %d bytes, at most %d)",
		fetched[true], fetched[false], pages, walk, limit)
	if walk > int64(limit) {
		t.Errorf("walking the headers of %d pages of 1 MiB fetched %d bytes, want at most %d", pages, walk, limit)
	}
}

// slowStore is a store (reads only, no mappings) whose every read takes
// delay, counting the most reads in flight at once.
type slowStore struct {
	objstore.Store
	delay          time.Duration
	inFlight, most atomic.Int64
}

func (s *slowStore) ReadAt(ctx context.Context, obj objstore.Object, p []byte, off int64) error {
	n := s.inFlight.Add(1)
	for m := s.most.Load(); n > m && !s.most.CompareAndSwap(m, n); m = s.most.Load() {
	}
	time.Sleep(s.delay)
	s.inFlight.Add(-1)
	return s.Store.ReadAt(ctx, obj, p, off)
}

// TestPieceReadsEqualPagesHeadersAtOnce: without an offset index, once two
// pages of one size are walked, the headers of the next pages are read at
// once (at that stride), not one round trip per page; the piece's rows are
// right.
func TestPieceReadsEqualPagesHeadersAtOnce(t *testing.T) {
	rec := fastRecord(0, 400_000)
	defer rec.Release()
	path := filepath.Join(t.TempDir(), "hops.parquet")
	writeFastFile(t, path, []arrow.RecordBatch{rec}, pq.WithDictionaryDefault(false), pq.WithMaxRowGroupLength(400_000), pq.WithDataPageSize(1<<20))
	local := objstore.NewLocalStore()
	defer local.Close()
	store := &slowStore{Store: local, delay: 5 * time.Millisecond}
	ds, err := Open(context.Background(), store, []string{path}, WithFooterCache(nil), WithColumns("features"))
	if err != nil {
		t.Fatal(err)
	}
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	ref := ds.RowGroups()[0]
	ref.Start, ref.End = 300_000, 310_000 // in the chunk's 12th page of 13
	st := checkPiece(t, ds, ref, mem, nil)
	t.Logf("%d reads, at most %d at once", st.Fetches.Load(), store.most.Load())
	if store.most.Load() < 4 {
		t.Errorf("at most %d reads in flight at once, want the headers of the pages after the first two read together", store.most.Load())
	}
}
