package batching

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// TestSourceCursorSkip: a cursor that skips some runs of rows (Skip) and
// takes others delivers, where it takes, the rows a cursor that takes
// every run delivers there, across pushed records and source epochs, and
// frees what it passed (checked allocator). A cursor with a shuffle
// window refuses to skip.
func TestSourceCursorSkip(t *testing.T) {
	seed := testSeed(t)
	r := rand.New(rand.NewPCG(seed, 7))
	tried := 0
	for trial := 0; trial < 200; trial++ {
		ds, cfg, cfgs := randomMixture(r)
		plans := make([]*Plan, len(ds))
		for i := range ds {
			p, err := NewPlan(ds[i].rgs, cfgs[i])
			if err != nil {
				t.Fatal(err)
			}
			plans[i] = p
		}
		m, err := NewMixture(plans, cfg)
		if err != nil {
			continue
		}
		mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
		i, d := r.IntN(len(ds)), r.IntN(cfg.D)
		newCursor := func() *SourceCursor {
			c, err := m.NewCursor(i, d, 0, mem, WithSchema(idOnlySchema))
			if err != nil {
				t.Fatal(err)
			}
			return c
		}
		take, skip := newCursor(), newCursor()
		push := func(c *SourceCursor) {
			seg, want := c.Cutter().Wants()
			if !want {
				t.Fatalf("trial %d: no rows and no wants", trial)
			}
			g := seg.RowGroup
			rg := makeRecord(mem, idOnlySchema, int64(i)*srcOffset+ds[i].first[g], ds[i].rgs[g].Rows)
			if err := c.Cutter().Push(rg, seg); err != nil {
				t.Fatal(err)
			}
			rg.Release()
		}
		// ids returns the next n ids of c, taken.
		ids := func(c *SourceCursor, n int64) []int64 {
			var out []int64
			for int64(len(out)) < n {
				rec, ok, err := c.Take(n - int64(len(out)))
				if err != nil {
					t.Fatalf("trial %d: take: %v", trial, err)
				}
				if !ok {
					push(c)
					continue
				}
				out = append(out, rec.Column(0).(*array.Int64).Int64Values()...)
				rec.Release()
			}
			return out
		}
		windowed := cfgs[i].Window > 0
		if windowed {
			if _, _, err := skip.Skip(1); !errors.Is(err, ErrInvalidPosition) {
				t.Errorf("trial %d: Skip on a cursor with a window of %d: %v, want ErrInvalidPosition", trial, cfgs[i].Window, err)
			}
		} else {
			tried++
			var total int64
			for range 12 {
				n := 1 + r.Int64N(3*int64(cfg.GlobalBatch))
				want := ids(take, n)
				if r.IntN(2) == 0 {
					if got := ids(skip, n); !slices.Equal(got, want) {
						t.Fatalf("trial %d (seed %d): rows %d..%d: the skipping cursor took %v, want %v", trial, seed, total, total+n, got, want)
					}
				} else {
					for left := n; left > 0; {
						got, ok, err := skip.Skip(left)
						if err != nil {
							t.Fatalf("trial %d: skip: %v", trial, err)
						}
						if !ok {
							push(skip)
							continue
						}
						if got <= 0 || got > left {
							t.Fatalf("trial %d: Skip(%d) skipped %d", trial, left, got)
						}
						left -= got
					}
				}
				total += n
			}
		}
		take.Release()
		skip.Release()
		mem.AssertSize(t, 0)
	}
	if tried < 20 {
		t.Fatalf("only %d cursors without a window skipped", tried)
	}
}
