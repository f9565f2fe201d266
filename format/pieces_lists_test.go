package format

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	pq "github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/snappy"
)

// The pieces of list columns in v1 pages: located, and decoded (loader's
// pieces_lists_test reads them through a RowGroupReader).
//
// List columns in v1 data pages without an offset index (what pyarrow and
// arrow-go write by default) are streamed: their pages are located by
// counting the rows that start in each (repetition level 0), and a piece
// decodes only its rows' pages. arrow-go cuts v1 list pages anywhere, so
// most pages begin inside a row, and long rows span pages holding no row
// start at all: a piece then decodes the page where its first row starts
// (whose leading values belong to the row before) through the page where
// the row after its last one starts.

// TestPiecesLocateV1Lists: whole row groups of v1 list pages take the fast
// path, and their pages are placed (every one, rows adding up), pages
// beginning inside a row and pages inside one row included. (Reading them
// in pieces: loader's TestPiecesStreamV1Lists.)
func TestPiecesLocateV1Lists(t *testing.T) {
	seed := fastSeed(t)
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
			for k, col := range []string{"tokens", "rtokens", "stokens"} {
				t.Run(col, func(t *testing.T) {
					mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
					defer mem.AssertSize(t, 0)
					f := mustOpen(t, path, []string{col}, testOptions())
					d := f.parquet()
					if cc := d.pf.Metadata().RowGroups[0].Columns[d.cols[0].leaf]; cc.OffsetIndexOffset != 0 {
						t.Fatal("offset index written; the test needs none")
					}
					first := 0
					var cont, spanning int
					for rg, meta := range f.rgs {
						fast := fastChunks.Load()
						rec, err := f.readRowGroup(ctx, rg, mem)
						if err != nil {
							t.Fatal(err)
						}
						checkVlist(t, seed, k, rec.Column(0), first)
						// Whole row groups take the fast path too, lists
						// of 16-bit integers stored as INT32 included.
						if fastChunks.Load() == fast {
							t.Errorf("row group %d read whole: not on the fast path", rg)
						}
						rec.Release()
						first += int(meta.Rows)
						// Located: every page placed, rows adding up.
						locs, err := d.locatePages(ctx, rg, &d.cols[0], d.src, &Stats{})
						if err != nil {
							t.Fatal(err)
						}
						if len(locs) < 10 {
							t.Fatalf("row group %d: %d pages located, want the chunk's pages (at least 10 of 1 KiB)", rg, len(locs))
						}
						for _, l := range locs {
							if l.cont {
								cont++
								if l.rows == 0 {
									spanning++
								}
							}
						}
					}
					// What the test covers: pages that begin inside a row,
					// and pages inside one row.
					if cont == 0 || spanning == 0 {
						t.Fatalf("%d pages begin inside a row, %d hold no row start: want both", cont, spanning)
					}
				})
			}
		})
	}
}

// TestPiecesV1ListCorruptLevels: a v1 list page whose repetition levels are
// corrupt is an error naming file, row group and column, never a panic or
// wrong rows.
func TestPiecesV1ListCorruptLevels(t *testing.T) {
	seed := fastSeed(t)
	rec := vlistRecord(seed, 0, 600)
	defer rec.Release()
	path := filepath.Join(t.TempDir(), "corrupt.parquet")
	writeFastFile(t, path, []arrow.RecordBatch{rec},
		pq.WithCompression(compress.Codecs.Uncompressed),
		pq.WithDictionaryDefault(false),
		pq.WithDataPageVersion(pq.DataPageV1),
		pq.WithDataPageSize(1<<10))
	ctx := context.Background()
	d := mustOpen(t, path, []string{"rtokens"}, testOptions()).parquet()
	locs, err := d.locatePages(ctx, 0, &d.cols[0], d.src, &Stats{})
	if err != nil || len(locs) < 3 {
		t.Fatalf("located %d pages, %v: want several", len(locs), err)
	}
	// The third page's repetition levels: a length past the page.
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	l := locs[2]
	body := l.off + l.size - int64(pageBodySize(t, data[l.off:l.off+l.size]))
	copy(data[body:], []byte{0xff, 0xff, 0xff, 0x7f})
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	f := mustOpen(t, path, []string{"rtokens"}, testOptions())
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	var sh Shared
	defer sh.Release()
	rows := f.rgs[0].Rows
	for s := int64(0); ; s += 50 {
		if s >= rows {
			t.Fatal("every piece read from a corrupt column")
		}
		r, err := f.readRange(ctx, 0, s, min(s+50, rows), &sh, &Stats{}, mem)
		if err != nil {
			msg := err.Error()
			for _, want := range []string{path, "row group 0", `"rtokens"`} {
				if !strings.Contains(msg, want) {
					t.Errorf("error %q does not name %s", msg, want)
				}
			}
			if !errors.Is(err, ErrCorrupt) {
				t.Errorf("error %v does not wrap ErrCorrupt", err)
			}
			break
		}
		r.Release()
	}
}

// pageBodySize returns the compressed_page_size of the page header at the
// start of page (header and body).
func pageBodySize(t *testing.T, page []byte) int {
	t.Helper()
	pages, err := (&colDecoder{kind: kindList, elemSize: 4, maxDef: 1}).fastPages(page, 0)
	if err != nil || len(pages) != 1 {
		t.Fatalf("not one data page: %d", len(pages))
	}
	return len(pages[0].body)
}

// TestSnappyPrefix: snappyPrefix decodes exactly the start of what
// snappy.Decode decodes, for blocks of random, repetitive and level-like
// data from every snappy encoder at hand, with the block whole or cut; a
// corrupt block is an error or a prefix, never a panic.
func TestSnappyPrefix(t *testing.T) {
	seed := fastSeed(t)
	r := rand.New(rand.NewPCG(seed, seed^0x5a99))
	encoders := map[string]func(dst, src []byte) []byte{
		"snappy":    snappy.Encode,
		"s2":        s2.EncodeSnappy,
		"s2 better": s2.EncodeSnappyBetter,
		"s2 best":   s2.EncodeSnappyBest,
	}
	for trial := range 300 {
		n := r.IntN(200 << 10)
		plain := make([]byte, n)
		switch trial % 3 {
		case 0: // random
			for i := range plain {
				plain[i] = byte(r.Uint32())
			}
		case 1: // runs of a few values, far and near repeats
			for i := 0; i < n; {
				v, k := byte(r.IntN(4)), 1+r.IntN(300)
				for ; k > 0 && i < n; k, i = k-1, i+1 {
					plain[i] = v
				}
			}
		default: // a level section: a length, RLE runs, then values
			if n >= 4 {
				binary.LittleEndian.PutUint32(plain, uint32(r.IntN(n-3)))
			}
			for i := 4; i < n; i++ {
				plain[i] = byte(i % (1 + r.IntN(9)))
			}
		}
		for name, enc := range encoders {
			block := enc(nil, plain)
			for range 4 {
				dst := make([]byte, r.IntN(n+10))
				cut := block[:r.IntN(len(block)+1)]
				if r.IntN(2) == 0 {
					cut = block
				}
				got, err := snappyPrefix(dst, cut, int64(n))
				if err != nil {
					t.Fatalf("trial %d %s: %d of %d bytes, cut at %d of %d: %v", trial, name, len(dst), n, len(cut), len(block), err)
				}
				if len(cut) == len(block) && got != min(len(dst), n) {
					t.Fatalf("trial %d %s: decoded %d bytes of the whole block, want %d", trial, name, got, min(len(dst), n))
				}
				if !bytes.Equal(dst[:got], plain[:got]) {
					t.Fatalf("trial %d %s: the %d bytes decoded differ from the data", trial, name, got)
				}
			}
			if _, err := snappyPrefix(make([]byte, 8), block, int64(n)+1); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("trial %d %s: wrong stated length: %v, want ErrCorrupt", trial, name, err)
			}
			// Corrupt: a prefix or an error, never a panic.
			bad := bytes.Clone(block)
			for range 1 + r.IntN(4) {
				if len(bad) > 0 {
					bad[r.IntN(len(bad))] ^= byte(1 + r.IntN(255))
				}
			}
			_, _ = snappyPrefix(make([]byte, r.IntN(n+10)), bad, int64(n))
		}
	}
}

// TestSnappyLevels: the level sections of a SNAPPY page come from the part of its
// body in the header window, without a read, when that part holds them,
// and from the body read whole when it does not (the window ends inside
// the levels, or before the body).
func TestSnappyLevels(t *testing.T) {
	seed := fastSeed(t)
	r := rand.New(rand.NewPCG(seed, seed^0x1e7e))
	// A page: 4-byte length, levels (random: incompressible), values.
	levels := make([]byte, 20000)
	for i := range levels {
		levels[i] = byte(r.Uint32())
	}
	page := binary.LittleEndian.AppendUint32(nil, uint32(len(levels)))
	page = append(page, levels...)
	page = append(page, make([]byte, 300000)...) // values: compressible
	body := snappy.Encode(nil, page)
	const at = 1000 // the body's offset in the file
	path := filepath.Join(t.TempDir(), "page")
	if err := os.WriteFile(path, append(make([]byte, at), body...), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	file := append(make([]byte, at), body...)
	src := bytesSource{uri: path, b: file}
	for _, tc := range []struct {
		name       string
		wpos, wlen int64 // the window: file bytes [wpos, wpos+wlen)
		read       bool  // whether the body is read
	}{
		{"body in the window", 0, at + int64(len(body)), false},
		{"levels in the window", at - 10, 10 + 30000, false},
		{"window ends inside the levels", at - 10, 10 + 5000, true},
		{"window ends before the body", 0, at - 5, true},
		{"window ends 10 bytes into the body", 0, at + 10, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var st Stats
			lv := listLevels{src: src, stats: &st, win: file[tc.wpos : tc.wpos+tc.wlen], wpos: tc.wpos}
			defer lv.release()
			got, err := lv.snappyLevels(ctx, at, int64(len(body)), int64(len(page)), 1)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, page[:4+len(levels)]) {
				t.Fatalf("%d bytes of levels differ from the page's %d", len(got), 4+len(levels))
			}
			if read := st.Fetches.Load() > 0; read != tc.read {
				t.Errorf("body read: %v (%d bytes), want %v", read, st.FetchedBytes.Load(), tc.read)
			}
		})
	}
	// A body cut short in the file's page header: ErrCorrupt, not a hang.
	lv := listLevels{src: src, stats: &Stats{}, win: file, wpos: 0}
	defer lv.release()
	if _, err := lv.snappyLevels(ctx, at, 5000, int64(len(page)), 1); !errors.Is(err, ErrCorrupt) {
		t.Errorf("a body of 5000 of its %d bytes: %v, want ErrCorrupt", len(body), err)
	}
}

// TestLocateV1ListEmptyLists: the pages of a v1 list column holding empty
// lists (its definition levels below the max) are not placed (loader's
// TestPiecesV1ListEmptyLists reads it in pieces).
func TestLocateV1ListEmptyLists(t *testing.T) {
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
			for _, col := range []string{"etokens", "tokens"} {
				d := mustOpen(t, path, []string{col}, testOptions()).parquet()
				locs, err := d.locatePages(ctx, 0, &d.cols[0], d.src, &Stats{})
				if err != nil {
					t.Fatal(err)
				}
				if got, want := locs != nil, col == "tokens"; got != want {
					t.Fatalf("column %q: pages placed %v, want %v", col, got, want)
				}
			}
		})
	}
}

// streamedCodecs are the codecs whose pages the fast path decodes, so
// pieces stream them.
var streamedCodecs = []struct {
	name  string
	codec compress.Compression
}{
	{"none", compress.Codecs.Uncompressed},
	{"snappy", compress.Codecs.Snappy},
	{"zstd", compress.Codecs.Zstd},
	{"gzip", compress.Codecs.Gzip},
}
