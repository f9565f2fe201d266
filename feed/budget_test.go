package feed

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/meshfeed/meshfeed/internal/datagen"
	"github.com/meshfeed/meshfeed/loader"
	"github.com/meshfeed/meshfeed/objstore"
	"github.com/meshfeed/meshfeed/transport"
)

// bigSpec: 2 files of 2,500-row row groups (about 0.6 MB each in memory),
// with an images-like column (uint8[4,4,3], stored as INT32) and features,
// in pages of 4 KiB (a row group's share of the budget holds many pages, as
// 1 MiB pages in a real budget do), with or without an offset index.
func bigSpec(c datagen.Compression, index bool) datagen.Spec {
	s := datagen.DefaultSpec()
	s.Rows, s.Files, s.RowGroupRows, s.Features, s.Image, s.Seed, s.Compression = 10000, 2, 2500, 16, [3]int{4, 4, 3}, 9, c
	s.PageBytes, s.PageIndex = 4<<10, index
	return s
}

func bigRequest(dir string, window int, lb transport.LastBatch) *transport.Request {
	return &transport.Request{Version: transport.Version, Datasets: []string{dir + "/*.parquet"}, GlobalBatchSize: 64,
		Columns:   []transport.Column{{Name: "id"}, {Name: "label"}, {Name: "features"}, {Name: "image"}},
		NumSlices: 4, Slices: []int{0, 1, 2, 3}, LastBatch: lb, Epochs: 1, Seed: 11,
		Shuffle: transport.Shuffle{Enabled: true, Window: window}}
}

// peakAlloc is an allocator that records the most bytes allocated at once.
type peakAlloc struct {
	memory.Allocator
	mu        sync.Mutex
	cur, peak int64
}

func (a *peakAlloc) add(n int64) {
	a.mu.Lock()
	a.cur += n
	a.peak = max(a.peak, a.cur)
	a.mu.Unlock()
}

func (a *peakAlloc) Allocate(n int) []byte { a.add(int64(n)); return a.Allocator.Allocate(n) }
func (a *peakAlloc) Reallocate(n int, b []byte) []byte {
	a.add(int64(n - len(b)))
	return a.Allocator.Reallocate(n, b)
}
func (a *peakAlloc) Free(b []byte) { a.add(-int64(len(b))); a.Allocator.Free(b) }

// runBudget streams req through a Pipeline with the given read-ahead,
// handing each step's slices to each (which must not keep them without
// retaining them), and returns the most bytes any slice's reader had in
// flight, the most pieces a reader read, and the most bytes the pipeline's
// allocator held at once.
func runBudget(t *testing.T, req *transport.Request, readAhead int64, each func(step int, slices []arrow.RecordBatch)) (peak, pieces int64, mem *peakAlloc) {
	t.Helper()
	ctx := context.Background()
	mem = &peakAlloc{Allocator: memory.NewGoAllocator()}
	p, err := NewPipeline(ctx, WithReadAhead(readAhead), WithCacheTTL(0), WithAllocator(mem))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	st, err := p.Open(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	ps := st.(*pipelineStream)
	for s := 0; ; s++ {
		for _, sc := range ps.slices {
			if sc.rd != nil {
				peak = max(peak, sc.rd.PeakInFlight())
				pieces = max(pieces, sc.rd.Stats().Pieces.Load())
			}
		}
		step, err := st.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		each(s, step.Slices)
		step.Release()
	}
	st.Close()
	return peak, pieces, mem
}

// rowGroupCost opens dir's dataset (bigSpec's columns) and returns its
// first row group's rows and what reading it costs the budget (compressed
// plus decoded bytes).
func rowGroupCost(t *testing.T, dir string) (rows, cost int64) {
	t.Helper()
	store := objstore.NewLocalStore()
	defer store.Close()
	ds, err := loader.Open(context.Background(), store, []string{dir + "/*.parquet"}, loader.WithColumns("id", "label", "features", "image"))
	if err != nil {
		t.Fatal(err)
	}
	rg := ds.Files[0].RowGroups[0]
	return rg.Rows, rg.Bytes + rg.DecodedBytes
}

// unboundedSteps returns every step of req read under an unbounded budget,
// retained (releaseSteps frees them), and that run's allocator.
func unboundedSteps(t *testing.T, req *transport.Request) ([][]arrow.RecordBatch, *peakAlloc) {
	t.Helper()
	var steps [][]arrow.RecordBatch
	_, _, mem := runBudget(t, req, 1<<40, func(_ int, slices []arrow.RecordBatch) {
		for _, r := range slices {
			r.Retain()
		}
		steps = append(steps, slices)
	})
	return steps, mem
}

func releaseSteps(steps [][]arrow.RecordBatch) {
	for _, st := range steps {
		for _, r := range st {
			r.Release()
		}
	}
}

// TestLargeRowGroupsSmallBudget: row groups several times larger than a
// slice's read-ahead share are read in pieces, and the steps are exactly
// those of a run whose budget holds whole row groups, with W = 0 and W > 0,
// uncompressed and compressed, with and without an offset index; every
// reader's peak in flight stays within its share, and all the pipeline
// holds at once within the budget plus one step.
func TestLargeRowGroupsSmallBudget(t *testing.T) {
	for _, v := range []struct {
		c     datagen.Compression
		index bool
	}{{datagen.CompressionNone, false}, {datagen.CompressionZstd, false}, {datagen.CompressionSnappy, true}} {
		c := v.c
		dir := writeDataset(t, bigSpec(c, v.index))
		rgRows, rgCost := rowGroupCost(t, dir)
		share := rgCost / 4
		for _, w := range []int{0, 200} {
			for _, lb := range []transport.LastBatch{transport.LastBatchPad, transport.LastBatchDrop} {
				req := bigRequest(dir, w, lb)
				want, wholeMem := unboundedSteps(t, req)
				n := 0
				peak, pieces, mem := runBudget(t, req, 4*share, func(s int, slices []arrow.RecordBatch) {
					n++
					if s >= len(want) {
						t.Fatalf("%s W=%d %s: step %d past the %d steps of the unbounded run", c, w, lb, s, len(want))
					}
					for i := range slices {
						if !array.RecordEqual(slices[i], want[s][i]) {
							t.Fatalf("%s W=%d %s: step %d slice %d differs from the unbounded run", c, w, lb, s, i)
						}
					}
				})
				releaseSteps(want)
				if mem.cur != 0 || wholeMem.cur != 0 {
					t.Errorf("%s W=%d %s: %d and %d bytes still allocated after Close", c, w, lb, mem.cur, wholeMem.cur)
				}
				held, wholeHeld := mem.peak, wholeMem.peak
				if n != len(want) {
					t.Fatalf("%s W=%d %s: %d steps, want %d", c, w, lb, n, len(want))
				}
				t.Logf("%s W=%d %s: %d steps, peak in flight %d of a share of %d (row group %d), %d pieces; held %d bytes at most (whole row groups: %d)",
					c, w, lb, n, peak, share, rgCost, pieces, held, wholeHeld)
				if pieces == 0 {
					t.Errorf("%s W=%d %s: no piece read (row group %d bytes, share %d)", c, w, lb, rgCost, share)
				}
				if peak > share {
					t.Errorf("%s W=%d %s: a reader had %d bytes in flight, over its share %d of the budget (row group %d)", c, w, lb, peak, share, rgCost)
				}
				// Everything decoded and cut at once: the budget (in flight,
				// pieces held by the cutters) plus the 4 slices' windows
				// (held beside it) plus the step being returned and its copies.
				step := int64(4*16) * rgCost / rgRows
				window := 4 * int64(w) * rgCost / rgRows
				if bound := 4*share + window + 2*step; held > bound {
					t.Errorf("%s W=%d %s: the pipeline held %d bytes at once, over the budget %d plus the windows %d plus two steps (%d)", c, w, lb, held, 4*share, window, bound)
				}
			}
		}
	}
}

// TestBudgetTooSmallAtPlanTime: a plan whose slices cannot fit the
// read-ahead budget is refused by Info and Open, with the numbers; the
// shuffle window is held beside the budget, so it does not decide.
func TestBudgetTooSmallAtPlanTime(t *testing.T) {
	dir := writeDataset(t, bigSpec(datagen.CompressionNone, false))
	ctx := context.Background()
	p, err := NewPipeline(ctx, WithReadAhead(4<<10), WithCacheTTL(0))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	req := bigRequest(dir, 0, transport.LastBatchPad)
	_, err = p.Info(ctx, req)
	if !errors.Is(err, transport.ErrFailedPrecondition) {
		t.Fatalf("Info = %v, want ErrFailedPrecondition", err)
	}
	for _, s := range []string{"read-ahead budget of 4096 bytes", "4 slices", "16 rows", "--read-ahead"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not say %q", err, s)
		}
	}
	if _, err := p.Open(ctx, req); !errors.Is(err, transport.ErrFailedPrecondition) {
		t.Fatalf("Open = %v, want ErrFailedPrecondition", err)
	}
	// A budget that fits a slice fits it with any window (held beside it).
	q, err := NewPipeline(ctx, WithReadAhead(64<<10), WithCacheTTL(0))
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	for _, w := range []int{0, 1000} {
		if _, err := q.Info(ctx, bigRequest(dir, w, transport.LastBatchPad)); err != nil {
			t.Fatalf("Info with a window of %d rows: %v", w, err)
		}
	}
}

// TestWindowReadAhead: with a shuffle window costing more than a slice's
// share of the read-ahead budget, each slice's reader reads the whole next
// window while the cutter holds the current one (a window's first slice
// needs every row of it: a reader held to its share would leave most of
// the window to decode when every slice reaches it at once). The steps are
// those of an unbounded run, and what the pipeline holds stays within the
// budget plus the windows held plus one window read ahead per slice.
func TestWindowReadAhead(t *testing.T) {
	dir := writeDataset(t, bigSpec(datagen.CompressionSnappy, true))
	rgRows, rgCost := rowGroupCost(t, dir)
	share := rgCost / 4 // about 625 rows
	const w = 1000      // a window of 1,000 rows: more than a share
	req := bigRequest(dir, w, transport.LastBatchPad)

	want, _ := unboundedSteps(t, req)
	defer releaseSteps(want)

	ctx := context.Background()
	mem := &peakAlloc{Allocator: memory.NewGoAllocator()}
	p, err := NewPipeline(ctx, WithReadAhead(4*share), WithCacheTTL(0), WithAllocator(mem))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	st, err := p.Open(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ps := st.(*pipelineStream)
	if ps.pl.pieces.pieceRows == 0 {
		t.Fatalf("row groups of %d bytes under a share of %d are not read in pieces", rgCost, share)
	}
	if got := ps.pl.pieces.windowAhead; got < w*rgCost/rgRows {
		t.Fatalf("window read-ahead %d bytes, under the %d bytes of %d rows", got, w*rgCost/rgRows, w)
	}
	for s := 0; ; s++ {
		step, err := st.Next(ctx)
		if errors.Is(err, io.EOF) {
			if s != len(want) {
				t.Fatalf("%d steps, want %d", s, len(want))
			}
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range step.Slices {
			if !array.RecordEqual(r, want[s][i]) {
				t.Fatalf("step %d slice %d differs from the unbounded run", s, i)
			}
		}
		step.Release()
		if s != 0 {
			continue
		}
		// Step 0 pulled window 0 into the cutters. Each reader now reads
		// on, to the end of window 1, without anyone asking: wait for it.
		deadline := time.Now().Add(20 * time.Second)
		for _, sc := range ps.slices {
			var k, rows int64
			for _, g := range sc.segs {
				if rows >= 2*w {
					break
				}
				rows += g.End - g.Start
				k++
			}
			for sc.rd.Stats().Pieces.Load() < k {
				if time.Now().After(deadline) {
					t.Fatalf("slice %d: its reader read %d pieces ahead and stopped, want the %d that reach the end of window 1 (row %d); in flight at most %d bytes, share %d",
						sc.d, sc.rd.Stats().Pieces.Load(), k, 2*w, sc.rd.PeakInFlight(), share)
				}
				time.Sleep(time.Millisecond)
			}
		}
	}
	step := int64(4*16) * rgCost / rgRows
	window := 4 * int64(w) * rgCost / rgRows
	if bound := 4*share + 4*ps.pl.pieces.windowAhead + window + 2*step; mem.peak > bound {
		t.Errorf("the pipeline held %d bytes at once, over the budget %d plus the windows %d, one window read ahead per slice %d, and two steps (%d)",
			mem.peak, 4*share, window, 4*ps.pl.pieces.windowAhead, bound)
	}
	t.Logf("window read-ahead %d bytes per slice (share %d); held at most %d bytes", ps.pl.pieces.windowAhead, share, mem.peak)
}
