package loader

import (
	"context"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	pq "github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/parquet-go/parquet-go"

	"github.com/meshfeed/meshfeed/objstore"
)

// List columns in v1 data pages without an offset index (what pyarrow and
// arrow-go write by default) are streamed: their pages are located by
// counting the rows that start in each (repetition level 0), and a piece
// decodes only its rows' pages. arrow-go cuts v1 list pages anywhere, so
// most pages begin inside a row, and long rows span pages holding no row
// start at all: a piece then decodes the page where its first row starts
// (whose leading values belong to the row before) through the page where
// the row after its last one starts.

func TestPiecesStreamV1Lists(t *testing.T) {
	seed := fastSeed(t)
	r := rand.New(rand.NewPCG(seed, seed^0x715f))
	var recs []arrow.RecordBatch
	for first := 0; first < 1000; first += 400 {
		rec := vlistRecord(seed, first, min(400, 1000-first))
		defer rec.Release()
		recs = append(recs, rec)
	}
	dir := t.TempDir()
	for _, cd := range streamedCodecs {
		t.Run(cd.name, func(t *testing.T) {
			path := filepath.Join(dir, cd.name+".parquet")
			writeFastFile(t, path, recs,
				pq.WithCompression(cd.codec),
				pq.WithDictionaryDefault(false),
				pq.WithDataPageVersion(pq.DataPageV1),
				pq.WithMaxRowGroupLength(400),
				pq.WithDataPageSize(1<<10),
				pq.WithPageIndexEnabled(false))
			ctx := context.Background()
			store := objstore.NewLocalStore()
			defer store.Close()
			for k, col := range []string{"tokens", "rtokens", "stokens"} {
				t.Run(col, func(t *testing.T) {
					mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
					defer mem.AssertSize(t, 0)
					ds, err := Open(ctx, store, []string{path}, WithColumns(col), WithFooterCache(nil))
					if err != nil {
						t.Fatal(err)
					}
					if offsetIndexed(t, path, k) {
						t.Fatal("offset index written; the test needs none")
					}
					// Whole row groups and their pages as format locates
					// them: format's TestPiecesLocateV1Lists.
					first := 0
					for rg, meta := range ds.Files[0].RowGroups {
						rec, err := ds.ReadRowGroup(ctx, 0, rg, mem)
						if err != nil {
							t.Fatal(err)
						}
						checkVlist(t, seed, k, rec.Column(0), first)
						rec.Release()
						first += int(meta.Rows)
					}
					refs := randomPieces(r, ds, 60)
					st := checkPieces(t, ds, refs, mem)
					// Consecutive pieces, one at a time: where one ends
					// inside a compressed page, the next takes that page
					// decompressed instead of decompressing it again.
					sst := checkPieces(t, ds, evenPieces(ds, 7), mem, WithReaderDecodeWorkers(1))
					if n := sst.PagesReused.Load(); (n > 0) != (cd.name == "snappy") {
						t.Errorf("%d list pages taken decompressed from the piece before; want some for snappy, none for %s (levels apart: snappy; whole pages: zstd, gzip; nothing to decompress: none)", n, cd.name)
					}
					// Streamed: every piece decoded pages of its own (the
					// column decoded whole decodes none).
					if p, n := st.Pages.Load(), st.Pieces.Load(); p < n {
						t.Fatalf("%d pages decoded by %d pieces: the column was not streamed", p, n)
					}
					// Where the levels are read apart from the values (codec
					// none, snappy), a piece holds its rows' values alone,
					// not its pages'.
					if cd.name == "none" || cd.name == "snappy" {
						rd := ds.NewReader(ctx, refs, mem)
						for {
							rec, ref, err := rd.Next()
							if err == io.EOF {
								break
							}
							if err != nil {
								t.Fatal(err)
							}
							l := rec.Column(0).(*array.List)
							offs := l.Offsets()
							if n := l.ListValues().Len(); l.Data().Offset() != 0 || offs[0] != 0 || int(offs[len(offs)-1]) != n {
								t.Errorf("row group %d rows [%d, %d): %d values held for rows holding %d (offsets from %d)", ref.Index, ref.Start, ref.End, n, offs[len(offs)-1]-offs[0], offs[0])
							}
							rec.Release()
						}
						rd.Close()
					}
					// A piece of the whole row group (WithReaderMaxPiece):
					// its in-flight peak stays within a budget smaller than
					// the row group.
					ref := ds.RowGroups()[0]
					full := ref.Bytes + ds.Files[0].RowGroups[0].DecodedBytes
					budget := full / 4
					rd := ds.NewReader(ctx, []RowGroupRef{ref}, mem, WithReaderMaxPiece(budget/4), WithReaderReadAhead(budget))
					defer rd.Close()
					drainReader(t, rd)
					if peak := rd.PeakInFlight(); peak > budget {
						t.Errorf("peak in flight %d bytes, budget %d (row group %d)", peak, budget, full)
					}
					if n := rd.Stats().Pieces.Load(); n < 4 {
						t.Errorf("%d pieces, want at least 4", n)
					}
				})
			}
		})
	}
}

// TestPiecesV1ListEmptyLists: a v1 list column holding empty lists (its
// definition levels below the max) is not placed: it is decoded whole once
// per row group, and charged whole, not streamed page by page.
func TestPiecesV1ListEmptyLists(t *testing.T) {
	rec := fastRecord(0, 3000)
	defer rec.Release()
	dir := t.TempDir()
	for _, codec := range []compress.Compression{compress.Codecs.Uncompressed, compress.Codecs.Snappy} {
		t.Run(codec.String(), func(t *testing.T) {
			path := filepath.Join(dir, codec.String()+".parquet")
			writeFastFile(t, path, []arrow.RecordBatch{rec},
				pq.WithCompression(codec),
				pq.WithDictionaryDefault(false),
				pq.WithDataPageVersion(pq.DataPageV1),
				pq.WithMaxRowGroupLength(3000),
				pq.WithDataPageSize(1<<10))
			ctx := context.Background()
			store := objstore.NewLocalStore()
			defer store.Close()
			mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
			defer mem.AssertSize(t, 0)
			for _, col := range []string{"etokens", "tokens"} {
				ds, err := Open(ctx, store, []string{path}, WithColumns(col), WithFooterCache(nil))
				if err != nil {
					t.Fatal(err)
				}
				// Whether its pages are placed: format's
				// TestLocateV1ListEmptyLists.
				st := checkPieces(t, ds, randomPieces(rand.New(rand.NewPCG(1, 2)), ds, 400), mem)
				if got, want := st.Pages.Load() > 0, col == "tokens"; got != want {
					t.Errorf("column %q: pages decoded by pieces %v, want %v", col, got, want)
				}
			}
		})
	}
}

// offsetIndexed reports whether leaf column leaf of path's first row
// group has an offset index (read with parquet-go, apart from the loader).
func offsetIndexed(t *testing.T, path string, leaf int) bool {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	pf, err := parquet.OpenFile(f, st.Size(), parquet.SkipPageIndex(true))
	if err != nil {
		t.Fatal(err)
	}
	return pf.Metadata().RowGroups[0].Columns[leaf].OffsetIndexOffset != 0
}
