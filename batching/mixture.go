package batching

import (
	"cmp"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
)

// StopRule says when a mixture ends.
type StopRule int

const (
	// StopNumSteps ends after a given number of steps; sources that run out
	// start their next epoch.
	StopNumSteps StopRule = iota
	// StopFirstExhausted ends at the first step in which some source would
	// need rows past its first epoch on some slice. Under Drop that step is
	// not delivered; under Pad it is, its missing rows padded and masked;
	// Raise refuses the plan when that step would hold real rows.
	StopFirstExhausted
	// StopAllExhausted ends after the first step by which every source has
	// delivered its whole first epoch on every slice; sources that run out
	// earlier (and the last one, within its last step) continue with their
	// next epoch, so no step is partial.
	StopAllExhausted
)

var stopNames = [...]string{StopNumSteps: "num_steps", StopFirstExhausted: "first_exhausted", StopAllExhausted: "all_exhausted"}

// String returns the rule's name as ParseStopRule accepts it.
func (s StopRule) String() string {
	if s >= 0 && int(s) < len(stopNames) {
		return stopNames[s]
	}
	return fmt.Sprintf("StopRule(%d)", int(s))
}

// ParseStopRule returns the rule named s: "num_steps", "first_exhausted" or
// "all_exhausted". Any other string is an error wrapping ErrInvalidMixture.
func ParseStopRule(s string) (StopRule, error) {
	for i, n := range stopNames {
		if n == s {
			return StopRule(i), nil
		}
	}
	return 0, fmt.Errorf("%w: stop rule %q: valid values are %s", ErrInvalidMixture, s, strings.Join(stopNames[:], ", "))
}

// MaxMixtureSteps bounds the steps a stop rule may take to come (the plan
// walks them once).
const MaxMixtureSteps = 1 << 25

// MixtureConfig holds what a mixture plan depends on beyond its sources'
// plans.
type MixtureConfig struct {
	GlobalBatch, D int
	// Seed orders the sources' rows inside each slice.
	Seed   uint64
	Policy Policy
	Stop   StopRule
	// NumSteps is the number of steps under StopNumSteps (> 0); 0 otherwise.
	NumSteps int
	// Spans are the weights, from step 0 on (several after a reweighting).
	Spans []WeightSpan
	// Elastic, when set, says that steps [0, Elastic.Step) ran with
	// Elastic.FromD slices (Epoch 0; docs/CONTRACT-elastic.md, "Mixtures"):
	// the sources' begun epochs are re-split over D, and the composition
	// counts B/FromD rows per slice before the switch, B/D from it on.
	Elastic *Switch
}

// SourceConfig returns the Config of a mixture source's plan: D streams of
// the source per source epoch, shuffled with the source's own seed (see
// SourceSeed), cut into slices of one row (the mixture takes rows from it
// with Cutter.Take).
func SourceConfig(d int, seed uint64, shuffleRowGroups bool, window int64) Config {
	return Config{GlobalBatch: d, D: d, Seed: seed, ShuffleRowGroups: shuffleRowGroups, Window: window, Policy: Pad}
}

// SourceSeed derives a source's seed from the mixture's seed and a key that
// names the source (its sorted dataset URIs), so that adding or removing
// another source does not change its order.
func SourceSeed(seed uint64, key string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(key))
	return deriveSeed(seed, domainSource, h.Sum64())
}

// Mixture is the plan of a weighted mixture of sources (DESIGN.md,
// "Mixtures"): slice d of every step takes, from each source i, the next
// c_i(step) rows of source i's stream d (epoch 0, then epoch 1, ...), the
// counts given by the Composition. It is immutable and safe for concurrent
// use.
type Mixture struct {
	cfg    MixtureConfig
	b      int64
	comp   *Composition
	src    []*Plan
	steps  int
	padEnd bool      // the last step is padded (StopFirstExhausted, Pad)
	final  []int64   // C_i(steps): rows per slice of source i over the run
	last   []int64   // C_i(steps-1)
	padded int64     // padding rows of the last step
	drop   int64     // rows of the exhausted sources' first epochs not delivered (Drop)
	real   [][]int64 // real rows per source and slice over the run (from the switch on)
	// base[i] is C_i at the elastic switch (0 without one); firstLeft[i][d]
	// the rows of source i's first epoch that slice d delivers from there
	// (its stream's length without a switch); rem[i] source i's remainder
	// (nil without a switch).
	base      []int64
	firstLeft [][]int64
	rem       []*sourceRemainder
}

// NewMixture checks the sources' plans (made with SourceConfig and the same
// D) and cfg, and plans the mixture: the composition and the number of
// steps, from row counts alone.
//
// Length: the stop rules' walk and its checks, each a few lines, read
// best in one place.
func NewMixture(sources []*Plan, cfg MixtureConfig) (*Mixture, error) {
	if err := (Config{GlobalBatch: cfg.GlobalBatch, D: cfg.D, Policy: cfg.Policy}).Validate(); err != nil {
		return nil, err
	}
	switch {
	case cfg.Stop < StopNumSteps || cfg.Stop > StopAllExhausted:
		return nil, fmt.Errorf("%w: stop rule %v", ErrInvalidMixture, cfg.Stop)
	case cfg.Stop == StopNumSteps && (cfg.NumSteps <= 0 || cfg.NumSteps > MaxMixtureSteps):
		return nil, fmt.Errorf("%w: stop num_steps=%d, must be in [1, %d]", ErrInvalidMixture, cfg.NumSteps, MaxMixtureSteps)
	case cfg.Stop != StopNumSteps && cfg.NumSteps != 0:
		return nil, fmt.Errorf("%w: num_steps=%d is set with stop rule %v", ErrInvalidMixture, cfg.NumSteps, cfg.Stop)
	}
	if err := cfg.checkSwitch(); err != nil {
		return nil, err
	}
	b := cfg.GlobalBatch / cfg.D
	bOld, at := b, 0
	if cfg.Elastic != nil {
		bOld, at = cfg.GlobalBatch/cfg.Elastic.FromD, cfg.Elastic.Step
	}
	comp, err := NewSwitchedComposition(bOld, b, at, cfg.Spans)
	if err != nil {
		return nil, err
	}
	if comp.Sources() != len(sources) {
		return nil, fmt.Errorf("%w: %d weights for %d sources", ErrInvalidWeights, comp.Sources(), len(sources))
	}
	m := &Mixture{cfg: cfg, b: int64(b), comp: comp, src: sources}
	for i, p := range sources {
		if p == nil || p.cfg.D != cfg.D || p.b != 1 {
			return nil, fmt.Errorf("%w: source %d: its plan is not a source plan with D=%d (SourceConfig)", ErrInvalidMixture, i, cfg.D)
		}
		if p.n < int64(cfg.D) {
			return nil, fmt.Errorf("%w: source %d has %d rows, fewer than the %d slices: every slice takes rows of every source, so each source needs at least D rows",
				ErrInvalidMixture, i, p.n, cfg.D)
		}
	}
	if err := m.planSwitch(); err != nil {
		return nil, err
	}
	if err := m.planStop(); err != nil {
		return nil, err
	}
	return m, nil
}

// over reports whether source i, at row cum of its sequence before step,
// has run past its first epoch on some slice; done whether it has delivered
// all of its first epoch on every slice. Before an elastic switch the old
// slices count; from it on, the rows of the first epoch that the new slices
// deliver after the switch.
func (m *Mixture) over(i, step int, cum int64) bool {
	if sw := m.cfg.Elastic; sw != nil && step < sw.Step {
		return cum > m.rem[i].old.lens[sw.FromD-1]
	}
	return slices.ContainsFunc(m.firstLeft[i], func(f int64) bool { return cum-m.base[i] > f })
}

func (m *Mixture) done(i, step int, cum int64) bool {
	if sw := m.cfg.Elastic; sw != nil && step < sw.Step {
		return cum >= m.rem[i].old.lens[0]
	}
	return !slices.ContainsFunc(m.firstLeft[i], func(f int64) bool { return cum-m.base[i] < f })
}

// planStop walks the composition to the stop and records the counts there.
//
// Length: one walk with the three rules' end conditions and the Pad and
// Raise cases of the first-exhausted rule.
func (m *Mixture) planStop() error {
	n := len(m.src)
	w := m.comp.Walk()
	if o := w.Step(); m.cfg.Stop == StopNumSteps && m.cfg.NumSteps < o {
		return fmt.Errorf("%w: stop num_steps=%d is before step %d, where the weight history resumes: nothing left to deliver", ErrInvalidMixture, m.cfg.NumSteps, o)
	}
	counts := make([]int64, n)
	prev := slices.Clone(w.Cum())
	for {
		k := w.Step()
		cum := w.Cum()
		done := false
		switch m.cfg.Stop {
		case StopNumSteps:
			done = k == m.cfg.NumSteps
		case StopFirstExhausted:
			for i := range cum {
				done = done || m.over(i, k, cum[i])
			}
		case StopAllExhausted:
			done = true
			for i := range cum {
				done = done && m.done(i, k, cum[i])
			}
		}
		if sw := m.cfg.Elastic; done && sw != nil && k < sw.Step && m.cfg.Stop != StopNumSteps {
			return fmt.Errorf("%w: the mixture stops (%v) at step %d with D=%d, before the elastic switch at step %d", ErrInvalidPosition, m.cfg.Stop, k, sw.FromD, sw.Step)
		}
		if done {
			break
		}
		if k >= MaxMixtureSteps || (m.cfg.Stop == StopAllExhausted && k >= m.comp.LastSpanStart() && m.neverEnds(cum) != "") {
			return fmt.Errorf("%w: the mixture does not stop (%v) within %d steps%s", ErrInvalidMixture, m.cfg.Stop, MaxMixtureSteps, cmp.Or(m.neverEnds(cum), ": raise the weights of the small sources or use stop num_steps"))
		}
		copy(prev, cum)
		if err := w.Next(counts); err != nil {
			return err
		}
	}
	m.steps = w.Step()
	m.final = append([]int64(nil), w.Cum()...)
	m.last = prev
	if m.cfg.Stop == StopFirstExhausted {
		// Step steps-1 is the one that runs out. Which sources have rows
		// there they do not have?
		var short []string
		var padded int64
		for i := range m.final {
			var left int64
			for d := 0; d < m.cfg.D; d++ {
				l := m.base[i] + m.firstLeft[i][d]
				padded += max(0, m.final[i]-l)
				left += max(0, l-m.last[i])
			}
			if m.over(i, m.steps, m.final[i]) && left > 0 {
				short = append(short, fmt.Sprintf("source %d (%d rows of its first epoch left over the slices)", i, left))
				m.drop += left
			}
		}
		switch {
		case len(short) == 0 || m.cfg.Policy == Drop:
			m.steps-- // the last step holds no real row of the exhausted sources, or is dropped
			m.final = m.last
			if len(short) == 0 {
				m.drop = 0
			}
		case m.cfg.Policy == Pad:
			m.padEnd, m.padded, m.drop = true, padded, 0
		default:
			return fmt.Errorf("%w: stop first_exhausted ends in a partial step %d: %s; use policy drop (skip them) or pad (mask the missing rows)",
				ErrIndivisible, m.steps-1, strings.Join(short, ", "))
		}
		if m.steps == 0 {
			return fmt.Errorf("%w: the mixture runs out of a source in its first step (policy drop); use policy pad or a smaller global batch", ErrNoSteps)
		}
	}
	m.real = make([][]int64, n)
	for i := range m.real {
		m.real[i] = make([]int64, m.cfg.D)
		for d := range m.real[i] {
			m.real[i][d] = m.final[i] - m.base[i]
			if m.padEnd {
				m.real[i][d] = min(m.final[i], max(m.last[i], m.base[i]+m.firstLeft[i][d])) - m.base[i]
			}
		}
	}
	return nil
}

// neverEnds names the sources that keep a mixture from ending: those with
// weight 0 in the last span that have not finished (all_exhausted).
func (m *Mixture) neverEnds(cum []int64) string {
	var names []string
	for i := range cum {
		if !m.comp.Weight(i, MaxMixtureSteps) && !m.done(i, MaxMixtureSteps, cum[i]) {
			names = append(names, fmt.Sprintf("source %d", i))
		}
	}
	if len(names) == 0 {
		return ""
	}
	return fmt.Sprintf(": %s has weight 0 from step %d on and never finishes its first epoch", strings.Join(names, ", "), m.comp.LastSpanStart())
}

// Steps returns the number of steps of the mixture (one pass: the mixture's
// only epoch).
func (m *Mixture) Steps() int { return m.steps }

// SliceRows returns b = B/D.
func (m *Mixture) SliceRows() int { return int(m.b) }

// Sources returns the number of sources.
func (m *Mixture) Sources() int { return len(m.src) }

// Source returns source i's plan.
func (m *Mixture) Source(i int) *Plan { return m.src[i] }

// Config returns the mixture's configuration.
func (m *Mixture) Config() MixtureConfig { return m.cfg }

// Composition returns the per-step counts.
func (m *Mixture) Composition() *Composition { return m.comp }

// PaddedRows returns the padding rows of the last step (Pad,
// StopFirstExhausted); 0 otherwise.
func (m *Mixture) PaddedRows() int64 { return m.padded }

// DroppedRows returns the rows of the first epochs of the sources that run
// out which the dropped last step would have held (Drop,
// StopFirstExhausted); 0 otherwise.
func (m *Mixture) DroppedRows() int64 { return m.drop }

// SourceRows returns the real rows source i delivers over the whole mixture
// (all slices; those before an elastic switch on the old slices).
func (m *Mixture) SourceRows(i int) int64 {
	var n int64
	if sw := m.cfg.Elastic; sw != nil {
		n = int64(sw.FromD) * m.base[i]
	}
	for _, v := range m.real[i] {
		n += v
	}
	return n
}

// Real returns how many of the count rows of source i in slice d of step
// are real, the source being at row pos of its sequence (C_i(step)): count,
// except in a padded last step, where the rows past the source's first
// epoch on that slice are padding.
func (m *Mixture) Real(step, i, d int, pos, count int64) int64 {
	if !m.padEnd || step != m.steps-1 {
		return count
	}
	return max(0, min(count, m.base[i]+m.firstLeft[i][d]-pos))
}

// Order returns the order of the sources' rows inside slice d of step: a
// permutation of the source indices drawn with the seed deriveSeed(Seed, 3,
// step, d) (rand.go). The slice holds each source's rows of the step
// contiguously, in this order (padding, if any, at the end).
func (m *Mixture) Order(step, d int) []int32 {
	return permutation(deriveSeed(m.cfg.Seed, domainMixture, uint64(step), uint64(d)), len(m.src))
}

// Locate returns where row pos of source i's sequence on slice d lies: the
// source epoch and the row of stream d in that epoch.
func (m *Mixture) Locate(i, d int, pos int64) (epoch int, row int64) {
	l := m.src[i].lens[d]
	return int(pos / l), pos % l
}
