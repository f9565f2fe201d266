package batching

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// reweightRun is a random run of a mixture resumed several times with
// reweight (sources removed, added, replaced; weights changed) and at most
// one elastic switch, modelled the way the client builds its tickets: every
// span of the history carries the positions of the sources then in the
// ticket (0 for one added later), by source identity.
type reweightRun struct {
	r      *rand.Rand
	ds     map[int]dataset
	cfgs   map[int]Config // by identity, D set per plan
	ids    []int          // identities of the ticket's sources, in order
	hist   []idSpan
	pos    map[int]int64 // rows per slice delivered so far, by identity
	d      int
	sw     *Switch
	swPos  map[int]int64 // pos at the switch
	nextID int
}

// idSpan is a weight span by source identity.
type idSpan struct {
	from int
	w    map[int]float64
	pos  map[int]int64
}

func (x *reweightRun) addSource() int {
	id := x.nextID
	x.nextID++
	rows := randomRows(x.r)
	var tot int64
	for _, v := range rows {
		tot += v
	}
	if tot < 8 {
		rows = append(rows, 8+int64(x.r.IntN(30)))
	}
	x.ds[id] = newDataset(rows, 8)
	var w int64
	if x.r.IntN(2) == 0 {
		w = int64(x.r.IntN(10) + 1)
	}
	x.cfgs[id] = SourceConfig(1, x.r.Uint64(), x.r.IntN(2) == 0, w)
	return id
}

// weights draws weights for the ticket's sources, by identity.
func (x *reweightRun) weights() map[int]float64 {
	w := randomWeights(x.r, len(x.ids))
	out := map[int]float64{}
	for i, id := range x.ids {
		out[id] = w[i]
	}
	return out
}

// spans returns the ticket's spans: the history mapped onto the current
// sources (weight and position 0 for a source added later, a removed
// source absent), a span at the switch if the history has none there.
func (x *reweightRun) spans(withPos bool) []WeightSpan {
	var out []WeightSpan
	for _, h := range x.hist {
		sp := WeightSpan{FromStep: h.from}
		for _, id := range x.ids {
			sp.Weights = append(sp.Weights, h.w[id])
			if withPos {
				sp.Start = append(sp.Start, h.pos[id])
			}
		}
		out = append(out, sp)
	}
	return out
}

func (x *reweightRun) plans(t *testing.T) []*Plan {
	var ds []dataset
	var cfgs []Config
	for _, id := range x.ids {
		ds, cfgs = append(ds, x.ds[id]), append(cfgs, x.cfgs[id])
	}
	return sourcePlans(t, ds, cfgs, x.d)
}

// reweight resumes at step: some sources removed, some added (a removed one
// may come back as a new source), new weights from step; with elastic a
// switch to newD at step too.
func (x *reweightRun) reweight(step int) {
	var keep []int
	for _, id := range x.ids {
		if x.r.IntN(3) != 0 {
			keep = append(keep, id)
		}
	}
	for range x.r.IntN(3) {
		keep = append(keep, x.addSource())
	}
	if len(keep) == 0 {
		keep = append(keep, x.addSource())
	}
	x.r.Shuffle(len(keep), func(i, j int) { keep[i], keep[j] = keep[j], keep[i] })
	x.ids = keep
	x.insertSwitchSpan()
	pos := map[int]int64{}
	for _, id := range x.ids {
		pos[id] = x.pos[id]
	}
	if n := len(x.hist); x.hist[n-1].from == step {
		x.hist = x.hist[:n-1] // a second reweight at the same step replaces the first
	}
	x.hist = append(x.hist, idSpan{from: step, w: x.weights(), pos: pos})
}

// insertSwitchSpan adds a span at the switch (the weights of the span
// holding it, the positions there) when the history has none: the client
// does so at a reweight after the switch.
func (x *reweightRun) insertSwitchSpan() {
	if x.sw == nil || x.sw.Step == 0 {
		return
	}
	j := len(x.hist) - 1
	for x.hist[j].from > x.sw.Step {
		j--
	}
	if x.hist[j].from == x.sw.Step {
		return
	}
	sp := idSpan{from: x.sw.Step, w: x.hist[j].w, pos: x.swPos}
	x.hist = slices.Insert(x.hist, j+1, sp)
}

// TestMixtureReweightPositions: a mixture resumed with reweight=True, any
// number of times, sources removed, added and replaced at random steps,
// with and without an elastic switch (alone or with a reweight): at every
// resume every source the ticket names stands exactly at the rows per slice
// it had delivered (a new one at 0), so it continues from there, nothing
// replayed or skipped; across the switch the remainder starts from the
// positions at the switch. Without a removed source the stop rules give the
// same steps whether walked from step 0 or from the positions.
//
// Length: one random run and its checks at every resume.
func TestMixtureReweightPositions(t *testing.T) {
	seed := testSeed(t)
	r := rand.New(rand.NewPCG(seed, 0x4e77))
	trials := 150
	if testing.Short() {
		trials = 40
	}
	degrees := []int{1, 2, 3, 4, 6, 8}
	for trial := range trials {
		x := &reweightRun{r: r, ds: map[int]dataset{}, cfgs: map[int]Config{}, pos: map[int]int64{},
			d: degrees[r.IntN(len(degrees))]}
		B := 24 * (r.IntN(2) + 1)
		for range r.IntN(3) + 1 {
			x.ids = append(x.ids, x.addSource())
		}
		x.hist = []idSpan{{from: 0, w: x.weights(), pos: map[int]int64{}}}
		removed, step := false, 0
		for seg := range r.IntN(4) + 2 {
			ctx := fmt.Sprintf("seed %d trial %d segment %d (step %d, D=%d, switch %+v, sources %v)", seed, trial, seg, step, x.d, x.sw, x.ids)
			cfg := MixtureConfig{GlobalBatch: B, D: x.d, Seed: 7, Policy: Pad, Stop: StopNumSteps,
				NumSteps: step + 1 + r.IntN(25), Spans: x.spans(true), Elastic: x.sw}
			m, err := NewMixture(x.plans(t), cfg)
			if err != nil {
				t.Fatalf("%s: %v", ctx, err)
			}
			w := m.Composition().Walk()
			if err := w.Skip(step); err != nil {
				t.Fatalf("%s: %v", ctx, err)
			}
			for i, id := range x.ids {
				if got := w.Cum()[i]; got != x.pos[id] {
					t.Fatalf("%s: source %d (identity %d) resumes at row %d of its sequence per slice, delivered %d", ctx, i, id, got, x.pos[id])
				}
				if x.sw != nil && m.base[i] != x.swPos[id] {
					t.Fatalf("%s: source %d (identity %d) stood at %d at the switch, the plan has %d", ctx, i, id, x.swPos[id], m.base[i])
				}
			}
			if !removed {
				checkStopsAgree(t, ctx, x, B, step)
			}
			counts := make([]int64, len(x.ids))
			for range 1 + r.IntN(m.Steps()-step) {
				if err := w.Next(counts); err != nil {
					t.Fatalf("%s: %v", ctx, err)
				}
				for i, id := range x.ids {
					x.pos[id] += counts[i]
				}
			}
			step = w.Step()
			before := slices.Clone(x.ids)
			if x.sw == nil && r.IntN(3) == 0 {
				nd := degrees[r.IntN(len(degrees))]
				if nd != x.d {
					x.sw, x.swPos, x.d = &Switch{FromD: x.d, Step: step}, map[int]int64{}, nd
					for id, v := range x.pos {
						x.swPos[id] = v
					}
					if r.IntN(2) == 0 {
						continue // elastic alone: the ticket keeps its history
					}
				}
			}
			x.reweight(step)
			// Walked from step 0, the history is the run only while every
			// source is there in its order (ties go to the lower index).
			var kept []int
			for _, id := range x.ids {
				if slices.Contains(before, id) {
					kept = append(kept, id)
				}
			}
			removed = removed || len(kept) != len(before) || !slices.Equal(kept, before)
		}
	}
}

// checkStopsAgree: with no source removed or reordered, the history walked from step 0
// (no positions) and from the last positions give the same steps under
// every stop rule, when the stop is not before the resume step.
func checkStopsAgree(t *testing.T, ctx string, x *reweightRun, B, step int) {
	t.Helper()
	for _, stop := range []StopRule{StopFirstExhausted, StopAllExhausted} {
		for _, pol := range []Policy{Drop, Pad} {
			cfg := MixtureConfig{GlobalBatch: B, D: x.d, Seed: 7, Policy: pol, Stop: stop, Spans: x.spans(false), Elastic: x.sw}
			ref, err := NewMixture(x.plans(t), cfg)
			if err != nil || ref.Steps() <= step {
				continue
			}
			cfg.Spans = x.spans(true)
			m, err := NewMixture(x.plans(t), cfg)
			if err != nil {
				if errors.Is(err, ErrInvalidMixture) && stop == StopAllExhausted {
					continue
				}
				t.Fatalf("%s %v %v: from step 0: %d steps; from the positions: %v", ctx, stop, pol, ref.Steps(), err)
			}
			if m.Steps() != ref.Steps() || !slices.Equal(m.final, ref.final) || m.PaddedRows() != ref.PaddedRows() {
				t.Fatalf("%s %v %v: from step 0: %d steps, counts %v, %d padded; from the positions: %d steps, %v, %d padded",
					ctx, stop, pol, ref.Steps(), ref.final, ref.PaddedRows(), m.Steps(), m.final, m.PaddedRows())
			}
		}
	}
}

// TestCompositionStartsAtPositions: a walk begins at the last span carrying
// positions, standing at them; the spans before are not walked (all-zero
// weights there, left by a removed source, are accepted; malformed ones are
// not); steps before it are refused; so are positions of the wrong length
// or not 0 at step 0.
func TestCompositionStartsAtPositions(t *testing.T) {
	c, err := NewComposition(4, []WeightSpan{{Weights: []float64{0, 0}}, {FromStep: 2, Weights: []float64{1, 0}},
		{FromStep: 6, Weights: []float64{1, 3}, Start: []int64{13, 0}}})
	if err != nil {
		t.Fatal(err)
	}
	w := c.Walk()
	if w.Step() != 6 || !slices.Equal(w.Cum(), []int64{13, 0}) || c.Origin() != 6 {
		t.Fatalf("walk starts at step %d counts %v, want step 6 at [13 0]", w.Step(), w.Cum())
	}
	counts := make([]int64, 2)
	if err := w.Next(counts); err != nil || !slices.Equal(w.Cum(), []int64{14, 3}) {
		t.Fatalf("first step from the positions: %v %v, want counts [14 3]", err, w.Cum())
	}
	if err := c.Walk().Skip(5); !errors.Is(err, ErrInvalidPosition) {
		t.Errorf("skip to a step before the positions: %v, want ErrInvalidPosition", err)
	}
	if _, err := c.CumAt(3); !errors.Is(err, ErrInvalidPosition) {
		t.Errorf("counts before the positions: %v, want ErrInvalidPosition", err)
	}
	for name, spans := range map[string][]WeightSpan{
		"negative weight before": {{Weights: []float64{-1, 1}}, {FromStep: 2, Weights: []float64{1, 1}, Start: []int64{1, 1}}},
		"short positions":        {{Weights: []float64{1, 1}}, {FromStep: 2, Weights: []float64{1, 1}, Start: []int64{1}}},
		"positions at step 0":    {{Weights: []float64{1, 1}, Start: []int64{0, 1}}},
		"all zero from there":    {{Weights: []float64{1, 1}}, {FromStep: 2, Weights: []float64{0, 0}, Start: []int64{1, 1}}},
	} {
		if _, err := NewComposition(4, spans); !errors.Is(err, ErrInvalidWeights) {
			t.Errorf("%s: %v, want ErrInvalidWeights", name, err)
		}
	}
	if _, err := NewSwitchedComposition(2, 4, 3, []WeightSpan{{Weights: []float64{1}}, {FromStep: 5, Weights: []float64{1}, Start: []int64{6}}}); !errors.Is(err, ErrInvalidPosition) {
		t.Errorf("a switch before the positions without a span there: %v, want ErrInvalidPosition", err)
	}
}
