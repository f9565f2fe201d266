package format

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	pq "github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
)

// TestPiecesOnPagesDecompressInPlace: pieces of a compressed fixed-size
// list column (v1 pages: levels, then values) that start and end on its
// pages (PageBreaks) decompress every page into their own values buffer,
// the first one too (room is left before the values for its levels), so
// none goes through scratch (scratchPages); their values equal the whole
// row group's. Without that room (testNoHead), each piece's first page
// goes through scratch (the counter counts).
func TestPiecesOnPagesDecompressInPlace(t *testing.T) {
	rec := fastRecord(0, 20000)
	defer rec.Release()
	ctx := context.Background()
	for _, codec := range []compress.Compression{compress.Codecs.Snappy, compress.Codecs.Zstd, compress.Codecs.Gzip} {
		t.Run(codec.String(), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "f.parquet")
			writeFastFile(t, path, []arrow.RecordBatch{rec}, pq.WithCompression(codec), pq.WithDictionaryDefault(false),
				pq.WithMaxRowGroupLength(10000), pq.WithDataPageSize(16<<10))
			f := mustOpen(t, path, []string{"features"}, testOptions())
			mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
			defer mem.AssertSize(t, 0)
			whole, err := f.readRowGroup(ctx, 0, mem)
			if err != nil {
				t.Fatal(err)
			}
			defer whole.Release()
			var sh Shared
			defer sh.Release()
			breaks, err := f.dec.(Ranged).PageBreaks(ctx, Piece{RG: 0, Lo: 0, Hi: 1, Mem: mem, Stats: &Stats{}, Shared: &sh, Fetch: f})
			if err != nil {
				t.Fatal(err)
			}
			if len(breaks) < 4 {
				t.Fatalf("page breaks %v: the test needs more pages", breaks)
			}
			check := func(lo, hi int64, sh *Shared) int64 {
				before := scratchPages.Load()
				got, err := f.readRange(ctx, 0, lo, hi, sh, &Stats{}, mem)
				if err != nil {
					t.Fatal(err)
				}
				defer got.Release()
				want := whole.NewSlice(lo, hi)
				defer want.Release()
				if !array.Equal(got.Column(0), want.Column(0)) {
					t.Fatalf("rows [%d, %d): values differ from the whole row group's", lo, hi)
				}
				return scratchPages.Load() - before
			}
			// Pieces of two pages each, from the row group's start.
			ends := append([]int64{0}, breaks...)
			ends = append(ends, whole.NumRows())
			var on Shared
			defer on.Release()
			for i := 0; i+1 < len(ends); i += 2 {
				hi := ends[min(i+2, len(ends)-1)]
				if n := check(ends[i], hi, &on); n != 0 {
					t.Errorf("rows [%d, %d), on pages: %d pages decompressed to scratch, want 0", ends[i], hi, n)
				}
			}
			testNoHead = true
			defer func() { testNoHead = false }()
			var off Shared
			defer off.Release()
			if n := check(breaks[1], breaks[3], &off); n != 1 {
				t.Errorf("rows [%d, %d) without room before the values: %d pages decompressed to scratch, want 1 (the first)", breaks[1], breaks[3], n)
			}
		})
	}
}
