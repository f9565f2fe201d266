package format

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	pq "github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/parquet-go/parquet-go"
	pqformat "github.com/parquet-go/parquet-go/format"
)

// placeRecord returns n rows: id int64, label int32 (nullable, no null),
// features fixed_size_list<float32>[16] of random bits (snappy leaves
// them nearly as they are) or of a few values (repetitive), maybe int32
// with nulls.
func placeRecord(r *rand.Rand, n int, repetitive bool) arrow.RecordBatch {
	mem := memory.NewGoAllocator()
	sch := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "label", Type: arrow.PrimitiveTypes.Int32, Nullable: true},
		{Name: "features", Type: arrow.FixedSizeListOfNonNullable(16, arrow.PrimitiveTypes.Float32)},
		{Name: "maybe", Type: arrow.PrimitiveTypes.Int32, Nullable: true},
	}, nil)
	b := array.NewRecordBuilder(mem, sch)
	defer b.Release()
	fl := b.Field(2).(*array.FixedSizeListBuilder)
	fv := fl.ValueBuilder().(*array.Float32Builder)
	for i := range n {
		b.Field(0).(*array.Int64Builder).Append(int64(i) * 7)
		b.Field(1).(*array.Int32Builder).Append(int32(i % 10))
		fl.Append(true)
		for range 16 {
			v := math.Float32frombits(r.Uint32()&0x3fffffff | 0x3f000000)
			if repetitive {
				v = float32(r.IntN(4))
			}
			fv.Append(v)
		}
		if i%7 == 3 {
			b.Field(3).AppendNull()
		} else {
			b.Field(3).(*array.Int32Builder).Append(int32(i))
		}
	}
	return b.NewRecordBatch()
}

// placedBytes returns the values of rows [lo, hi) of a fixed-width column.
func placedBytes(a arrow.Array, lo, hi int64) []byte {
	d := a.Data()
	if l, ok := a.DataType().(*arrow.FixedSizeListType); ok {
		c := d.Children()[0]
		w := int64(l.Len()) * int64(c.DataType().(arrow.FixedWidthDataType).BitWidth()/8)
		off := int64(c.Offset()) + int64(d.Offset())*int64(l.Len())
		return c.Buffers()[1].Bytes()[off*w/int64(l.Len())+lo*w : off*w/int64(l.Len())+hi*w]
	}
	w := int64(a.DataType().(arrow.FixedWidthDataType).BitWidth() / 8)
	return d.Buffers()[1].Bytes()[(int64(d.Offset())+lo)*w : (int64(d.Offset())+hi)*w]
}

// TestPieceInto: a piece given destinations for every column (Piece.Into,
// cut at random rows) writes there the values of the fixed-width columns
// whose pages it holds whole, exactly as the row group decodes them, and
// returns the others in its record; snappy pages of values it barely
// compresses are decoded straight into the destinations (snappyScatter),
// the others decompressed and copied. Pieces that cut a column's pages
// are placed too, each compressed page they cut decompressed once (kept
// for the next piece, which fetches nothing of it where its rows lie
// inside it). A column with nulls is decoded as without Into.
// Codecs none, snappy and zstd; v1 and v2 pages.
func TestPieceInto(t *testing.T) {
	seed := testSeed(t)
	ctx := context.Background()
	for _, tc := range []struct {
		codec      compress.Compression
		v2         bool
		repetitive bool
		scatter    bool // pages decoded by snappyScatter
	}{
		{compress.Codecs.Snappy, false, false, true},
		{compress.Codecs.Snappy, true, false, true},
		{compress.Codecs.Snappy, false, true, false},
		{compress.Codecs.Uncompressed, false, false, false},
		{compress.Codecs.Zstd, true, false, false},
	} {
		name := fmt.Sprintf("%s/v2=%v/repetitive=%v", tc.codec, tc.v2, tc.repetitive)
		t.Run(name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 9))
			rec := placeRecord(r, 12000, tc.repetitive)
			defer rec.Release()
			path := filepath.Join(t.TempDir(), "f.parquet")
			ver := pq.DataPageV1
			if tc.v2 {
				ver = pq.DataPageV2
			}
			writeFastFile(t, path, []arrow.RecordBatch{rec}, pq.WithCompression(tc.codec), pq.WithDictionaryDefault(false),
				pq.WithDataPageVersion(ver), pq.WithMaxRowGroupLength(12000), pq.WithDataPageSize(16<<10))
			cols := []string{"id", "label", "features", "maybe"}
			f := mustOpen(t, path, cols, fillOptions(map[string]float64{"maybe": -1}))
			mem := &liveAllocator{CheckedAllocator: memory.NewCheckedAllocator(memory.NewGoAllocator())}
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
			if tc.codec == compress.Codecs.Uncompressed {
				// No compressed column: no breaks; pieces of any rows.
				for b := int64(0); b < whole.NumRows(); b += 500 + r.Int64N(1500) {
					breaks = append(breaks, b)
				}
				breaks = breaks[1:]
			}
			if len(breaks) < 6 {
				t.Fatalf("page breaks %v: the test needs more pages", breaks)
			}
			// Each piece's rows go to destinations cut at random rows;
			// every destination starts out filled with 0xAA. until is
			// the pieces' Until.
			var until int64
			try := func(lo, hi int64, sh *Shared, st *Stats) (placed []bool, pages int64) {
				t.Helper()
				bounds := []int64{0}
				for b := int64(0); b < hi-lo; {
					b = min(hi-lo, b+1+r.Int64N(300))
					bounds = append(bounds, b)
				}
				widths := []int64{8, 4, 64, 4}
				into := &Into{Bounds: bounds, Cols: make([][][]byte, len(cols)), Placed: make([]bool, len(cols))}
				for c, w := range widths {
					for j := 1; j < len(bounds); j++ {
						d := make([]byte, (bounds[j]-bounds[j-1])*w)
						for k := range d {
							d[k] = 0xAA
						}
						into.Cols[c] = append(into.Cols[c], d)
					}
				}
				p := Piece{RG: 0, Lo: lo, Hi: hi, Mem: mem, Stats: st, Shared: sh, Fetch: f, Into: into, Until: until}
				if _, _, err := f.dec.(Ranged).Charge(ctx, p); err != nil {
					t.Fatal(err)
				}
				got, err := f.dec.(Ranged).DecodeRange(ctx, p)
				if err != nil {
					t.Fatal(err)
				}
				defer got.Release()
				k := 0
				for c, name := range cols {
					if into.Placed[c] {
						want := placedBytes(whole.Column(c), lo, hi)
						if g := slices.Concat(into.Cols[c]...); string(g) != string(want) {
							t.Fatalf("rows [%d, %d) column %s: the placed values differ from the row group's", lo, hi, name)
						}
						continue
					}
					if k >= int(got.NumCols()) || got.Schema().Field(k).Name != name {
						t.Fatalf("rows [%d, %d): column %s neither placed nor in the record (%v)", lo, hi, name, got.Schema())
					}
					want := whole.NewSlice(lo, hi)
					if !array.Equal(got.Column(k), want.Column(c)) {
						t.Errorf("rows [%d, %d) column %s: values differ from the row group's", lo, hi, name)
					}
					want.Release()
					k++
				}
				if k != int(got.NumCols()) || got.NumRows() != hi-lo {
					t.Fatalf("rows [%d, %d): a record of %d columns and %d rows for %d not placed", lo, hi, got.NumCols(), got.NumRows(), k)
				}
				return into.Placed, st.PagesPlaced.Load()
			}
			ends := append([]int64{0}, breaks...)
			ends = append(ends, whole.NumRows())
			var on Shared
			defer on.Release()
			scattered := scatteredPages.Load()
			for i := 0; i+1 < len(ends); i += 2 {
				lo, hi := ends[i], ends[min(i+2, len(ends)-1)]
				placed, pages := try(lo, hi, &on, &Stats{})
				if !placed[2] || pages == 0 {
					t.Errorf("rows [%d, %d), on the features' pages: features placed %v (%d pages), want placed", lo, hi, placed[2], pages)
				}
				if placed[3] {
					t.Errorf("rows [%d, %d): maybe (with nulls) placed", lo, hi)
				}
			}
			if n := scatteredPages.Load() - scattered; (n > 0) != tc.scatter {
				t.Errorf("%d pages decoded by snappyScatter; want some: %v", n, tc.scatter)
			}
			// Consecutive pieces that cut the features' pages: placed
			// too, each page they cut decompressed once (the piece after
			// takes it from the piece before).
			var off Shared
			defer off.Release()
			reused, kept := int64(0), keptPlaced.Load()
			for lo := int64(0); lo < whole.NumRows(); {
				hi := min(whole.NumRows(), lo+100+r.Int64N(700))
				st := &Stats{}
				placed, _ := try(lo, hi, &off, st)
				if !placed[2] {
					t.Errorf("rows [%d, %d), cutting the features' pages: features not placed", lo, hi)
				}
				reused += st.PagesReused.Load()
				lo = hi
			}
			if compressed := tc.codec != compress.Codecs.Uncompressed; (reused > 0) != compressed {
				t.Errorf("%d pages the pieces cut taken from the piece before; want some: %v", reused, compressed)
			}
			// A piece inside a page kept by the piece before (id's pages
			// hold 2,048 rows) fetches nothing of it (v1 pages).
			if want := tc.codec != compress.Codecs.Uncompressed && !tc.v2; (keptPlaced.Load() > kept) != want {
				t.Errorf("%d pieces placed from a kept page without a fetch; want some: %v", keptPlaced.Load()-kept, want)
			}
			// A reader's only piece, a stream's rows: it starts inside a
			// page no piece kept and ends inside one no later piece of the
			// reader reads (Until). Snappy pages of features are decoded
			// straight into the destinations, the edges too (the values
			// before the piece's into scratch, none after), and no page
			// is kept. A piece past Until (against the contract) still
			// decodes its rows, from the pages again.
			var one Shared
			defer one.Release()
			lo, hi := breaks[1]+37, breaks[4]+53
			until = hi
			scattered = scatteredPages.Load()
			if placed, _ := try(lo, hi, &one, &Stats{}); !placed[2] {
				t.Fatalf("rows [%d, %d) up to Until: features not placed", lo, hi)
			}
			if n, want := scatteredPages.Load()-scattered, int64(4); tc.scatter && n != want || !tc.scatter && n != 0 {
				t.Errorf("rows [%d, %d) up to Until: %d pages decoded by snappyScatter; want %d: %v", lo, hi, n, want, tc.scatter)
			}
			if len(one.edges) != 0 {
				t.Errorf("rows [%d, %d) up to Until: pages kept for a later piece: %v", lo, hi, slices.Collect(maps.Keys(one.edges)))
			}
			if placed, _ := try(hi, hi+300, &one, &Stats{}); !placed[2] {
				t.Errorf("rows [%d, %d), past Until: features not placed", hi, hi+300)
			}
			until = 0
			// Two readers of the row group (two Shared, one PageShare):
			// the first's piece ends inside a page it keeps for its next
			// piece; the second's starts inside that page and takes it
			// from there (PagesShared) instead of decompressing it again.
			// Once both let go, the share holds nothing. The page kept
			// comes from the pieces' allocator (edges.keptBuf), and goes
			// back there once both let go.
			share := &PageShare{}
			a, b := Shared{Pages: share}, Shared{Pages: share}
			cut := breaks[2] + 10
			held := mem.CurrentAlloc()
			if placed, _ := try(breaks[1]+10, cut, &a, &Stats{}); !placed[2] {
				t.Fatalf("rows [%d, %d), the first reader: features not placed", breaks[1]+10, cut)
			}
			if compressed := tc.codec != compress.Codecs.Uncompressed; (len(a.edges) > 0) != compressed {
				t.Errorf("the first reader keeps %d pages for its next piece; want some: %v", len(a.edges), compressed)
			}
			for col, e := range a.edges {
				if !mem.holds(e.buf) {
					t.Errorf("column %d's page %d, kept for the next piece, is not from the pieces' allocator", col, e.page)
				}
			}
			st := &Stats{}
			if placed, _ := try(cut+20, cut+60, &b, st); !placed[2] {
				t.Fatalf("rows [%d, %d), the second reader: features not placed", cut+20, cut+60)
			}
			if compressed := tc.codec != compress.Codecs.Uncompressed; (st.PagesShared.Load() > 0) != compressed {
				t.Errorf("%d pages the second reader took from the first; want some: %v", st.PagesShared.Load(), compressed)
			}
			a.Release()
			if tc.codec != compress.Codecs.Uncompressed && share.held() == 0 {
				t.Errorf("the first reader released: the page the second keeps left the share")
			}
			b.Release()
			if n := share.held(); n != 0 {
				t.Errorf("both readers released: the share holds %d pages", n)
			}
			if n := mem.CurrentAlloc() - held; n != 0 {
				t.Errorf("both readers released: %d bytes of kept pages not back in the pieces' allocator", n)
			}
		})
	}
}

// liveAllocator is a checked allocator that tells whether a buffer is
// one of its allocations not yet freed.
type liveAllocator struct {
	*memory.CheckedAllocator
	mu   sync.Mutex
	live map[*byte]bool
}

func (a *liveAllocator) note(b []byte, on bool) {
	if cap(b) == 0 {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.live == nil {
		a.live = map[*byte]bool{}
	}
	if on {
		a.live[unsafe.SliceData(b[:1])] = true
	} else {
		delete(a.live, unsafe.SliceData(b[:1]))
	}
}

func (a *liveAllocator) Allocate(n int) []byte {
	b := a.CheckedAllocator.Allocate(n)
	a.note(b, true)
	return b
}

func (a *liveAllocator) Reallocate(n int, b []byte) []byte {
	a.note(b, false)
	b = a.CheckedAllocator.Reallocate(n, b)
	a.note(b, true)
	return b
}

func (a *liveAllocator) Free(b []byte) {
	a.note(b, false)
	a.CheckedAllocator.Free(b)
}

// holds reports whether b starts an allocation of a not yet freed.
func (a *liveAllocator) holds(b []byte) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return cap(b) > 0 && a.live[unsafe.SliceData(b[:1])]
}

// TestPlacePagesShort: pages that hold fewer values than the piece's
// range are ErrCorrupt, not destinations left partly unwritten.
func TestPlacePagesShort(t *testing.T) {
	c := &colDecoder{kind: kindPrimitive, elemSize: 4, phys: parquet.Float}
	page := fastPage{body: make([]byte, 40), size: 40, nvals: 10}
	err := c.placePages([]fastPage{page}, pqformat.Uncompressed, rowRange{0, 20}, [][]byte{make([]byte, 80)}, edges{})
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("placePages of 10 values for 20: %v, want ErrCorrupt", err)
	}
	if err := c.placePages([]fastPage{page}, pqformat.Uncompressed, rowRange{0, 10}, [][]byte{make([]byte, 40)}, edges{}); err != nil {
		t.Fatalf("placePages of 10 values for 10: %v", err)
	}
}
