package batching

import (
	"errors"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// TestElasticRemainderProperties: over random (N, B, D, D', position), the
// rows delivered under D before the switch plus those of the remainder under
// D' are the rows the plan with D delivers in that epoch, each exactly once
// (under drop: all but the rows drop drops); the remainder ends the epoch
// after StepsPerEpoch steps, pads only in its last step and only under pad,
// and resuming inside the remainder gives its suffix. Every few iterations
// the data path (old cutters, trimming, regrouping) runs on real records and
// must deliver the same ids, reading exactly the segments it announced.
func TestElasticRemainderProperties(t *testing.T) {
	seed := testSeed(t)
	r := rand.New(rand.NewPCG(seed, seed^0xe1a5))
	iters := 300
	if testing.Short() {
		iters = 60
	}
	degrees := []int{1, 2, 3, 4, 6, 8}
	checked := 0
	for it := 0; it < iters; it++ {
		rows := randomRows(r)
		ds := newDataset(rows, 10)
		var n int64
		for _, x := range rows {
			n += x
		}
		if n == 0 {
			continue
		}
		oldD, newD := degrees[r.IntN(len(degrees))], degrees[r.IntN(len(degrees))]
		unit := oldD * newD / gcd(oldD, newD)
		bigB := unit * (r.IntN(max(1, int(n)/(2*unit)+1)) + 1)
		cfg := randomConfig(r, n)
		cfg.GlobalBatch, cfg.D = bigB, newD
		if cfg.Policy == Raise && n%int64(bigB) != 0 {
			cfg.Policy = Pad
		}
		if cfg.Policy == Drop && n < int64(bigB) {
			cfg.Policy = Pad
		}
		ctx := "iter " + strconv.Itoa(it) + " rows " + fmtInts(rows) + " cfg " + fmtCfg(cfg) + " from D=" + strconv.Itoa(oldD)
		plan, err := NewPlan(ds.rgs, cfg)
		if err != nil {
			t.Fatalf("%s: NewPlan: %v", ctx, err)
		}
		spe := plan.StepsPerEpoch()
		sw := Switch{FromD: oldD, Epoch: r.IntN(3), Step: r.IntN(spe + 1)}
		ctx += " switch " + strconv.Itoa(sw.Epoch) + "/" + strconv.Itoa(sw.Step)
		rem, err := plan.Remainder(sw)
		if err != nil {
			t.Fatalf("%s: Remainder: %v", ctx, err)
		}
		old := rem.Old()
		if old.StepsPerEpoch() != spe {
			t.Fatalf("%s: the old plan has %d steps, the new %d", ctx, old.StepsPerEpoch(), spe)
		}
		// The old plan's delivered sequence of each stream (the contract's
		// model, independent of the code under test).
		exp := expectedSlices(old, ds, sw.Epoch)
		seq := make([][]int64, oldD)
		count := map[int64]int{}
		for s := range spe {
			for d := range oldD {
				seq[d] = append(seq[d], exp[s][d]...)
				if s < sw.Step {
					for _, id := range exp[s][d] {
						count[id]++ // delivered before the switch
					}
				}
			}
		}
		all := map[int64]bool{}
		for d := range oldD {
			for _, id := range seq[d] {
				all[id] = true
			}
		}
		// The remainder, step by step, from the pieces.
		newB := plan.SliceRows()
		var remIDs [][][]int64 // [step-sw.Step][d']
		var total int64
		for d := range newD {
			var stream []int64
			for _, p := range rem.Pieces(sw.Step, d) {
				stream = append(stream, seq[p.Stream][p.From:p.To]...)
			}
			if int64(len(stream)) != rem.StreamLen(d) {
				t.Fatalf("%s: remainder stream %d has %d rows in its pieces, StreamLen %d", ctx, d, len(stream), rem.StreamLen(d))
			}
			var at int
			for s := sw.Step; s < spe; s++ {
				real := rem.SliceReal(s, d)
				if real < newB && (cfg.Policy != Pad || s != spe-1) {
					t.Fatalf("%s: slice %d step %d has %d real rows of %d outside the last step under pad", ctx, d, s, real, newB)
				}
				// Resuming inside the remainder gives its suffix.
				var suffix []int64
				for _, p := range rem.Pieces(s, d) {
					suffix = append(suffix, seq[p.Stream][p.From:p.To]...)
				}
				if !slices.Equal(suffix, stream[at:]) {
					t.Fatalf("%s: Pieces(step %d, %d) = %v, want the suffix %v", ctx, s, d, suffix, stream[at:])
				}
				if len(remIDs) <= s-sw.Step {
					remIDs = append(remIDs, make([][]int64, newD))
				}
				remIDs[s-sw.Step][d] = stream[at : at+real]
				at += real
			}
			if at != len(stream) {
				t.Fatalf("%s: remainder stream %d: steps deliver %d of its %d rows", ctx, d, at, len(stream))
			}
			total += int64(len(stream))
		}
		if total != rem.Rows() {
			t.Fatalf("%s: remainder streams hold %d rows, Rows() = %d", ctx, total, rem.Rows())
		}
		for _, st := range remIDs {
			for _, ids := range st {
				for _, id := range ids {
					count[id]++
				}
			}
		}
		for id, c := range count {
			if c != 1 || !all[id] {
				t.Fatalf("%s: row %d delivered %d times (in the old plan's epoch: %v)", ctx, id, c, all[id])
			}
		}
		if len(count) != len(all) {
			t.Fatalf("%s: %d rows delivered across the switch, the epoch under D=%d delivers %d", ctx, len(count), oldD, len(all))
		}
		if want := n - old.DroppedRows(); int64(len(all)) != want {
			t.Fatalf("%s: the epoch delivers %d rows, want N - dropped = %d", ctx, len(all), want)
		}
		// The data path, on real records.
		if it%4 == 0 {
			checked++
			runRemainderData(t, ctx, plan, rem, ds, sw, remIDs)
		}
	}
	if checked == 0 {
		t.Fatal("no iteration ran the data path")
	}
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// runRemainderData cuts every remainder slice with a RemainderCutter from
// records of the synthetic dataset, from the switch step and from a later
// step, and checks ids, padding and mask against want[step-sw.Step][d].
func runRemainderData(t *testing.T, ctx string, plan *Plan, rem *Remainder, ds dataset, sw Switch, want [][][]int64) {
	t.Helper()
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	mask := ""
	if plan.Config().Policy == Pad {
		mask = DefaultMaskColumn
	}
	spe := plan.StepsPerEpoch()
	for d := range plan.Config().D {
		for _, start := range []int{sw.Step, (sw.Step + spe + 1) / 2} {
			c, err := NewRemainderCutter(rem, d, start, mem, WithSchema(testSchema))
			if err != nil {
				t.Fatalf("%s: NewRemainderCutter(%d, %d): %v", ctx, d, start, err)
			}
			announced := c.Segments()
			var pushed []Segment
			for s := start; s < spe; {
				rec, real, ok, err := c.Next()
				if err != nil {
					t.Fatalf("%s: slice %d step %d: Next: %v", ctx, d, s, err)
				}
				if ok {
					ids := checkSlice(t, rec, real, plan.SliceRows(), mask)
					rec.Release()
					if !slices.Equal(ids, want[s-sw.Step][d]) {
						t.Fatalf("%s: slice %d step %d (from %d): ids %v, want %v", ctx, d, s, start, ids, want[s-sw.Step][d])
					}
					s++
					continue
				}
				seg, ok := c.Wants()
				if !ok {
					t.Fatalf("%s: slice %d step %d: Next needs input, Wants none", ctx, d, s)
				}
				in := makeRecord(mem, testSchema, ds.first[seg.RowGroup], ds.rgs[seg.RowGroup].Rows)
				err = c.Push(in, seg)
				in.Release()
				if err != nil {
					t.Fatalf("%s: Push: %v", ctx, err)
				}
				pushed = append(pushed, seg)
			}
			if _, _, ok, err := c.Next(); ok || err != nil || !c.Done() {
				t.Fatalf("%s: slice %d: Next after the last step = %v, %v", ctx, d, ok, err)
			}
			if !slices.Equal(pushed, announced) {
				t.Fatalf("%s: slice %d from %d: pushed %v, Segments announced %v", ctx, d, start, pushed, announced)
			}
			c.Release()
		}
	}
}

func TestElasticErrors(t *testing.T) {
	ds := newDataset([]int64{10, 10}, 1)
	p, err := NewPlan(ds.rgs, Config{GlobalBatch: 4, D: 2, Policy: Pad})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Remainder(Switch{FromD: 3, Step: 1}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("Remainder from D=3 with B=4 = %v, want ErrInvalidConfig", err)
	}
	if _, err := p.Remainder(Switch{FromD: 4, Step: 6}); !errors.Is(err, ErrInvalidPosition) {
		t.Errorf("Remainder past the epoch = %v, want ErrInvalidPosition", err)
	}
	rem, err := p.Remainder(Switch{FromD: 4, Step: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewRemainderCutter(rem, 0, 0, nil, WithSchema(testSchema)); !errors.Is(err, ErrInvalidPosition) {
		t.Errorf("remainder cutter before the switch step = %v, want ErrInvalidPosition", err)
	}
	if _, err := NewRemainderCutter(rem, 0, 1, nil); !errors.Is(err, ErrNoSchema) {
		t.Errorf("remainder cutter without a schema = %v, want ErrNoSchema", err)
	}
	_ = arrow.PrimitiveTypes.Int64
}
