package batching

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"
)

// tagRow is a row of a source and the source epoch it is delivered in.
type tagRow struct {
	id    int64
	epoch int
}

// elasticModel is the contract's sequence of each source on each new slice
// from an elastic switch on, computed from the plans' SourceRow alone: the
// rows of the epochs some old slice had begun that no old slice had
// delivered (epoch, old stream, row), split into D' contiguous streams,
// then the new plan's streams from the next epoch on.
type elasticModel struct {
	before [][]tagRow   // [source]: rows delivered before the switch
	seq    [][][]tagRow // [source][new slice]
	remLen [][]int      // [source][new slice]: rows of the remainder stream
	begun  []int        // [source]: the last epoch some old slice had begun (-1: none)
}

func newElasticModel(oldM, newM *Mixture, ds []dataset, base []int64, steps int) *elasticModel {
	md := &elasticModel{}
	idOf := func(p *Plan, i, e, d int, row int64) int64 {
		g, rr, ok := p.SourceRow(e, d, row)
		if !ok {
			panic(fmt.Sprintf("no row %d of stream %d epoch %d", row, d, e))
		}
		return int64(i)*srcOffset + ds[i].first[g] + rr
	}
	for i := range ds {
		oldP, newP := oldM.Source(i), newM.Source(i)
		pos := base[i]
		var before []tagRow
		last := -1
		for d := range oldM.Config().D {
			l := oldP.StreamLen(d)
			for q := int64(0); q < pos; q++ {
				before = append(before, tagRow{idOf(oldP, i, int(q/l), d, q%l), int(q / l)})
			}
			if pos > 0 {
				last = max(last, int((pos-1)/l))
			}
		}
		var rem []tagRow
		for e := 0; e <= last; e++ {
			for d := range oldM.Config().D {
				l := oldP.StreamLen(d)
				for row := int64(0); row < l; row++ {
					if int64(e)*l+row >= pos {
						rem = append(rem, tagRow{idOf(oldP, i, e, d, row), e})
					}
				}
			}
		}
		dn := newM.Config().D
		// Enough rows for every step: b' rows per step at most.
		need := int64(steps+1) * int64(newM.SliceRows())
		var seqs [][]tagRow
		var lens []int
		for d := range dn {
			lo, hi := d*(len(rem)/dn)+min(d, len(rem)%dn), (d+1)*(len(rem)/dn)+min(d+1, len(rem)%dn)
			s := slices.Clone(rem[lo:hi])
			lens = append(lens, len(s))
			l := newP.StreamLen(d)
			for e := last + 1; int64(len(s)) < need; e++ {
				for row := int64(0); row < l; row++ {
					s = append(s, tagRow{idOf(newP, i, e, d, row), e})
				}
			}
			seqs = append(seqs, s)
		}
		md.before = append(md.before, before)
		md.seq = append(md.seq, seqs)
		md.remLen = append(md.remLen, lens)
		md.begun = append(md.begun, last)
	}
	return md
}

// randomElasticMixture draws a mixture for D and D' (B a multiple of both)
// with sources of at least max(D, D') rows.
func randomElasticMixture(r *rand.Rand) (ds []dataset, cfg MixtureConfig, srcCfgs []Config, newD int) {
	degrees := []int{1, 2, 3, 4, 6, 8}
	d := degrees[r.IntN(len(degrees))]
	newD = degrees[r.IntN(len(degrees))]
	for newD == d {
		newD = degrees[r.IntN(len(degrees))]
	}
	unit := d * newD / gcd(d, newD)
	n := r.IntN(3) + 1
	cfg = MixtureConfig{GlobalBatch: unit * (r.IntN(3) + 1), D: d, Seed: r.Uint64(), Policy: Policy(r.IntN(3)), Stop: StopRule(r.IntN(3))}
	if cfg.Stop == StopNumSteps {
		cfg.NumSteps = r.IntN(60) + 1
	}
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
		cfg.Spans = append(cfg.Spans, WeightSpan{FromStep: r.IntN(15) + 1, Weights: weights()})
	}
	for range n {
		rows := randomRows(r)
		var tot int64
		for _, v := range rows {
			tot += v
		}
		if tot < int64(max(d, newD)) {
			rows = append(rows, int64(max(d, newD))+int64(r.IntN(30)))
		}
		ds = append(ds, newDataset(rows, 8))
		var w int64
		if r.IntN(2) == 0 {
			w = int64(r.IntN(10) + 1)
		}
		srcCfgs = append(srcCfgs, SourceConfig(d, r.Uint64(), r.IntN(2) == 0, w))
	}
	return ds, cfg, srcCfgs, newD
}

// sourcePlans plans every source with d slices.
func sourcePlans(t *testing.T, ds []dataset, cfgs []Config, d int) []*Plan {
	var out []*Plan
	for i := range ds {
		c := cfgs[i]
		c.GlobalBatch, c.D = d, d
		p, err := NewPlan(ds[i].rgs, c)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, p)
	}
	return out
}

// TestMixtureElasticProperties: a random mixture saved at a random step k
// with D slices and resumed with D' (same B) delivers, from k on, the
// contract's sequences (elasticModel): every row of the sources' begun
// epochs not delivered before k exactly once across the switch (all of
// them once a source's remainder is read), later epochs as the plan with
// D' numbers them; every step full (but a padded last one), each source's
// rows per slice within one row of its quota from k on (the span the
// switch starts); the same slices whether one run or two "processes"
// serve them; a resume inside gives the suffix; the stop rules keep their
// promises about the first epochs.
//
// Length: the checks of one random switch, in the order a reader expects
// them.
func TestMixtureElasticProperties(t *testing.T) {
	seed := testSeed(t)
	r := rand.New(rand.NewPCG(seed, 0xe1a5))
	trials, ran := 200, 0
	if testing.Short() {
		trials = 50
	}
	for trial := range trials {
		ds, cfg, cfgs, newD := randomElasticMixture(r)
		oldM, err := NewMixture(sourcePlans(t, ds, cfgs, cfg.D), cfg)
		if errors.Is(err, ErrIndivisible) || errors.Is(err, ErrNoSteps) || (errors.Is(err, ErrInvalidMixture) && cfg.Stop == StopAllExhausted) {
			continue
		}
		if err != nil {
			t.Fatalf("trial %d: %v", trial, err)
		}
		k := r.IntN(oldM.Steps())
		ncfg := cfg
		ncfg.D, ncfg.Elastic = newD, &Switch{FromD: cfg.D, Step: k}
		ctx := fmt.Sprintf("seed %d trial %d: %s -> D'=%d at step %d", seed, trial, fmtMix(cfg), newD, k)
		mk := func() *Mixture {
			m, err := NewMixture(sourcePlans(t, ds, cfgs, newD), ncfg)
			if err != nil {
				return nil
			}
			return m
		}
		m := mk()
		if m == nil {
			_, err := NewMixture(sourcePlans(t, ds, cfgs, newD), ncfg)
			if errors.Is(err, ErrIndivisible) || errors.Is(err, ErrNoSteps) || errors.Is(err, ErrInvalidMixture) {
				continue // raise with a partial step, drop with none, all_exhausted with weight 0
			}
			t.Fatalf("%s: %v", ctx, err)
		}
		if m.Steps() <= k {
			continue
		}
		ran++
		walk := m.Composition().Walk()
		if err := walk.Skip(k); err != nil {
			t.Fatal(err)
		}
		base := slices.Clone(walk.Cum())
		md := newElasticModel(oldM, m, ds, base, m.Steps())
		mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
		run := newMixRun(t, m, ds, k, mem)
		pad := cfg.Policy == Pad
		counts := make([]int64, m.Sources())
		var all [][][]sliceRow
		after := make([][]tagRow, m.Sources())
		delivered := make([][]int64, m.Sources()) // [source][slice]: rows from the switch on
		for i := range delivered {
			delivered[i] = make([]int64, newD)
		}
		firstDone := -1 // the step by which every source delivered its first epoch
		quota := newQuotaCheck(ncfg.Spans, k, m.Sources(), newD, m.SliceRows())
		for s := k; s < m.Steps(); s++ {
			pos := slices.Clone(walk.Cum())
			if err := walk.Next(counts); err != nil {
				t.Fatal(err)
			}
			var step [][]sliceRow
			for d, rec := range run.step() {
				rows := rowsOfSlice(t, rec, pad)
				rec.Release()
				at := 0
				for _, i := range m.Order(s, d) {
					real := m.Real(s, int(i), d, pos[i], counts[i])
					if real < counts[i] && (!pad || s != m.Steps()-1) {
						t.Fatalf("%s: step %d slice %d source %d: %d real rows of %d outside a padded last step", ctx, s, d, i, real, counts[i])
					}
					for q := pos[i] - base[i]; q < pos[i]-base[i]+real; q++ {
						want := md.seq[i][d][q]
						if rows[at].id != want.id || rows[at].src != i {
							t.Fatalf("%s: step %d slice %d row %d: id %d source %d, want %d source %d", ctx, s, d, at, rows[at].id, rows[at].src, want.id, i)
						}
						after[i] = append(after[i], want)
						delivered[i][d]++
						at++
					}
				}
				for ; at < len(rows); at++ {
					if rows[at].id != -1 {
						t.Fatalf("%s: step %d slice %d row %d: %+v, want padding", ctx, s, d, at, rows[at])
					}
				}
				step = append(step, rows)
			}
			all = append(all, step)
			if cfg.Stop == StopAllExhausted && firstDone < 0 && firstEpochsDone(md, after, ds) {
				firstDone = s
			}
			if !(pad && s == m.Steps()-1 && m.PaddedRows() > 0) {
				quota.step(t, ctx, s, step)
			}
		}
		run.release()
		mem.AssertSize(t, 0)
		if cfg.Stop == StopAllExhausted && firstDone != m.Steps()-1 {
			t.Fatalf("%s: all_exhausted: %d steps, but every first epoch was delivered by step %d", ctx, m.Steps(), firstDone)
		}
		checkElasticOnce(t, ctx, md, after, delivered, ds, cfg.Stop)
		// Two processes, each serving half of the slices, from their own plan.
		if trial%3 == 0 && newD > 1 {
			for _, part := range [][]int{evens(newD, 0), evens(newD, 1)} {
				pm := mk()
				if pm.Steps() != m.Steps() {
					t.Fatalf("%s: a second plan has %d steps, the first %d", ctx, pm.Steps(), m.Steps())
				}
				pr := newMixRunSlices(t, pm, ds, k, mem, part)
				for s := k; s < m.Steps(); s++ {
					for j, rec := range pr.step() {
						got := rowsOfSlice(t, rec, pad)
						rec.Release()
						if fmt.Sprint(got) != fmt.Sprint(all[s-k][part[j]]) {
							t.Fatalf("%s: process of slices %v, step %d slice %d = %v, want %v", ctx, part, s, part[j], got, all[s-k][part[j]])
						}
					}
				}
				pr.release()
			}
		}
		// A resume inside the run after the switch gives its suffix.
		if m.Steps() > k+1 {
			k2 := k + 1 + r.IntN(m.Steps()-k-1)
			res := newMixRun(t, m, ds, k2, mem)
			for s := k2; s < m.Steps(); s++ {
				for d, rec := range res.step() {
					got := rowsOfSlice(t, rec, pad)
					rec.Release()
					if fmt.Sprint(got) != fmt.Sprint(all[s-k][d]) {
						t.Fatalf("%s: resumed at %d, step %d slice %d = %v, want %v", ctx, k2, s, d, got, all[s-k][d])
					}
				}
			}
			res.release()
		}
		mem.AssertSize(t, 0)
	}
	if ran < trials/4 {
		t.Fatalf("seed %d: only %d of %d trials ran a switch", seed, ran, trials)
	}
}

// firstEpochsDone reports whether every source has delivered every row of
// its first epoch (before the switch or after).
func firstEpochsDone(md *elasticModel, after [][]tagRow, ds []dataset) bool {
	for i := range ds {
		var n int64
		for _, g := range ds[i].rgs {
			n += g.Rows
		}
		seen := map[int64]bool{}
		for _, x := range append(slices.Clone(md.before[i]), after[i]...) {
			if x.epoch == 0 {
				seen[x.id] = true
			}
		}
		if int64(len(seen)) != n {
			return false
		}
	}
	return true
}

func evens(n, first int) []int {
	var out []int
	for d := first; d < n; d += 2 {
		out = append(out, d)
	}
	return out
}

// checkElasticOnce: the rows of each source epoch some old slice had begun
// are delivered at most once across the switch, all of them when every new
// slice read its whole remainder; under all_exhausted every source's first
// epoch is delivered whole; under first_exhausted no row past a source's
// first epoch is.
func checkElasticOnce(t *testing.T, ctx string, md *elasticModel, after [][]tagRow, delivered [][]int64, ds []dataset, stop StopRule) {
	t.Helper()
	for i := range md.seq {
		var n int64
		for _, g := range ds[i].rgs {
			n += g.Rows
		}
		seen := map[tagRow]bool{}
		perEpoch := map[int]int64{}
		for _, x := range append(slices.Clone(md.before[i]), after[i]...) {
			if seen[x] {
				t.Fatalf("%s: source %d row %d delivered twice in epoch %d", ctx, i, x.id, x.epoch)
			}
			seen[x] = true
			perEpoch[x.epoch]++
			if stop == StopFirstExhausted && x.epoch > 0 {
				t.Fatalf("%s: first_exhausted: source %d delivered row %d of epoch %d", ctx, i, x.id, x.epoch)
			}
		}
		readAll := true
		for d, l := range md.remLen[i] {
			readAll = readAll && delivered[i][d] >= int64(l)
		}
		for e := 0; readAll && e <= md.begun[i]; e++ {
			if perEpoch[e] != n {
				t.Fatalf("%s: source %d read its remainder, but epoch %d delivered %d of %d rows", ctx, i, e, perEpoch[e], n)
			}
		}
		if stop == StopAllExhausted && perEpoch[0] != n {
			t.Fatalf("%s: all_exhausted: source %d delivered %d of the %d rows of its first epoch", ctx, i, perEpoch[0], n)
		}
	}
}

// quotaCheck holds every slice's rows of each source within one row of
// the quota of the weight span in force, counted from the switch (or the
// later span's start).
type quotaCheck struct {
	spans []WeightSpan
	b     int
	from  int       // step the current count starts at
	span  int       // index into spans
	cnt   [][]int64 // [slice][source]
}

func newQuotaCheck(spans []WeightSpan, k, n, d, b int) *quotaCheck {
	q := &quotaCheck{spans: spans, b: b, from: k}
	for q.span+1 < len(spans) && spans[q.span+1].FromStep <= k {
		q.span++
	}
	q.cnt = make([][]int64, d)
	for i := range q.cnt {
		q.cnt[i] = make([]int64, n)
	}
	return q
}

func (q *quotaCheck) step(t *testing.T, ctx string, s int, step [][]sliceRow) {
	t.Helper()
	if q.span+1 < len(q.spans) && q.spans[q.span+1].FromStep == s {
		q.span++
		q.from = s
		for _, c := range q.cnt {
			clear(c)
		}
	}
	u, err := QuantizeWeights(q.spans[q.span].Weights)
	if err != nil {
		t.Fatal(err)
	}
	var total uint64
	for _, v := range u {
		total += v
	}
	k := float64(s - q.from + 1)
	for d, rows := range step {
		for _, x := range rows {
			if x.src >= 0 {
				q.cnt[d][x.src]++
			}
		}
		var sum int64
		for i, c := range q.cnt[d] {
			quota := k * float64(q.b) * float64(u[i]) / float64(total)
			if math.Abs(float64(c)-quota) >= 1+1e-6 {
				t.Fatalf("%s: step %d slice %d: source %d has %d rows since step %d, quota %.3f", ctx, s, d, i, c, q.from, quota)
			}
			sum += c
		}
		if sum != int64(k)*int64(q.b) {
			t.Fatalf("%s: step %d slice %d: %d rows since step %d, want %d", ctx, s, d, sum, q.from, int64(k)*int64(q.b))
		}
	}
}

func TestMixtureElasticErrors(t *testing.T) {
	ds := newDataset([]int64{10, 10}, 1)
	cfg := MixtureConfig{GlobalBatch: 4, D: 2, Policy: Pad, Stop: StopNumSteps, NumSteps: 5,
		Spans: []WeightSpan{{Weights: []float64{1}}}}
	plans := sourcePlans(t, []dataset{ds}, []Config{SourceConfig(2, 1, false, 0)}, 2)
	for _, c := range []struct {
		sw   Switch
		want error
	}{
		{Switch{FromD: 3, Step: 1}, ErrInvalidConfig},
		{Switch{FromD: 4, Epoch: 1, Step: 1}, ErrInvalidPosition},
		{Switch{FromD: 4, Step: -1}, ErrInvalidPosition},
	} {
		cfg.Elastic = &c.sw
		if _, err := NewMixture(plans, cfg); !errors.Is(err, c.want) {
			t.Errorf("NewMixture(switch %+v) = %v, want %v", c.sw, err, c.want)
		}
	}
	cfg.Elastic = &Switch{FromD: 4, Step: 2}
	m, err := NewMixture(plans, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.NewCursor(0, 0, 0, nil); !errors.Is(err, ErrInvalidPosition) && m.base[0] > 0 {
		t.Errorf("a cursor before the switch = %v, want ErrInvalidPosition", err)
	}
}
