package feed

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/meshfeed/meshfeed/batching"
	"github.com/meshfeed/meshfeed/internal/testseed"
	"github.com/meshfeed/meshfeed/transport"
)

// mixElasticModel computes the steps from k on of a mixture switched from
// old (its plan with the old D) to req (with req.Elastic), from the
// sources' plans alone (docs/CONTRACT-elastic.md, "Mixtures"): per source,
// the rows of the epochs some old slice had begun that no old slice had
// delivered, in order of epoch, old stream and row, split into D'
// contiguous streams, then the new plan's streams from the next epoch on;
// the mixture's counts, order and padding as the plan says.
func mixElasticModel(t *testing.T, p *Pipeline, old, req *transport.Request, k int) [][][]mixRow {
	t.Helper()
	ctx := context.Background()
	mpOld, err := p.planMixture(ctx, old)
	if err != nil {
		t.Fatal(err)
	}
	mp, err := p.planMixture(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	m := mp.mix
	walk := m.Composition().Walk()
	if err := walk.Skip(k); err != nil {
		t.Fatal(err)
	}
	idOf := func(src *mixSource, plan *batching.Plan, e, d int, row int64) int64 {
		g, r, ok := plan.SourceRow(e, d, row)
		if !ok {
			t.Fatalf("%s: no row %d of stream %d epoch %d", src.name, row, d, e)
		}
		if sel := src.selection(g); sel != nil {
			r, _ = sel.Physical(r, r+1)
		}
		return rowsBefore(src.ds, src.refs[g]) + r
	}
	need := int64(m.Steps()+1) * int64(m.SliceRows())
	seq := make([][][]int64, len(mp.srcs)) // [source][new slice]
	for i, src := range mp.srcs {
		oldP, newP, pos := mpOld.srcs[i].plan, src.plan, walk.Cum()[i]
		last := -1 // the last epoch some old slice had begun
		for d := range old.NumSlices {
			if pos > 0 {
				last = max(last, int((pos-1)/oldP.StreamLen(d)))
			}
		}
		var rem []int64
		for e := 0; e <= last; e++ {
			for d := range old.NumSlices {
				for row := int64(0); row < oldP.StreamLen(d); row++ {
					if int64(e)*oldP.StreamLen(d)+row >= pos {
						rem = append(rem, idOf(src, oldP, e, d, row))
					}
				}
			}
		}
		dn := req.NumSlices
		for d := range dn {
			s := slices.Clone(rem[d*(len(rem)/dn)+min(d, len(rem)%dn) : (d+1)*(len(rem)/dn)+min(d+1, len(rem)%dn)])
			for e := last + 1; int64(len(s)) < need; e++ {
				for row := int64(0); row < newP.StreamLen(d); row++ {
					s = append(s, idOf(src, newP, e, d, row))
				}
			}
			seq[i] = append(seq[i], s)
		}
	}
	base := slices.Clone(walk.Cum())
	counts := make([]int64, m.Sources())
	var out [][][]mixRow
	for s := k; s < m.Steps(); s++ {
		pos := slices.Clone(walk.Cum())
		if err := walk.Next(counts); err != nil {
			t.Fatal(err)
		}
		var sl [][]mixRow
		for d := range req.NumSlices {
			var rows []mixRow
			for _, i := range m.Order(s, d) {
				real := m.Real(s, int(i), d, pos[i], counts[i])
				for q := pos[i] - base[i]; q < pos[i]-base[i]+real; q++ {
					rows = append(rows, mixRow{int64(i), seq[i][d][q]})
				}
			}
			for len(rows) < m.SliceRows() {
				rows = append(rows, mixRow{-1, -1})
			}
			sl = append(sl, rows)
		}
		out = append(out, sl)
	}
	return out
}

// TestMixtureElasticMatchesModel: a mixture run with D=4 and resumed at a
// random step with D=8 (same B) delivers the contract's steps
// (mixElasticModel); two processes serving half of the new slices each
// agree with one; across the switch no row of a source's first epoch
// repeats (first_exhausted) and every one arrives (all_exhausted); the
// plan's steps and delivered rows count the switch; a resume inside the
// new run gives its suffix.
func TestMixtureElasticMatchesModel(t *testing.T) {
	seed := testseed.Get(t, 0, "")
	r := rand.New(rand.NewPCG(seed, 4))
	dirs := mixDirs(t)
	mem := checkedMem(t)
	p := newTestPipeline(t, mem)
	ctx := context.Background()
	const B, D, D2 = 16, 4, 8
	for _, tc := range []struct {
		w      []float64
		policy transport.LastBatch
		stop   transport.MixtureStop
	}{
		{[]float64{0.5, 0.3, 0.2}, transport.LastBatchPad, transport.MixtureStop{Rule: "first_exhausted"}},
		{[]float64{1, 1, 1}, transport.LastBatchDrop, transport.MixtureStop{Rule: "all_exhausted"}},
		{[]float64{2, 0, 1}, transport.LastBatchDrop, transport.MixtureStop{Rule: "num_steps", NumSteps: 40}},
	} {
		old := mixRequest(dirs, tc.w, B, D, []int{0, 1, 2, 3}, tc.policy, tc.stop)
		full := readMixture(t, p, old)
		k := 1 + r.IntN(len(full)-1)
		name := fmt.Sprintf("seed %d %v/%s/%s switch at %d of %d", seed, tc.w, tc.policy, tc.stop.Rule, k, len(full))
		newReq := func(sl []int, start int) *transport.Request {
			req := mixRequest(dirs, tc.w, B, D2, sl, tc.policy, tc.stop)
			req.Elastic = &transport.Elastic{FromSlices: D, Step: k}
			req.Start.Step = start
			return req
		}
		all := newReq([]int{0, 1, 2, 3, 4, 5, 6, 7}, k)
		want := mixElasticModel(t, p, old, all, k)
		got := readMixture(t, p, all)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%s: the stream differs from the model:\n got %v\nwant %v", name, got, want)
		}
		lo := readMixture(t, p, newReq([]int{0, 1, 2, 3}, k))
		hi := readMixture(t, p, newReq([]int{4, 5, 6, 7}, k))
		for s := range got {
			if fmt.Sprint(append(slices.Clone(lo[s]), hi[s]...)) != fmt.Sprint(got[s]) {
				t.Fatalf("%s: step %d: two processes disagree with one", name, k+s)
			}
		}
		if k2 := k + len(got)/2; k2 > k {
			if tail := readMixture(t, p, newReq([]int{0, 1, 2, 3, 4, 5, 6, 7}, k2)); fmt.Sprint(tail) != fmt.Sprint(got[k2-k:]) {
				t.Fatalf("%s: resumed at %d: differs from the run", name, k2)
			}
		}
		seen := map[mixRow]int{}
		var delivered [3]int64
		for _, st := range append(slices.Clone(full[:k]), got...) {
			for _, sl := range st {
				for _, x := range sl {
					if x.src >= 0 {
						seen[x]++
						delivered[x.src]++
					}
				}
			}
		}
		info, err := p.Info(ctx, all)
		if err != nil {
			t.Fatal(err)
		}
		if info.StepsPerEpoch != int64(k+len(got)) {
			t.Errorf("%s: Info says %d steps, the run has %d", name, info.StepsPerEpoch, k+len(got))
		}
		for i, si := range info.Mixture.Sources {
			if si.DeliveredRows != delivered[i] {
				t.Errorf("%s: source %d delivered %d rows, Info says %d", name, i, delivered[i], si.DeliveredRows)
			}
			var distinct int64
			for x, c := range seen {
				if x.src == int64(i) {
					distinct++
					if c > 1 && tc.stop.Rule == "first_exhausted" {
						t.Errorf("%s: source %d row %d delivered %d times across the switch", name, i, x.id, c)
					}
				}
			}
			if tc.stop.Rule == "all_exhausted" && distinct != si.Rows {
				t.Errorf("%s: all_exhausted: source %d delivered %d distinct rows of %d", name, i, distinct, si.Rows)
			}
		}
	}
}
