package loader

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	pq "github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
)

// checkPiece reads the piece ref alone through share and compares it with
// the same rows of the whole row group; it returns the reader's stats.
func checkPiece(t *testing.T, ds *Dataset, ref RowGroupRef, mem memory.Allocator, share *FetchShare) *ReadStats {
	t.Helper()
	ctx := context.Background()
	whole, err := ds.ReadRowGroup(ctx, ref.File, ref.Index, mem)
	if err != nil {
		t.Fatal(err)
	}
	defer whole.Release()
	rd := ds.NewReader(ctx, []RowGroupRef{ref}, mem, WithReaderDecodeWorkers(2), WithReaderFetchShare(share))
	defer rd.Close()
	rec, _, err := rd.Next()
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Release()
	want := whole.NewSlice(ref.Start, ref.End)
	defer want.Release()
	if !array.RecordEqual(rec, want) {
		t.Fatalf("rows [%d, %d) read through the share differ from the whole row group's", ref.Start, ref.End)
	}
	if _, _, err := rd.Next(); err != io.EOF {
		t.Fatalf("Next after the piece = %v, want io.EOF", err)
	}
	return rd.Stats()
}

// TestFetchShareFetchesEdgePagesOnce: three readers read neighbouring pieces
// of one row group whose edges fall inside pages (as a stream's slices do
// where their edges fall inside a row group); with a FetchShare the pages
// they share are fetched from storage once, so that together they fetch the
// row group's chunks about once, where alone each fetches its edge pages
// again; every record equals the same rows of the whole row group; the
// share holds nothing once the readers are done, and a share whose bound
// holds no page changes nothing.
func TestFetchShareFetchesEdgePagesOnce(t *testing.T) {
	rec := fastRecord(0, 20000)
	defer rec.Release()
	dir := t.TempDir()
	for _, c := range []struct {
		codec compress.Compression
		index bool
	}{{compress.Codecs.Uncompressed, false}, {compress.Codecs.Snappy, false}, {compress.Codecs.Uncompressed, true}} {
		t.Run(fmt.Sprintf("%v/index=%v", c.codec, c.index), func(t *testing.T) {
			path := filepath.Join(dir, fmt.Sprintf("share_%v_%v.parquet", c.codec, c.index))
			writeFastFile(t, path, []arrow.RecordBatch{rec}, pq.WithDictionaryDefault(false), pq.WithMaxRowGroupLength(20000),
				pq.WithDataPageSize(64<<10), pq.WithPageIndexEnabled(c.index), pq.WithCompression(c.codec))
			ds, mem := openChecked(t, path, WithColumns("id", "features"), WithMmap(false)) // mapped, pieces share the page cache (Dataset.mappedWindow)
			ref := ds.RowGroups()[0]
			edges := []int64{0, 7001, 13003, 20000}
			read := func(share *FetchShare) (fetched int64) {
				for i := range 3 {
					p := ref
					p.Start, p.End = edges[i], edges[i+1]
					st := checkPiece(t, ds, p, mem, share)
					fetched += st.FetchedBytes.Load()
				}
				return fetched
			}
			// Every read below finds the pages located: the Dataset's
			// decoder keeps the locations for its readers (the first
			// read walks the headers, the next ones fetch only pages).
			if first, again := read(nil), read(nil); again >= first {
				t.Errorf("fetched %d bytes with the pages located, %d locating them: want fewer", again, first)
			}
			alone := read(nil)
			share := NewFetchShare(map[[2]int]int{{0, 0}: 3}, ref.Bytes)
			shared := read(share)
			t.Logf("row group of %d bytes in 3 pieces: fetched %d bytes alone, %d through the share (%d saved)", ref.Bytes, alone, shared, share.Saved.Load())
			if share.Saved.Load() <= 0 || shared >= alone {
				t.Errorf("fetched %d bytes with the share (%d saved), %d without: want fewer", shared, share.Saved.Load(), alone)
			}
			// The chunks once: the pages were located before.
			limit := ref.Bytes
			if shared > limit {
				t.Errorf("fetched %d bytes with the share for a row group of %d, want at most %d", shared, ref.Bytes, limit)
			}
			if h := share.Held(); h != 0 {
				t.Errorf("the share holds %d bytes after every reader is done, want 0", h)
			}
			tiny := NewFetchShare(map[[2]int]int{{0, 0}: 3}, 1)
			if got := read(tiny); got != alone || tiny.Saved.Load() != 0 {
				t.Errorf("a share of 1 byte: fetched %d (saved %d), want %d as without", got, tiny.Saved.Load(), alone)
			}
		})
	}
}

// TestFetchShareReleasedOnClose: a reader closed before it reads its
// pieces is done with its row groups: the share drops what it held for
// them once the other readers are done too.
func TestFetchShareReleasedOnClose(t *testing.T) {
	rec := fastRecord(0, 20000)
	defer rec.Release()
	path := filepath.Join(t.TempDir(), "close.parquet")
	writeFastFile(t, path, []arrow.RecordBatch{rec}, pq.WithDictionaryDefault(false), pq.WithMaxRowGroupLength(20000), pq.WithDataPageSize(64<<10))
	ds, mem := openChecked(t, path, WithColumns("id", "features"), WithMmap(false)) // mapped, pieces share the page cache (Dataset.mappedWindow)
	ref := ds.RowGroups()[0]
	share := NewFetchShare(map[[2]int]int{{0, 0}: 2}, ref.Bytes)
	a, b := ref, ref
	a.Start, a.End = 0, 9000
	b.Start, b.End = 9000, 20000
	checkPiece(t, ds, a, mem, share)
	if share.Held() == 0 {
		t.Fatal("the share holds nothing after the first reader: the test shares no page")
	}
	rd := ds.NewReader(context.Background(), []RowGroupRef{b}, mem, WithReaderFetchShare(share))
	rd.Close()
	if h := share.Held(); h != 0 {
		t.Errorf("the share holds %d bytes after both readers are done, want 0", h)
	}
}
