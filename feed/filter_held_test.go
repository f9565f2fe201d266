package feed

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/meshfeed/meshfeed/loader"
	"github.com/meshfeed/meshfeed/objstore"
	"github.com/meshfeed/meshfeed/objstore/objstoretest"
	"github.com/meshfeed/meshfeed/transport"
)

// heldRow is one delivered row: its id and features.
type heldRow struct {
	id   int64
	feat string
}

// streamRows streams req and returns the real rows of every slice, in
// slice order (dataset order without shuffling).
func streamRows(t *testing.T, p *Pipeline, req *transport.Request) []heldRow {
	t.Helper()
	ctx := context.Background()
	st, err := p.Open(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	per := make([][]heldRow, len(req.Slices))
	for {
		step, err := st.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		for i, rec := range step.Slices {
			ids := rec.Column(0).(*array.Int64).Int64Values()
			feats := rec.Column(1).(*array.FixedSizeList)
			for r := 0; r < step.Meta.RealRows[i]; r++ {
				per[i] = append(per[i], heldRow{ids[r], feats.ValueStr(r)})
			}
		}
		step.Release()
	}
	return slices.Concat(per...)
}

// TestFilterColumnReadOnce: a filter on id, a delivered column, over row
// groups the footers leave undecided (the edges of a range of the sorted
// column): the plan's read of id is kept for the stream (loader.HeldChunks),
// so that every byte of those row groups' id chunks is read from storage
// once in plan and stream together, where without the held bytes the
// stream reads them again; the rows delivered (id and features) are those
// of the unfiltered epoch whose id the filter keeps, at D = 1 and 4; the
// held bytes are in the server's memory account between the plan and the
// stream, and returned once the stream has read those row groups.
func TestFilterColumnReadOnce(t *testing.T) {
	dir := writeDataset(t, filterSpec())
	const lo, hi = 1500, 7700 // row groups of 1,000 rows: 1 and 7 half kept
	ctx := context.Background()
	for _, d := range []int{1, 4} {
		t.Run(fmt.Sprintf("D=%d", d), func(t *testing.T) {
			all := streamRows(t, newFilterPipeline(t, 1<<30, nil), filterRequest(dir, `[["id", ">=", 0]]`, d))
			var want []heldRow
			for _, r := range all {
				if r.id >= lo && r.id < hi {
					want = append(want, r)
				}
			}
			if len(all) != 12000 || len(want) != hi-lo {
				t.Fatalf("unfiltered: %d rows, %d of them in [%d, %d); want 12000 and %d", len(all), len(want), lo, hi, hi-lo)
			}
			for _, held := range []bool{true, false} {
				store := &objstoretest.RangeReads{Store: objstore.NewLocalStore()}
				opts := []Option{WithStore(store), WithCacheTTL(0)}
				if !held {
					opts = append(opts, WithHeldChunks(0, 0))
				}
				p, err := NewPipeline(ctx, opts...)
				if err != nil {
					t.Fatal(err)
				}
				srv, err := transport.New(p, transport.WithAllowedRoots(dir), transport.WithMemoryBudget(1<<30))
				if err != nil {
					t.Fatal(err)
				}
				acct := srv.Limits().Memory
				req := filterRequest(dir, fmt.Sprintf(`[["id", ">=", %d], ["id", "<", %d]]`, lo, hi), d)
				if _, err := p.Info(ctx, req); err != nil {
					t.Fatal(err)
				}
				if ev := p.FilterStats().Evaluated.Load(); ev != 2 {
					t.Fatalf("%d row groups evaluated, want 2 (the range's edges)", ev)
				}
				between := acct.InUse()
				got := streamRows(t, p, req)
				if !slices.Equal(got, want) {
					t.Errorf("held=%v: %d rows delivered, want the %d rows of the unfiltered epoch with id in [%d, %d)", held, len(got), len(want), lo, hi)
				}
				// Every evaluated row group's id chunk, read in plan and stream.
				ds, err := loader.Open(ctx, store, []string{dir + "/*.parquet"}, loader.WithColumns("id"))
				if err != nil {
					t.Fatal(err)
				}
				for _, r := range ds.RowGroups() {
					first := int64(r.File*6000 + r.Index*1000)
					if first >= lo || first+1000 <= lo {
						if first >= hi || first+1000 <= hi {
							continue
						}
					}
					ch := ds.Files[r.File].RowGroups[r.Index].Chunks[0]
					n := store.Within(ds.Files[r.File].Object.URI, ch.Offset, ch.Offset+ch.Length)
					t.Logf("held=%v: row group %d of file %d: %d bytes of its %d-byte id chunk read", held, r.Index, r.File, n, ch.Length)
					if held && n != ch.Length {
						t.Errorf("row group %d of file %d: %d bytes of its id chunk (%d) read in plan and stream, want each once", r.Index, r.File, n, ch.Length)
					}
					if !held && n <= ch.Length {
						t.Errorf("without held bytes, row group %d of file %d: %d bytes of its id chunk (%d) read: want more (the stream reads it again), else the test measures nothing", r.Index, r.File, n, ch.Length)
					}
				}
				if held && between <= 0 {
					t.Errorf("between the plan and the stream the memory account holds %d bytes, want the held id chunks", between)
				}
				if n := acct.InUse(); n != 0 {
					t.Errorf("held=%v: after the stream the memory account holds %d bytes, want 0", held, n)
				}
				if n := p.cfg.held.Held(); n != 0 {
					t.Errorf("held=%v: %d bytes still held after the stream, want 0", held, n)
				}
				p.Close()
				store.Store.(*objstore.LocalStore).Close()
			}
		})
	}
}

// TestHeldChunksYieldToReservations: the filter columns a plan keeps for its
// stream hold part of the server's memory account; a reservation that does
// not fit without them (a stream, another plan's evaluation) drops them
// (they are read from storage again) instead of waiting.
func TestHeldChunksYieldToReservations(t *testing.T) {
	dir := writeDataset(t, filterSpec())
	ctx := context.Background()
	p, _, acct := filterBudgetPipeline(t, dir, 1<<30)
	req := filterRequest(dir, `[["id", ">=", 1500], ["id", "<", 7700]]`, 1)
	if _, err := p.Info(ctx, req); err != nil {
		t.Fatal(err)
	}
	held := p.cfg.held.Held()
	if held <= 0 || acct.InUse() != held {
		t.Fatalf("after the plan: %d bytes held, %d in the account; want the id chunks of 2 row groups in both", held, acct.InUse())
	}
	rest := acct.Limit() - acct.InUse()
	if !acct.TryReserve(rest) {
		t.Fatal("TryReserve(the rest of the budget) = false")
	}
	defer acct.Unreserve(rest)
	if err := p.reserveBytes(ctx, held, "a test's reservation"); err != nil {
		t.Fatalf("a reservation of the held bytes' size with the rest of the budget taken = %v, want them dropped for it", err)
	}
	defer acct.Unreserve(held)
	if n := p.cfg.held.Held(); n != 0 {
		t.Errorf("%d bytes still held after a reservation needed them, want 0", n)
	}
}
