package loader

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	pq "github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/file"

	"github.com/meshfeed/meshfeed/internal/procmem"
	"github.com/meshfeed/meshfeed/objstore"
)

// Pieces (pieces.go): rows [a, b) of a row group read by themselves must be
// exactly rows [a, b) of the whole row group's record, for every column type
// the fast path streams (and the others, decoded whole and sliced), every
// codec, v1 and v2 pages, with and without dictionary pages and offset
// index, with pieces that cut through pages. The whole-row-group reads are
// checked against the generators here and against pyarrow in
// TestPyarrowFiles; TestPyarrowFilesInPieces checks pieces against pyarrow
// directly.

// randomPieces splits every row group of ds into consecutive ranges of
// random sizes (1 to maxRows rows; sometimes, but not the first, the whole
// row group).
func randomPieces(r *rand.Rand, ds *Dataset, maxRows int) []RowGroupRef {
	var out []RowGroupRef
	for i, ref := range ds.RowGroups() {
		if i > 0 && r.IntN(5) == 0 {
			out = append(out, ref)
			continue
		}
		for s := int64(0); s < ref.Rows; {
			e := min(ref.Rows, s+int64(r.IntN(maxRows)+1))
			p := ref
			p.Start, p.End = s, e
			out = append(out, p)
			s = e
		}
	}
	return out
}

// evenPieces splits every row group of ds into consecutive pieces of n rows
// (the last of each row group shorter).
func evenPieces(ds *Dataset, n int64) []RowGroupRef {
	var out []RowGroupRef
	for _, ref := range ds.RowGroups() {
		for s := int64(0); s < ref.Rows; s += n {
			p := ref
			p.Start, p.End = s, min(ref.Rows, s+n)
			out = append(out, p)
		}
	}
	return out
}

// checkPieces reads refs with a RowGroupReader and compares every record,
// column by column, with the same rows of the whole row group.
func checkPieces(t *testing.T, ds *Dataset, refs []RowGroupRef, mem memory.Allocator, opts ...ReaderOption) *ReadStats {
	t.Helper()
	st, _ := checkPiecesRead(t, ds, refs, mem, opts...)
	return st
}

// checkPiecesRead is checkPieces, also returning the refs Next returned.
func checkPiecesRead(t *testing.T, ds *Dataset, refs []RowGroupRef, mem memory.Allocator, opts ...ReaderOption) (*ReadStats, []RowGroupRef) {
	t.Helper()
	var read []RowGroupRef
	ctx := context.Background()
	wholes := map[[2]int]arrow.RecordBatch{}
	defer func() {
		for _, w := range wholes {
			w.Release()
		}
	}()
	rd := ds.NewReader(ctx, refs, mem, append([]ReaderOption{WithReaderDecodeWorkers(2)}, opts...)...)
	defer rd.Close()
	next := map[[2]int]int64{} // the row each row group's next piece must start at
	for {
		rec, ref, err := rd.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		read = append(read, ref)
		k := [2]int{ref.File, ref.Index}
		w, ok := wholes[k]
		if !ok {
			if w, err = ds.ReadRowGroup(ctx, ref.File, ref.Index, mem); err != nil {
				t.Fatal(err)
			}
			wholes[k] = w
		}
		start, end := ref.span()
		if start != next[k] {
			t.Fatalf("row group %d: piece starts at row %d, want %d (consecutive)", ref.Index, start, next[k])
		}
		next[k] = end
		if rec.NumRows() != end-start {
			t.Fatalf("row group %d rows [%d, %d): %d rows", ref.Index, start, end, rec.NumRows())
		}
		want := w.NewSlice(start, end)
		for c := 0; c < int(rec.NumCols()); c++ {
			if !array.Equal(rec.Column(c), want.Column(c)) {
				t.Fatalf("row group %d rows [%d, %d) column %q:\n got %v\nwant %v", ref.Index, start, end, rec.ColumnName(c), rec.Column(c), want.Column(c))
			}
		}
		want.Release()
		rec.Release()
	}
	for k, n := range next {
		if rows := ds.Files[k[0]].RowGroups[k[1]].Rows; n != rows {
			t.Fatalf("row group %d: pieces ended at row %d of %d", k[1], n, rows)
		}
	}
	return rd.Stats(), read
}

// pieceCodec is a codec the pieces tests write files with.
type pieceCodec struct {
	name  string
	codec compress.Compression
}

// streamedCodecs are the codecs whose pages the fast path decodes, so
// pieces stream them.
var streamedCodecs = []pieceCodec{
	{"none", compress.Codecs.Uncompressed},
	{"snappy", compress.Codecs.Snappy},
	{"zstd", compress.Codecs.Zstd},
	{"gzip", compress.Codecs.Gzip},
}

// openChecked opens path (no footer cache) with opts on a local store that is
// closed when t ends, and returns it with a checked allocator that t then
// asserts holds nothing (after the store is closed).
func openChecked(t *testing.T, path string, opts ...Option) (*Dataset, *memory.CheckedAllocator) {
	t.Helper()
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	t.Cleanup(func() { mem.AssertSize(t, 0) })
	store := objstore.NewLocalStore()
	t.Cleanup(func() { store.Close() })
	ds, err := Open(context.Background(), store, []string{path}, append(opts, WithFooterCache(nil))...)
	if err != nil {
		t.Fatal(err)
	}
	return ds, mem
}

// drainReader reads rd to its end, releasing every record; an error fails t.
func drainReader(t *testing.T, rd *RowGroupReader) {
	t.Helper()
	for {
		rec, _, err := rd.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		rec.Release()
	}
}

func TestPiecesMatchWholeRowGroups(t *testing.T) {
	seed := fastSeed(t)
	r := rand.New(rand.NewPCG(seed, seed^0x91ece))
	var recs []arrow.RecordBatch
	for first := 0; first < 2500; first += 1000 {
		rec := fastRecord(first, min(1000, 2500-first))
		defer rec.Release()
		recs = append(recs, rec)
	}
	dir := t.TempDir()
	codecs := append(streamedCodecs[:len(streamedCodecs):len(streamedCodecs)],
		pieceCodec{"lz4raw", compress.Codecs.Lz4Raw}) // arrow-go's fallback: decoded whole
	streamed := []string{"id", "label", "features", "nfeatures", "small", "pixels"} // and tokens with an offset index or v2 pages
	for _, c := range codecs {
		for _, dict := range []bool{false, true} {
			for _, v2 := range []bool{false, true} {
				for _, index := range []bool{false, true} {
					label := fmt.Sprintf("%s_dict%v_v2%v_index%v", c.name, dict, v2, index)
					t.Run(label, func(t *testing.T) {
						path := filepath.Join(dir, label+".parquet")
						version := pq.DataPageV1
						if v2 {
							version = pq.DataPageV2
						}
						writeFastFile(t, path, recs,
							pq.WithCompression(c.codec),
							pq.WithDictionaryDefault(dict),
							pq.WithDataPageVersion(version),
							pq.WithMaxRowGroupLength(1000),
							pq.WithDataPageSize(2<<10), // many pages per chunk: pieces cut through them
							pq.WithPageIndexEnabled(index),
						)
						ds, mem := openChecked(t, path, WithFill(map[string]float64{"maybe": -1}))
						// The variant is what it says: an offset index or none.
						if got := offsetIndexed(t, path, 0); got != index {
							t.Fatalf("offset index written = %v, want %v", got, index)
						}
						first := 0
						for rg, meta := range ds.Files[0].RowGroups {
							rec, err := ds.ReadRowGroup(context.Background(), 0, rg, mem)
							if err != nil {
								t.Fatal(err)
							}
							for i, f := range rec.Schema().Fields() {
								checkColumn(t, f.Name, rec.Column(i), first)
							}
							rec.Release()
							first += int(meta.Rows)
						}
						st := checkPieces(t, ds, randomPieces(r, ds, 300), mem)
						if st.Pieces.Load() == 0 {
							t.Fatal("no piece was read")
						}
						// Streamed columns decode only their pages: with no
						// dictionary and a fast codec, pages were decoded by
						// pieces.
						if c.name != "lz4raw" && !dict && st.Pages.Load() == 0 {
							t.Errorf("no page decoded by pieces; columns %v should stream", streamed)
						}
						if c.name == "lz4raw" || dict {
							if n := st.Pages.Load(); n != 0 && dict && c.name == "lz4raw" {
								t.Errorf("%d pages streamed from dictionary-encoded lz4 chunks", n)
							}
						}
					})
				}
			}
		}
	}
}

// pageWindow is the bytes format reads at a time to walk page headers
// without an offset index (format/pieces_pages.go).
const pageWindow = 64 << 10

// TestPiecesStreamOnlyTheirPages: a piece of a streamed column fetches and
// decodes about its own rows' pages, not the chunk; with WithReaderMaxPiece
// the reader splits row groups itself, and its in-flight peak stays within
// the budget although one row group is several times larger.
func TestPiecesStreamOnlyTheirPages(t *testing.T) {
	rec := fastRecord(0, 20000)
	defer rec.Release()
	dir := t.TempDir()
	for _, index := range []bool{false, true} {
		t.Run(fmt.Sprintf("index%v", index), func(t *testing.T) {
			path := filepath.Join(dir, fmt.Sprintf("big_%v.parquet", index))
			writeFastFile(t, path, []arrow.RecordBatch{rec},
				pq.WithDictionaryDefault(false),
				pq.WithMaxRowGroupLength(20000),
				pq.WithDataPageSize(8<<10),
				pq.WithPageIndexEnabled(index))
			ds, mem := openChecked(t, path, WithColumns("id", "features"))
			ref := ds.RowGroups()[0]
			full := ref.Bytes + ds.Files[0].RowGroups[0].DecodedBytes
			budget := full / 8
			st := checkPieces(t, ds, []RowGroupRef{ref}, mem, WithReaderMaxPiece(budget/4), WithReaderReadAhead(budget))
			if st.Pieces.Load() < 8 {
				t.Fatalf("%d pieces, want at least 8 of a row group of %d bytes in pieces of %d", st.Pieces.Load(), full, budget/4)
			}
			// Fetched: the chunks once, plus the pages at the pieces' edges
			// (a page holding rows of two pieces is fetched by both: at
			// most 2 pages of 8 KiB per column and piece), plus without an
			// offset index the headers walked (windows of pageWindow bytes,
			// here holding several pages: at most the chunks once more).
			limit := ref.Bytes + st.Pieces.Load()*2*2*(8<<10+1<<10)
			if !index {
				limit += ref.Bytes + 2*pageWindow
			}
			if got := st.FetchedBytes.Load(); got > limit {
				t.Errorf("fetched %d bytes for a row group of %d", got, ref.Bytes)
			}
			rd := ds.NewReader(context.Background(), []RowGroupRef{ref}, mem, WithReaderMaxPiece(budget/4), WithReaderReadAhead(budget))
			drainReader(t, rd)
			if peak := rd.PeakInFlight(); peak > budget {
				t.Errorf("peak in flight %d bytes, budget %d (row group %d)", peak, budget, full)
			}
			rd.Close()
		})
	}
}

// TestPiecesWholeColumnsPinned: a column that cannot be streamed (nulls, a
// boolean) is decoded once per row group for all its pieces and counted
// in flight until the last piece.
func TestPiecesWholeColumnsPinned(t *testing.T) {
	rec := fastRecord(0, 5000)
	defer rec.Release()
	path := filepath.Join(t.TempDir(), "f.parquet")
	writeFastFile(t, path, []arrow.RecordBatch{rec}, pq.WithDictionaryDefault(false), pq.WithMaxRowGroupLength(5000), pq.WithDataPageSize(4<<10))
	ds, mem := openChecked(t, path, WithColumns("id", "flag", "maybe"), WithNullsAsValidity())
	ref := ds.RowGroups()[0]
	streamed, whole := ds.streamedCost(0, 0)
	if streamed == 0 || whole == 0 {
		t.Fatalf("streamed %d, whole %d bytes: want both", streamed, whole)
	}
	var refs []RowGroupRef
	for s := int64(0); s < ref.Rows; s += 500 {
		p := ref
		p.Start, p.End = s, s+500
		refs = append(refs, p)
	}
	rd := ds.NewReader(context.Background(), refs, mem, WithReaderReadAhead(1)) // one piece at a time
	defer rd.Close()
	decoded := rd.Stats()
	drainReader(t, rd)
	if peak := rd.PeakInFlight(); peak < whole {
		t.Errorf("peak in flight %d bytes, below the %d bytes of the columns decoded whole", peak, whole)
	}
	if n := decoded.RowGroups.Load(); n != 0 {
		t.Errorf("%d whole row groups decoded, want 0 (pieces only)", n)
	}
	checkPieces(t, ds, refs, mem)
}

// TestArrowRowBytes: the decoded bytes per row of fixed-width columns are
// exact (8 for int64, 4 per float32 of a fixed_size_list, int8 one byte
// although stored as INT32).
func TestArrowRowBytes(t *testing.T) {
	rec := fastRecord(0, 100)
	defer rec.Release()
	path := filepath.Join(t.TempDir(), "f.parquet")
	writeFastFile(t, path, []arrow.RecordBatch{rec}, pq.WithDictionaryDefault(false))
	store := objstore.NewLocalStore()
	defer store.Close()
	ds, err := Open(context.Background(), store, []string{path}, WithColumns("id", "features", "small"), WithFooterCache(nil))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := ds.ArrowRowBytes(), float64(8+4*fastListSize+1); got != want {
		t.Errorf("ArrowRowBytes = %v, want %v", got, want)
	}
	perRow, whole := ds.StreamedRowBytes()
	if perRow <= 0 || whole != 0 {
		t.Errorf("StreamedRowBytes = %v, %d: want every column streamed", perRow, whole)
	}
}

// TestPiecesReuseTheirRowGroupsPages: consecutive pieces of a row group
// whose rows lie in compressed pages an earlier piece decoded slice those
// pages instead of decompressing them again: a narrow column's chunk is one
// page here, decoded once for all its pieces, with the same values: a later
// piece neither fetches (maps) nor decodes them. Uncompressed pages are
// not kept: each piece copies its own rows out of them
// (TestPiecesOfUncompressedPagesHoldTheirRowsAlone), a copy of the same
// bytes a slice of them would have cost once, without holding the pages'
// other rows for the row group's later pieces.
func TestPiecesReuseTheirRowGroupsPages(t *testing.T) {
	rec := fastRecord(0, 20000)
	defer rec.Release()
	dir := t.TempDir()
	for _, c := range streamedCodecs {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(dir, c.name+".parquet")
			writeFastFile(t, path, []arrow.RecordBatch{rec},
				pq.WithCompression(c.codec),
				pq.WithDictionaryDefault(false),
				pq.WithMaxRowGroupLength(20000),
				pq.WithDataPageSize(1<<20)) // id (160 KB) and label (80 KB): one page each
			ds, mem := openChecked(t, path, WithColumns("id", "label"))
			st := checkPieces(t, ds, evenPieces(ds, 1000), mem, WithReaderDecodeWorkers(1))
			if got := st.Pieces.Load(); got != 20 {
				t.Fatalf("%d pieces read, want 20", got)
			}
			wantPages, wantReused := int64(2), int64(2*19)
			if c.codec == compress.Codecs.Uncompressed {
				wantPages, wantReused = 2*20, 0 // each piece its rows of the one page per column
			}
			if pages, reused := st.Pages.Load(), st.Reused.Load(); pages != wantPages || reused != wantReused {
				t.Errorf("pages decoded %d, columns reused %d; want %d and %d", pages, reused, wantPages, wantReused)
			}
		})
	}
}

// bufferBytes sums the lengths of every buffer of d and its children: the
// memory an array holds, whatever part of it the array views.
func bufferBytes(d arrow.ArrayData) int64 {
	var n int64
	for _, b := range d.Buffers() {
		if b != nil {
			n += int64(b.Len())
		}
	}
	for _, c := range d.Children() {
		n += bufferBytes(c)
	}
	return n
}

// A piece of uncompressed pages of fixed-size lists (of float32, and of
// uint8 stored as INT32, narrowed) or of primitive values (int64, int32)
// copies its own rows' values out of the pages at its edges, not the whole
// pages: its arrays hold exactly its rows' bytes. Pages of 16 KiB, so that
// the 1,000-row pieces start and end inside pages. (Compressed primitive
// pages are decompressed once and sliced by the row group's next pieces:
// TestPiecesReuseTheirRowGroupsPages.)
func TestPiecesOfUncompressedPagesHoldTheirRowsAlone(t *testing.T) {
	rec := fastRecord(0, 20000)
	defer rec.Release()
	cols := []string{"features", "pixels", "id", "label"}
	width := map[string]int64{"features": 4 * fastListSize, "pixels": fastListSize, "id": 8, "label": 4}
	for _, v := range []struct {
		name string
		ver  pq.DataPageVersion
	}{{"v1", pq.DataPageV1}, {"v2", pq.DataPageV2}} {
		t.Run(v.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "none.parquet")
			writeFastFile(t, path, []arrow.RecordBatch{rec},
				pq.WithCompression(compress.Codecs.Uncompressed),
				pq.WithDictionaryDefault(false),
				pq.WithDataPageVersion(v.ver),
				pq.WithMaxRowGroupLength(10000),
				pq.WithDataPageSize(16<<10))
			ds, mem := openChecked(t, path, WithColumns(cols...))
			refs := evenPieces(ds, 1000)
			st := checkPieces(t, ds, refs, mem, WithReaderDecodeWorkers(1))
			if got := st.Pieces.Load(); got != int64(len(refs)) {
				t.Fatalf("%d pieces read, want %d", got, len(refs))
			}
			rd := ds.NewReader(context.Background(), refs, mem, WithReaderDecodeWorkers(1))
			defer rd.Close()
			for range refs {
				got, ref, err := rd.Next()
				if err != nil {
					t.Fatal(err)
				}
				for i, name := range cols {
					want := (ref.End - ref.Start) * width[name]
					if n := bufferBytes(got.Column(i).Data()); n != want {
						t.Errorf("row group %d rows [%d, %d) column %q holds %d bytes, want %d (its rows alone)", ref.Index, ref.Start, ref.End, name, n, want)
					}
				}
				got.Release()
			}
		})
	}
}

// pageValueStarts returns, per row group, the first value of every data
// page of column leaf (values counted from the row group's first), read with
// arrow-go's page reader.
func pageValueStarts(t *testing.T, path string, leaf int) [][]int64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pr, err := file.NewParquetReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]int64
	for rg := 0; rg < pr.NumRowGroups(); rg++ {
		pages, err := pr.RowGroup(rg).GetColumnPageReader(leaf)
		if err != nil {
			t.Fatal(err)
		}
		var starts []int64
		var at int64
		for pages.Next() {
			p, ok := pages.Page().(file.DataPage)
			if !ok {
				continue // a dictionary page
			}
			starts = append(starts, at)
			at += int64(p.NumValues())
		}
		if err := pages.Err(); err != nil {
			t.Fatal(err)
		}
		out = append(out, append(starts, at))
	}
	return out
}

// A compressed page that two pieces of a row group share (the first piece
// ends inside it, the next starts there) is decompressed once, by the first,
// and handed to the next (ReadStats.PagesReused): fixed-size lists of
// float32 and of uint8 stored as INT32 (narrowed), data pages v1 and v2,
// every codec the fast path decompresses; values equal to whole row groups'.
func TestPiecesShareTheirCompressedEdgePages(t *testing.T) {
	rec := fastRecord(0, 20000)
	defer rec.Release()
	cols := []string{"features", "pixels"}
	for _, c := range streamedCodecs[1:] {
		for _, v := range []struct {
			name string
			ver  pq.DataPageVersion
		}{{"v1", pq.DataPageV1}, {"v2", pq.DataPageV2}} {
			t.Run(c.name+"/"+v.name, func(t *testing.T) {
				path := filepath.Join(t.TempDir(), "f.parquet")
				writeFastFile(t, path, []arrow.RecordBatch{rec},
					pq.WithCompression(c.codec),
					pq.WithDictionaryDefault(false),
					pq.WithDataPageVersion(v.ver),
					pq.WithMaxRowGroupLength(10000),
					pq.WithDataPageSize(16<<10))
				// Piece boundaries (every 1,000 rows) that fall inside a page
				// of each column: each is one page handed over.
				var want int64
				for _, leaf := range []int{2, 9} { // features, pixels: one leaf per column before them
					for _, starts := range pageValueStarts(t, path, leaf) {
						for b := int64(1000); b < 10000; b += 1000 {
							at := b * fastListSize
							i := sort.Search(len(starts), func(i int) bool { return starts[i] >= at })
							if i < len(starts) && starts[i] != at {
								want++
							}
						}
					}
				}
				if want == 0 {
					t.Fatal("no piece boundary falls inside a page: the test checks nothing")
				}
				ds, mem := openChecked(t, path, WithColumns(cols...))
				st := checkPieces(t, ds, evenPieces(ds, 1000), mem, WithReaderDecodeWorkers(1))
				if got := st.PagesReused.Load(); got != want {
					t.Errorf("%d pages handed from one piece to the next, want %d (the boundaries inside pages)", got, want)
				}
			})
		}
	}
}

// noWindows hides a local store's WindowMapper: it maps each range.
type noWindows struct {
	objstore.Store
	local *objstore.LocalStore
}

func (s noWindows) Map(ctx context.Context, obj objstore.Object, off, n int64) ([]byte, func(), error) {
	return s.local.Map(ctx, obj, off, n)
}

func (s noWindows) Stats() *objstore.Stats { return s.local.Stats() }

// A reader's pieces of a row group share one mapping of it (a window, made
// by the row group's first piece and unmapped after its last): 20 pieces of
// two row groups of uncompressed pages of 16 KiB map the file twice, and
// each page once (pieces of 1,000 rows start and end inside pages, so
// without the window each edge page was mapped again by the next piece).
// Counted by the store, not timed; every mapping is gone once the reader
// is closed.
func TestPiecesMapTheirRowGroupOnce(t *testing.T) {
	rec := fastRecord(0, 20000)
	defer rec.Release()
	path := filepath.Join(t.TempDir(), "none.parquet")
	writeFastFile(t, path, []arrow.RecordBatch{rec},
		pq.WithCompression(compress.Codecs.Uncompressed),
		pq.WithDictionaryDefault(false),
		pq.WithMaxRowGroupLength(10000),
		pq.WithDataPageSize(16<<10))
	cols := []string{"id", "label", "features"}
	read := func(store objstore.Store) (maps, mapped, chunks int64) {
		mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
		defer mem.AssertSize(t, 0)
		ds, err := Open(context.Background(), store, []string{path}, WithColumns(cols...), WithFooterCache(nil))
		if err != nil {
			t.Fatal(err)
		}
		for _, rg := range ds.Files[0].RowGroups {
			for _, c := range rg.Chunks {
				chunks += c.Length
			}
		}
		stats := store.(objstore.StatsReporter).Stats()
		m0, b0 := stats.Maps.Load(), stats.BytesMapped.Load()
		rd := ds.NewReader(context.Background(), evenPieces(ds, 1000), mem, WithReaderDecodeWorkers(1))
		drainReader(t, rd)
		rd.Close()
		// Each page's header is checked once, by the first piece cutting it.
		if checked, pages := rd.Stats().PagesChecked.Load(), pagesIn(t, path, cols); checked != pages {
			t.Errorf("%d page headers checked by the pieces, want each of the %d pages of the columns once", checked, pages)
		}
		if live := stats.LiveMaps.Load(); live != 0 {
			t.Errorf("%d mappings live after the reader closed", live)
		}
		return stats.Maps.Load() - m0, stats.BytesMapped.Load() - b0, chunks
	}
	local := objstore.NewLocalStore()
	defer local.Close()
	maps, mapped, chunks := read(local)
	other := objstore.NewLocalStore()
	defer other.Close()
	rangeMaps, rangeMapped, _ := read(noWindows{other, other})
	t.Logf("windows: %d maps, %d bytes mapped; a mapping per piece and column: %d maps, %d bytes; the chunks: %d bytes", maps, mapped, rangeMaps, rangeMapped, chunks)
	if maps != 2 {
		t.Errorf("%d mappings for 2 row groups read in 20 pieces, want one per row group", maps)
	}
	page := int64(os.Getpagesize())
	if mapped > chunks+2*2*page {
		t.Errorf("%d bytes mapped for %d bytes of column chunks: pages mapped more than once", mapped, chunks)
	}
	if rangeMapped <= mapped {
		t.Errorf("a mapping per piece mapped %d bytes, the windows %d: the test measures nothing", rangeMapped, mapped)
	}
}

// pagesIn returns the number of data pages of the named columns of path.
func pagesIn(t *testing.T, path string, cols []string) int64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pr, err := file.NewParquetReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for leaf := 0; leaf < pr.MetaData().Schema.NumColumns(); leaf++ {
		if !slices.Contains(cols, pr.MetaData().Schema.Column(leaf).ColumnPath()[0]) {
			continue
		}
		for _, starts := range pageValueStarts(t, path, leaf) {
			n += int64(len(starts) - 1)
		}
	}
	return n
}

// TestReadersLocatePagesOnce: readers of one Dataset that read parts of the
// same row groups (a mixture's cursors, a dataset's slices) locate each
// column chunk's pages once between them: the file's decoder keeps the
// locations for the next reader. Each of 4 readers here reads a quarter of
// both row groups: 6 chunks located, where each reader locating its own
// made 24.
func TestReadersLocatePagesOnce(t *testing.T) {
	rec := fastRecord(0, 20000)
	defer rec.Release()
	path := filepath.Join(t.TempDir(), "located.parquet")
	writeFastFile(t, path, []arrow.RecordBatch{rec},
		pq.WithCompression(compress.Codecs.Uncompressed),
		pq.WithDictionaryDefault(false),
		pq.WithMaxRowGroupLength(10000),
		pq.WithDataPageSize(16<<10))
	for _, mapped := range []bool{true, false} {
		ds, mem := openChecked(t, path, WithColumns("id", "label", "features"), WithMmap(mapped))
		var located, fetches []int64
		for q := int64(0); q < 4; q++ {
			var refs []RowGroupRef
			for _, ref := range ds.RowGroups() {
				p := ref
				p.Start, p.End = q*ref.Rows/4, (q+1)*ref.Rows/4
				refs = append(refs, p)
			}
			rd := ds.NewReader(context.Background(), refs, mem, WithReaderDecodeWorkers(2))
			drainReader(t, rd)
			rd.Close()
			st := rd.Stats()
			located = append(located, st.ChunksLocated.Load())
			fetches = append(fetches, st.Fetches.Load())
		}
		t.Logf("mapped %v: chunks located by each reader %v, fetches %v", mapped, located, fetches)
		if want := []int64{6, 0, 0, 0}; !slices.Equal(located, want) {
			t.Errorf("mapped %v: chunks located by each of 4 readers of quarters of 2 row groups of 3 columns: %v, want %v", mapped, located, want)
		}
	}
}

// A window holds the pages its reader's pieces are using, not every page
// the reader has touched: a piece gives back its pages once decoded (all
// of a compressed page's, whose next piece takes it decompressed; all but
// the last of uncompressed ones, where the next piece starts), so a reader
// of 40 pieces of a 40,000-row row group (1.6 to 1.8 MB of column chunks)
// keeps at most a few pieces' pages of the file in the process's page
// tables (smaps, sampled after every piece), where the window kept them
// all until its last piece: RSS of file pages that the mixture's many
// cursors multiplied (BENCHMARKS.md, "Mixtures"). The pieces read right.
// The store gives dropped pages back 64 KiB at a time (WithDropBatch; its
// default holds 8 MiB, more than the file).
func TestPiecesDropTheirPages(t *testing.T) {
	if _, err := procmem.FileRSS("/"); err != nil {
		t.Skipf("no smaps here: %v", err)
	}
	rec := fastRecord(0, 40000)
	defer rec.Release()
	cols := []string{"id", "label", "features"}
	for _, codec := range []compress.Compression{compress.Codecs.Uncompressed, compress.Codecs.Snappy} {
		t.Run(codec.String(), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "f.parquet")
			writeFastFile(t, path, []arrow.RecordBatch{rec},
				pq.WithCompression(codec), pq.WithDictionaryDefault(false),
				pq.WithMaxRowGroupLength(40000), pq.WithDataPageSize(64<<10))
			store := objstore.NewLocalStore(objstore.WithDropBatch(64 << 10))
			defer store.Close()
			ds, err := Open(context.Background(), store, []string{path}, WithColumns(cols...), WithFooterCache(nil))
			if err != nil {
				t.Fatal(err)
			}
			var chunks int64
			for _, c := range ds.Files[0].RowGroups[0].Chunks {
				chunks += c.Length
			}
			mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
			defer mem.AssertSize(t, 0)
			rd := ds.NewReader(context.Background(), evenPieces(ds, 1000), mem,
				WithReaderDecodeWorkers(1), WithReaderReadAhead(1<<20))
			defer rd.Close()
			var most, row int64
			for {
				got, _, err := rd.Next()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				for i, name := range cols {
					checkColumn(t, name, got.Column(i), int(row))
				}
				row += got.NumRows()
				got.Release()
				n, err := procmem.FileRSS(path)
				if err != nil {
					t.Fatal(err)
				}
				most = max(most, n)
			}
			dropped := store.Stats().BytesDropped.Load()
			t.Logf("%d bytes of column chunks; at most %d bytes of the file in the page tables after a piece; %d bytes dropped", chunks, most, dropped)
			if row != 40000 {
				t.Fatalf("%d rows read, want 40000", row)
			}
			if most > chunks/3 {
				t.Errorf("up to %d bytes of the file in the page tables for pieces of about %d bytes: the window keeps the pages its pieces are done with", most, chunks/40)
			}
			if dropped < chunks/2 {
				t.Errorf("%d bytes dropped of %d", dropped, chunks)
			}
		})
	}
}

// TestSnappedPiecesEndOnPages reads pieces of every size relative to the
// pages (a third of a page to three pages) with WithReaderSnapPieces: the
// values equal the whole row groups' (checkPieces), and the pieces' ends
// are the model's: each cut between two pieces of a row group moved to the
// nearest row where a page of the widest compressed column (features)
// begins, or to the start or end of the run of pieces, when no further
// than the shorter of the two pieces (ties to the later), cuts that meet
// (or reach the run's ends) joined. Where every cut moves, no compressed page
// is handed from a piece to the next (ReadStats.PagesReused), as it is
// without. Uncompressed pages are cut where the pieces were: a piece copies
// its part of such a page out of the mapping either way.
func TestSnappedPiecesEndOnPages(t *testing.T) {
	rec := fastRecord(0, 20000)
	defer rec.Release()
	for _, c := range streamedCodecs[:3] {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "f.parquet")
			writeFastFile(t, path, []arrow.RecordBatch{rec}, pq.WithCompression(c.codec), pq.WithDictionaryDefault(false),
				pq.WithMaxRowGroupLength(10000), pq.WithDataPageSize(16<<10))
			var breaks [][]int64 // per row group: the rows where a features page begins, past the first
			var page int64       // the most rows of a page
			for _, starts := range pageValueStarts(t, path, 2) {
				var rows []int64
				for i, v := range starts[1 : len(starts)-1] {
					if v%fastListSize == 0 {
						rows = append(rows, v/fastListSize)
					}
					page = max(page, (starts[i+1]-starts[i])/fastListSize)
				}
				breaks = append(breaks, rows)
			}
			if page < 64 {
				t.Fatalf("pages of %d rows: the test needs larger ones", page)
			}
			for _, n := range []int64{page / 3, page / 2, page * 6 / 10, page, 3 * page} {
				ds, mem := openChecked(t, path, WithColumns("id", "features"))
				cut := evenPieces(ds, n)
				st, read := checkPiecesRead(t, ds, cut, mem, WithReaderDecodeWorkers(1), WithReaderSnapPieces(true))
				want, moved := snappedModel(cut, breaks, c.codec != compress.Codecs.Uncompressed)
				if fmt.Sprint(ends(read)) != fmt.Sprint(ends(want)) {
					t.Fatalf("pieces of %d rows (pages of %d): ends %v, want %v", n, page, ends(read), ends(want))
				}
				if c.codec == compress.Codecs.Uncompressed {
					continue
				}
				if got := st.PagesReused.Load(); moved && got != 0 {
					t.Errorf("pieces of %d rows: %d pages handed from a piece to the next, want 0 (every piece ends on a page)", n, got)
				}
				_, mem = openChecked(t, path, WithColumns("id", "features"))
				if plain := checkPieces(t, ds, cut, mem, WithReaderDecodeWorkers(1)); n%page != 0 && plain.PagesReused.Load() == 0 {
					t.Errorf("pieces of %d rows, not snapped: no page handed over: the test checks nothing", n)
				}
			}
		})
	}
}

// snappedModel returns the pieces WithReaderSnapPieces reads for cut, with
// breaks[rg] the rows where a page of the widest compressed column begins
// (none when compressed is false), and whether every cut ends on one.
func snappedModel(cut []RowGroupRef, breaks [][]int64, compressed bool) (out []RowGroupRef, all bool) {
	all = true
	for lo := 0; lo < len(cut); {
		hi := lo + 1
		for hi < len(cut) && cut[hi].Index == cut[lo].Index && cut[hi].Start == cut[hi-1].End {
			hi++
		}
		var ends []int64
		for j := lo; j < hi-1; j++ {
			c := cut[j].End
			reach := min(c-cut[j].Start, cut[j+1].End-c)
			b, best := c, int64(-1)
			// The run's start and end count as breaks (ascending: ties
			// go to the later).
			rows := append(append([]int64{cut[lo].Start}, breaks[cut[j].Index]...), cut[hi-1].End)
			for _, r := range rows {
				if d := max(r-c, c-r); compressed && d <= reach && (best < 0 || d <= best) {
					b, best = r, d
				}
			}
			all = all && best >= 0
			if b > cut[lo].Start && b < cut[hi-1].End && (len(ends) == 0 || b > ends[len(ends)-1]) {
				ends = append(ends, b)
			}
		}
		at := cut[lo].Start
		for _, e := range append(ends, cut[hi-1].End) {
			p := cut[lo]
			p.Start, p.End = at, e
			out = append(out, p)
			at = e
		}
		lo = hi
	}
	return out, all
}

// ends returns the row group and end of each ref.
func ends(refs []RowGroupRef) [][2]int64 {
	var out [][2]int64
	for _, r := range refs {
		_, e := r.span()
		out = append(out, [2]int64{int64(r.Index), e})
	}
	return out
}

// TestReaderGate: a gated reader (WithReaderGate) calls the gate with each
// piece, in order, before reading it, and reads no piece whose gate has not
// returned: with the test releasing one gate at a time, the pieces decoded
// never pass the gates released, and Next hands every piece over with its
// rows. Closed while a gate waits, the reader returns (the gate sees its
// context done).
func TestReaderGate(t *testing.T) {
	rec := fastRecord(0, 20000)
	defer rec.Release()
	path := filepath.Join(t.TempDir(), "f.parquet")
	writeFastFile(t, path, []arrow.RecordBatch{rec}, pq.WithCompression(compress.Codecs.Snappy), pq.WithDictionaryDefault(false),
		pq.WithMaxRowGroupLength(10000), pq.WithDataPageSize(16<<10))
	ds, mem := openChecked(t, path, WithColumns("id", "features"))
	refs := evenPieces(ds, 1000)
	ctx := context.Background()
	calls := make(chan RowGroupRef)
	release := make(chan struct{})
	gate := func(ctx context.Context, ref RowGroupRef) error {
		select {
		case calls <- ref:
		case <-ctx.Done():
			return ctx.Err()
		}
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	called := func() RowGroupRef {
		select {
		case ref := <-calls:
			return ref
		case <-time.After(10 * time.Second):
			t.Fatal("the reader called no gate in 10 s")
			return RowGroupRef{}
		}
	}
	rd := ds.NewReader(ctx, refs, mem, WithReaderGate(gate), WithReaderReadAhead(64<<20))
	for i, want := range refs {
		got := called()
		if got != want {
			t.Fatalf("gate call %d: piece %+v, want %+v", i, got, want)
		}
		time.Sleep(5 * time.Millisecond) // a reader that did not wait would decode ahead meanwhile
		if n := rd.Stats().Pieces.Load(); n > int64(i) {
			t.Fatalf("%d pieces decoded before the gate of piece %d returned", n, i)
		}
		release <- struct{}{}
		r, ref, err := rd.Next()
		if err != nil {
			t.Fatal(err)
		}
		if ref != want || r.NumRows() != want.End-want.Start {
			t.Fatalf("piece %d: %+v of %d rows, want %+v", i, ref, r.NumRows(), want)
		}
		r.Release()
	}
	if _, _, err := rd.Next(); err != io.EOF {
		t.Fatalf("after the last piece: %v, want io.EOF", err)
	}
	rd.Close()

	// Closed while the second piece's gate waits.
	rd = ds.NewReader(ctx, refs, mem, WithReaderGate(gate))
	called()
	release <- struct{}{}
	called()
	done := make(chan struct{})
	go func() { rd.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return while a gate waited")
	}
}

// TestPiecesUntil: each row group a reader reads in pieces gets, in its
// entry, the end of the last of them (format.Piece.Until: the format keeps
// no page decompressed for a later piece past it), whichever order the
// refs come in; a row group read whole gets no entry.
func TestPiecesUntil(t *testing.T) {
	r := &RowGroupReader{ds: &Dataset{}, entries: map[[2]int]*rgEntry{}}
	refs := []RowGroupRef{
		{File: 0, Index: 1, Rows: 500, Start: 100, End: 180},
		{File: 0, Index: 1, Rows: 500, Start: 180, End: 260},
		{File: 1, Index: 0, Rows: 300},
		{File: 1, Index: 2, Rows: 400, Start: 0, End: 90},
		{File: 0, Index: 1, Rows: 500, Start: 20, End: 60},
	}
	if got := r.pieces(refs); len(got) != len(refs) {
		t.Fatalf("%d refs, want %d", len(got), len(refs))
	}
	want := map[[2]int]int64{{0, 1}: 260, {1, 2}: 90}
	if len(r.entries) != len(want) {
		t.Fatalf("%d entries, want %d", len(r.entries), len(want))
	}
	for k, u := range want {
		if e := r.entries[k]; e == nil || e.until != u {
			t.Errorf("file %d row group %d: entry %+v, want until %d", k[0], k[1], e, u)
		}
	}
	p := (&Dataset{}).formatPiece(refs[3], piece{e: r.entries[[2]int{1, 2}], stats: &ReadStats{}})
	if p.Until != 90 {
		t.Errorf("format.Piece.Until %d, want 90", p.Until)
	}
}

// TestReadersShareKeptPages: two readers of one Dataset whose rows meet
// inside the row group's pages. The first reads its first piece, which
// ends inside a page of each compressed column and keeps it for its next
// piece (the gate then holds that piece back); the second's piece starts
// inside those pages and takes them from the first (ReadStats.PagesShared)
// instead of decompressing them again. Both read the row group's rows as
// a whole decode gives them, and once both are closed no row group's
// share is left.
func TestReadersShareKeptPages(t *testing.T) {
	rec := fastRecord(0, 10000)
	defer rec.Release()
	for _, c := range streamedCodecs {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "f.parquet")
			writeFastFile(t, path, []arrow.RecordBatch{rec}, pq.WithCompression(c.codec), pq.WithDictionaryDefault(false),
				pq.WithMaxRowGroupLength(10000), pq.WithDataPageSize(16<<10))
			ds, mem := openChecked(t, path, WithColumns("id", "features"))
			ctx := context.Background()
			whole, err := ds.ReadRowGroup(ctx, 0, 0, mem)
			if err != nil {
				t.Fatal(err)
			}
			defer whole.Release()
			rg := ds.RowGroups()[0]
			piece := func(lo, hi int64) RowGroupRef { p := rg; p.Start, p.End = lo, hi; return p }
			check := func(who string, r arrow.RecordBatch, ref RowGroupRef) {
				t.Helper()
				want := whole.NewSlice(ref.Start, ref.End)
				defer want.Release()
				for k := 0; k < int(r.NumCols()); k++ {
					if !array.Equal(r.Column(k), want.Column(k)) {
						t.Errorf("%s rows [%d, %d) column %d: values differ from the row group's", who, ref.Start, ref.End, k)
					}
				}
				r.Release()
			}
			held := make(chan struct{})
			gate := func(ctx context.Context, ref RowGroupRef) error {
				if ref.Start == 0 {
					return nil
				}
				select {
				case <-held:
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			a := ds.NewReader(ctx, []RowGroupRef{piece(0, 3333), piece(3333, 10000)}, mem, WithReaderGate(gate), WithReaderDecodeWorkers(1))
			defer a.Close()
			r, ref, err := a.Next()
			if err != nil {
				t.Fatal(err)
			}
			check("first reader", r, ref)
			b := ds.NewReader(ctx, []RowGroupRef{piece(3400, 5000)}, mem, WithReaderDecodeWorkers(1))
			if r, ref, err = b.Next(); err != nil {
				t.Fatal(err)
			}
			check("second reader", r, ref)
			b.Close()
			close(held)
			if r, ref, err = a.Next(); err != nil {
				t.Fatal(err)
			}
			check("first reader", r, ref)
			a.Close()
			shared := b.Stats().PagesShared.Load()
			t.Logf("%s: %d pages the second reader took from the first", c.name, shared)
			if compressed := c.codec != compress.Codecs.Uncompressed; (shared > 0) != compressed {
				t.Errorf("%d pages taken from the first reader; want some: %v", shared, compressed)
			}
			if n := ds.shares.live(); n != 0 {
				t.Errorf("both readers closed: %d row groups' shares left", n)
			}
		})
	}
}
