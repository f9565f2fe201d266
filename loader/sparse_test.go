package loader

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	pq "github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
)

// TestSparseEdgePages: pieces of a fixed_size_list column in uncompressed
// 1 MiB v1 pages without an offset index fetch, of the pages at their
// edges, the headers, the levels and their own rows' values only
// (format.SparseFetcher): each piece's record equals the same rows of the
// whole row group; the bytes left out are exactly what fetching whole
// pages reads more; a piece on page boundaries, or whose rows outside it
// in a page are under 64 KiB, leaves nothing out; SNAPPY pages are fetched
// whole; where the file is mapped (WithMmap, the default), nothing is left
// out: the pages are mapped whole.
func TestSparseEdgePages(t *testing.T) {
	rec := fastRecord(0, 200000)
	defer rec.Release()
	dir := t.TempDir()
	for _, codec := range []compress.Compression{compress.Codecs.Uncompressed, compress.Codecs.Snappy} {
		t.Run(codec.String(), func(t *testing.T) {
			path := filepath.Join(dir, fmt.Sprintf("sparse_%v.parquet", codec))
			writeFastFile(t, path, []arrow.RecordBatch{rec}, pq.WithDictionaryDefault(false), pq.WithMaxRowGroupLength(200000),
				pq.WithDataPageSize(1<<20), pq.WithCompression(codec), pq.WithDataPageVersion(pq.DataPageV1))
			ds, mem := openChecked(t, path, WithColumns("id", "features"), WithMmap(false))
			mapped, mmem := openChecked(t, path, WithColumns("id", "features"))
			ref := ds.RowGroups()[0]
			whole, err := ds.ReadRowGroup(context.Background(), 0, 0, mem)
			if err != nil {
				t.Fatal(err)
			}
			defer whole.Release()
			// The pages located first (the decoder keeps them for its
			// readers): each read below fetches pages alone.
			func() {
				p := ref
				p.Start, p.End = 0, 1
				got, _ := readAll(t, ds, []RowGroupRef{p}, mem)
				releaseAll(got)
			}()
			// float32[8]: 32 bytes a row, 32,768 rows a page of 1 MiB.
			for _, c := range []struct {
				start, end int64
				sparse     bool
			}{
				{5000, 100000, true},    // 160 KB left out of the first page, 994 KB of the last
				{40000, 41000, true},    // inside one page: both ends
				{1000, 30000, true},     // 32 KB before it (kept), 88 KB after it (left out)
				{100, 200, true},        // the end of its page left out
				{32768, 65536, false},   // one whole page
				{65536, 196608, false},  // whole pages
				{199000, 200000, true},  // the last page (from row 196,608): 76 KB left out
				{197000, 200000, false}, // 392 rows before it in its page (12 KB): kept
			} {
				p := ref
				p.Start, p.End = c.start, c.end
				read := func(wholePages bool) (fetched, skipped int64) {
					testWholePages = wholePages
					defer func() { testWholePages = false }()
					got, st := readAll(t, ds, []RowGroupRef{p}, mem)
					defer releaseAll(got)
					want := whole.NewSlice(c.start, c.end)
					defer want.Release()
					if len(got) != 1 || !array.RecordEqual(got[0], want) {
						t.Errorf("rows [%d, %d) (whole pages %v): not the whole row group's rows", c.start, c.end, wholePages)
					}
					return st.FetchedBytes.Load(), st.SparseSkipped.Load()
				}
				fetched, skipped := read(false)
				// Mapped, the same piece maps its edge pages whole.
				func() {
					p := mapped.RowGroups()[0]
					p.Start, p.End = c.start, c.end
					got, st := readAll(t, mapped, []RowGroupRef{p}, mmem)
					defer releaseAll(got)
					if st.SparseSkipped.Load() != 0 || st.MappedBytes.Load() == 0 {
						t.Errorf("rows [%d, %d) mapped: %d bytes left out, %d mapped; want none left out, pages mapped", c.start, c.end, st.SparseSkipped.Load(), st.MappedBytes.Load())
					}
				}()
				full, none := read(true)
				t.Logf("rows [%d, %d): %d bytes fetched, %d left out; %d with whole pages", c.start, c.end, fetched, skipped, full)
				want := c.sparse && codec == compress.Codecs.Uncompressed
				switch {
				case none != 0:
					t.Errorf("rows [%d, %d): %d bytes left out with whole pages", c.start, c.end, none)
				case want && skipped < 64<<10:
					t.Errorf("rows [%d, %d): %d bytes left out, want the values of the rows outside them in their edge pages", c.start, c.end, skipped)
				case !want && skipped != 0:
					t.Errorf("rows [%d, %d): %d bytes left out, want none", c.start, c.end, skipped)
				case fetched+skipped != full:
					t.Errorf("rows [%d, %d): %d bytes fetched + %d left out != %d fetched with whole pages", c.start, c.end, fetched, skipped, full)
				}
			}
		})
	}
}
