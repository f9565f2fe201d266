package batching

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// srcOffset separates the ids of the sources of a test mixture.
const srcOffset = 1 << 32

// mixRun drives a mixture the way the server does: one SourceCursor per
// (source, slice), records built only when a cutter asks for them, each
// slice joined with joinParts.
type mixRun struct {
	t      *testing.T
	m      *Mixture
	ds     []dataset
	mem    memory.Allocator
	slices []int
	curs   [][]*SourceCursor // [source][index in slices]
	walk   *Walker
	in     *arrow.Schema
	out    *arrow.Schema
}

func newMixRun(t *testing.T, m *Mixture, ds []dataset, start int, mem memory.Allocator) *mixRun {
	t.Helper()
	all := make([]int, m.Config().D)
	for d := range all {
		all[d] = d
	}
	return newMixRunSlices(t, m, ds, start, mem, all)
}

// newMixRunSlices is newMixRun for the given slices only (one process's).
func newMixRunSlices(t *testing.T, m *Mixture, ds []dataset, start int, mem memory.Allocator, slices []int) *mixRun {
	t.Helper()
	r := &mixRun{t: t, m: m, ds: ds, mem: mem, slices: slices, walk: m.Composition().Walk(), in: idOnlySchema}
	if err := r.walk.Skip(start); err != nil {
		t.Fatal(err)
	}
	var err error
	if r.out, err = MixtureSliceSchema(r.in, m.Config().Policy, "source", "valid"); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < m.Sources(); i++ {
		var row []*SourceCursor
		for _, d := range slices {
			c, err := m.NewCursor(i, d, r.walk.Cum()[i], mem, WithSchema(r.in))
			if err != nil {
				t.Fatal(err)
			}
			row = append(row, c)
		}
		r.curs = append(r.curs, row)
	}
	return r
}

func (r *mixRun) release() {
	for _, row := range r.curs {
		for _, c := range row {
			c.Release()
		}
	}
}

// take returns n rows of source i on the k-th slice of the run as records.
func (r *mixRun) take(i, k int, n int64) []arrow.RecordBatch {
	var out []arrow.RecordBatch
	c := r.curs[i][k]
	d := r.slices[k]
	for n > 0 {
		rec, ok, err := c.Take(n)
		if err != nil {
			r.t.Fatalf("source %d slice %d take %d: %v", i, d, n, err)
		}
		if !ok {
			seg, want := c.Cutter().Wants()
			if !want {
				r.t.Fatalf("source %d slice %d: no rows and no wants", i, d)
			}
			g := seg.RowGroup
			rg := makeRecord(r.mem, r.in, int64(i)*srcOffset+r.ds[i].first[g], r.ds[i].rgs[g].Rows)
			if err := c.Cutter().Push(rg, seg); err != nil {
				r.t.Fatal(err)
			}
			rg.Release()
			continue
		}
		n -= rec.NumRows()
		out = append(out, rec)
	}
	return out
}

// step returns the slices of the next step.
func (r *mixRun) step() []arrow.RecordBatch {
	m := r.m
	s := r.walk.Step()
	counts := make([]int64, m.Sources())
	pos := append([]int64(nil), r.walk.Cum()...)
	if err := r.walk.Next(counts); err != nil {
		r.t.Fatal(err)
	}
	var out []arrow.RecordBatch
	for k, d := range r.slices {
		var parts []arrow.RecordBatch
		var reals []int64
		var srcs []int32
		for _, i := range m.Order(s, d) {
			if counts[i] == 0 {
				continue
			}
			real := m.Real(s, int(i), d, pos[i], counts[i])
			var recs []arrow.RecordBatch
			if real > 0 {
				recs = r.take(int(i), k, real)
			}
			for len(recs) > 1 || real < counts[i] { // join to one part, padded
				var one arrow.RecordBatch
				if len(recs) > 0 {
					one = concatRecs(r.mem, r.in, recs)
					for _, x := range recs {
						x.Release()
					}
				}
				p, err := PadRecord(r.mem, r.in, one, int(counts[i]))
				if err != nil {
					r.t.Fatal(err)
				}
				if one != nil {
					one.Release()
				}
				recs = []arrow.RecordBatch{p}
				break
			}
			parts = append(parts, recs[0])
			reals = append(reals, real)
			srcs = append(srcs, i)
		}
		rec, err := joinParts(r.mem, r.in, r.out, parts, reals, srcs, m.Config().Policy == Pad)
		if err != nil {
			r.t.Fatal(err)
		}
		for _, p := range parts {
			p.Release()
		}
		out = append(out, rec)
	}
	return out
}

func concatRecs(mem memory.Allocator, sch *arrow.Schema, recs []arrow.RecordBatch) arrow.RecordBatch {
	var n int64
	runs := make([]run, len(recs))
	for j, x := range recs {
		runs[j] = run{src: j, n: x.NumRows()}
		n += x.NumRows()
	}
	arrs := make([]arrow.Array, len(recs))
	for j, x := range recs {
		arrs[j] = x.Column(0)
	}
	col, _ := gatherColumn(mem, sch.Field(0).Type, arrs, runs, n)
	defer col.Release()
	return array.NewRecordBatch(sch, []arrow.Array{col}, n)
}

// sliceRow is one delivered row: its id, or -1 for padding, and its source.
type sliceRow struct {
	id  int64
	src int32
}

func rowsOfSlice(t *testing.T, rec arrow.RecordBatch, pad bool) []sliceRow {
	ids := rec.Column(0).(*array.Int64)
	src := rec.Column(1).(*array.Int32)
	out := make([]sliceRow, rec.NumRows())
	for k := range out {
		out[k] = sliceRow{id: ids.Value(k), src: src.Value(k)}
		if pad && !rec.Column(2).(*array.Boolean).Value(k) {
			if src.Value(k) != -1 || ids.Value(k) != 0 {
				t.Fatalf("padding row %d: id %d source %d, want 0 and -1", k, ids.Value(k), src.Value(k))
			}
			out[k].id = -1
		}
	}
	return out
}

// randomMixture draws sources, weights, a stop rule and a policy.
func randomMixture(r *rand.Rand) ([]dataset, MixtureConfig, []Config) {
	d := []int{1, 2, 3, 4}[r.IntN(4)]
	b := r.IntN(8) + 1
	n := r.IntN(3) + 1
	cfg := MixtureConfig{GlobalBatch: b * d, D: d, Seed: r.Uint64(), Policy: Policy(r.IntN(3)), Stop: StopRule(r.IntN(3))}
	if cfg.Stop == StopNumSteps {
		cfg.NumSteps = r.IntN(40) + 1
	}
	// Weights of at least 1/20 of the largest, or 0: the sources run out
	// within a few hundred steps.
	weights := func() []float64 {
		w := randomWeights(r, n)
		for i := range w {
			if w[i] > 0 {
				w[i] = max(w[i], 0.5)
			}
		}
		return w
	}
	cfg.Spans = []WeightSpan{{Weights: weights()}}
	if r.IntN(3) == 0 {
		cfg.Spans = append(cfg.Spans, WeightSpan{FromStep: r.IntN(10) + 1, Weights: weights()})
	}
	var ds []dataset
	var cfgs []Config
	for i := 0; i < n; i++ {
		rows := randomRows(r)
		var tot int64
		for _, v := range rows {
			tot += v
		}
		if tot < int64(d) {
			rows = append(rows, int64(d)+int64(r.IntN(20)))
		}
		ds = append(ds, newDataset(rows, 8))
		var w int64
		if r.IntN(2) == 0 {
			w = int64(r.IntN(10) + 1)
		}
		cfgs = append(cfgs, SourceConfig(d, r.Uint64(), r.IntN(2) == 0, w))
	}
	return ds, cfg, cfgs
}

// TestMixtureProperties holds random mixtures, driven end to end through
// their cursors, to the contract: every slice holds c_i(step) rows of
// source i (a pure function of the step), the rows are the sources' streams
// in order (Plan.SourceRow), no row of a source repeats within a source
// epoch, stop rules see every row of the sources' first epochs they
// promise, and a resume at a random step gives the same slices.
//
// Length: the checks of one random mixture, in the order a reader expects
// them.
func TestMixtureProperties(t *testing.T) {
	seed := testSeed(t)
	r := rand.New(rand.NewPCG(seed, 1))
	for trial := 0; trial < 300; trial++ {
		ds, cfg, cfgs := randomMixture(r)
		var plans []*Plan
		for i := range ds {
			p, err := NewPlan(ds[i].rgs, cfgs[i])
			if err != nil {
				t.Fatal(err)
			}
			plans = append(plans, p)
		}
		m, err := NewMixture(plans, cfg)
		if errors.Is(err, ErrIndivisible) || errors.Is(err, ErrNoSteps) || (errors.Is(err, ErrInvalidMixture) && cfg.Stop == StopAllExhausted) {
			continue
		}
		if err != nil {
			t.Fatalf("trial %d: %v", trial, err)
		}
		mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
		run := newMixRun(t, m, ds, 0, mem)
		pad := cfg.Policy == Pad
		var all [][][]sliceRow
		seen := map[[2]int64]bool{} // (id, source epoch)
		walk := m.Composition().Walk()
		counts := make([]int64, m.Sources())
		for s := 0; s < m.Steps(); s++ {
			pos := append([]int64(nil), walk.Cum()...)
			if err := walk.Next(counts); err != nil {
				t.Fatal(err)
			}
			recs := run.step()
			var step [][]sliceRow
			for d, rec := range recs {
				rows := rowsOfSlice(t, rec, pad)
				rec.Release()
				if len(rows) != m.SliceRows() {
					t.Fatalf("trial %d step %d slice %d: %d rows, want %d", trial, s, d, len(rows), m.SliceRows())
				}
				// The model: source i's rows pos..pos+real of its sequence.
				k := 0
				for _, i := range m.Order(s, d) {
					real := m.Real(s, int(i), d, pos[i], counts[i])
					for q := pos[i]; q < pos[i]+real; q++ {
						e, row := m.Locate(int(i), d, q)
						g, rr, ok := plans[i].SourceRow(e, d, row)
						if !ok {
							t.Fatalf("trial %d: model has no row", trial)
						}
						want := int64(i)*srcOffset + ds[i].first[g] + rr
						if rows[k].id != want || rows[k].src != i {
							t.Fatalf("trial %d step %d slice %d row %d: id %d source %d, want %d source %d", trial, s, d, k, rows[k].id, rows[k].src, want, i)
						}
						key := [2]int64{want, int64(e)}
						if seen[key] {
							t.Fatalf("trial %d: row %d delivered twice in source epoch %d", trial, want, e)
						}
						seen[key] = true
						k++
					}
				}
				for ; k < len(rows); k++ {
					if !pad || rows[k].id != -1 {
						t.Fatalf("trial %d step %d slice %d row %d: %+v, want padding", trial, s, d, k, rows[k])
					}
				}
				step = append(step, rows)
			}
			all = append(all, step)
		}
		// Stop rules: all_exhausted delivers every row of every source's
		// first epoch; first_exhausted under pad every row of the sources
		// that ran out.
		for i := range ds {
			var n int64
			for _, g := range ds[i].rgs {
				n += g.Rows
			}
			var got int64
			for id := int64(0); id < n; id++ {
				if seen[[2]int64{int64(i)*srcOffset + id, 0}] {
					got++
				}
			}
			if got != minI64(n, m.SourceRows(i)) && cfg.Stop != StopNumSteps {
				t.Fatalf("trial %d (%s): source %d delivered %d distinct rows of its first epoch, SourceRows says %d of %d", trial, fmtMix(cfg), i, got, m.SourceRows(i), n)
			}
			if cfg.Stop == StopAllExhausted && got != n {
				t.Fatalf("trial %d: all_exhausted: source %d delivered %d of %d rows of its first epoch", trial, i, got, n)
			}
		}
		run.release()
		mem.AssertSize(t, 0)
		// Resume at a random step.
		if m.Steps() > 1 {
			k := r.IntN(m.Steps())
			res := newMixRun(t, m, ds, k, mem)
			for s := k; s < m.Steps(); s++ {
				for d, rec := range res.step() {
					got := rowsOfSlice(t, rec, pad)
					rec.Release()
					if fmt.Sprint(got) != fmt.Sprint(all[s][d]) {
						t.Fatalf("trial %d: resumed at step %d, step %d slice %d = %v, want %v", trial, k, s, d, got, all[s][d])
					}
				}
			}
			res.release()
			mem.AssertSize(t, 0)
		}
	}
}

func minI64(a, b int64) int64 { return min(a, b) }

func fmtMix(c MixtureConfig) string {
	return fmt.Sprintf("B=%d D=%d policy=%v stop=%v steps=%d spans=%v", c.GlobalBatch, c.D, c.Policy, c.Stop, c.NumSteps, c.Spans)
}
