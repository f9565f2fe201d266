package batching

import (
	"fmt"
	"math"
	"math/bits"
	"slices"
	"strconv"
	"strings"
)

// The composition of a mixture: how many rows of each source every slice of
// every step holds (DESIGN.md, "Mixtures").
//
// Weights become integers once, so that the arithmetic below is exact:
// weights that are decimals of at most 9 fractional digits whose scaled
// values stay within 2^32 (0.5, 0.3, 0.2; 2, 1; 0.125) are scaled exactly,
// u_i = w_i * 10^k; others are quantized, u_i = round(2^32 * w_i / max_j w_j),
// within 2^-32 of the largest weight. The proportions are u_i / U with U =
// sum u_i.
//
// Within a weight span that starts at step s0 with the sources at counts
// base_i, the quota of source i after k steps of the span is
// q_i(k) = k * b * u_i / U rows per slice, and the count C_i(k) (rows of
// source i in the span's first k steps, per slice) satisfies
//
//	floor(q_i(k)) <= C_i(k) <= ceil(q_i(k))   (so |C_i(k) - q_i(k)| < 1)
//	sum_i C_i(k) = k * b                        (every slice is full)
//	C_i(k+1) >= C_i(k)                          (counts never go back)
//
// Each row of a source is a unit job: row n of source i is released at the
// first k with ceil(q_i(k)) >= n (its upper quota allows it) and due at the
// first k with q_i(k) >= n (its lower quota needs it). A step schedules b
// rows, earliest deadline first (ties: the lower source index): first every
// row due by the end of the step, then, among sources with a released row
// not yet due, those whose next row is due soonest. Balinski and Young's
// quota method shows that a schedule meeting every deadline exists, and
// earliest-deadline-first scheduling of unit jobs with release times meets
// every deadline whenever a schedule does; a step that could not (never
// observed; it would be a bug) is an error, not a silent deviation.

// MaxSources bounds the sources of a mixture (the quantized weights sum below
// 2^48, which keeps the arithmetic in 128 bits).
const MaxSources = 1024

// WeightSpan gives the weights of the sources from step FromStep on (until
// the next span's FromStep).
type WeightSpan struct {
	FromStep int
	Weights  []float64
	// Start, when set, holds every source's count C_i(FromStep) (rows per
	// slice before the span): walks start at the last span that carries
	// it, so the spans before it (whose sources may since have been
	// removed) are never recomputed. Nil: walked from the spans before.
	Start []int64
}

// qspan is a WeightSpan with quantized weights and its slice rows.
type qspan struct {
	from  int
	u     []uint64
	total uint64
	b     int64
	start []int64 // C(from), or nil
}

// QuantizeWeights checks weights (finite, >= 0, not all 0) and returns them
// as integers: scaled exactly when they are short decimals (see above),
// else quantized to 32 bits of the largest, round(2^32 * w_i / max w). A
// positive weight that quantizes to 0 (under 2^-33 of the largest) is an
// error too.
// Errors wrap ErrInvalidWeights and name the source by index.
func QuantizeWeights(weights []float64) ([]uint64, error) {
	if len(weights) == 0 {
		return nil, fmt.Errorf("%w: no sources", ErrInvalidWeights)
	}
	if len(weights) > MaxSources {
		return nil, fmt.Errorf("%w: %d sources, at most %d", ErrInvalidWeights, len(weights), MaxSources)
	}
	var hi float64
	for i, w := range weights {
		switch {
		case math.IsNaN(w):
			return nil, fmt.Errorf("%w: source %d: weight is NaN", ErrInvalidWeights, i)
		case math.IsInf(w, 0):
			return nil, fmt.Errorf("%w: source %d: weight %v is not finite", ErrInvalidWeights, i, w)
		case w < 0:
			return nil, fmt.Errorf("%w: source %d: weight %v is negative", ErrInvalidWeights, i, w)
		}
		hi = max(hi, w)
	}
	if hi == 0 {
		return nil, fmt.Errorf("%w: every weight is 0 (%d sources): give at least one source a positive weight", ErrInvalidWeights, len(weights))
	}
	if u, ok := decimalWeights(weights); ok {
		return u, nil
	}
	u := make([]uint64, len(weights))
	for i, w := range weights {
		u[i] = uint64(math.Round(math.Ldexp(w/hi, 32)))
		if w > 0 && u[i] == 0 {
			return nil, fmt.Errorf("%w: source %d: weight %v is positive but below 2^-33 of the largest weight %v: make it 0 or larger", ErrInvalidWeights, i, w, hi)
		}
	}
	return u, nil
}

// decimalWeights returns w_i * 10^k for the smallest k <= 9 that makes every
// weight (as its shortest decimal form) an integer, when every such value
// is at most 2^32; ok is false otherwise.
func decimalWeights(weights []float64) ([]uint64, bool) {
	k := 0
	for _, w := range weights {
		s := strconv.FormatFloat(w, 'f', -1, 64)
		if i := strings.IndexByte(s, '.'); i >= 0 {
			k = max(k, len(s)-i-1)
		}
	}
	if k > 9 {
		return nil, false
	}
	u := make([]uint64, len(weights))
	for i, w := range weights {
		s := strconv.FormatFloat(w, 'f', -1, 64)
		frac := 0
		if j := strings.IndexByte(s, '.'); j >= 0 {
			frac = len(s) - j - 1
			s = s[:j] + s[j+1:]
		}
		v, err := strconv.ParseUint(s+strings.Repeat("0", k-frac), 10, 64)
		if err != nil || v > 1<<32 {
			return nil, false
		}
		u[i] = v
	}
	return u, true
}

// Composition is the per-step row counts of a mixture's sources: a pure
// function of the slice rows b, the weight spans and the step. It is
// immutable and safe for concurrent use; a Walker walks it.
type Composition struct {
	b      int64 // of the last span
	n      int   // sources
	spans  []qspan
	origin int // the last span with a start: where walks begin
}

// NewComposition checks and quantizes the spans: the first starts at step
// 0, FromStep ascends strictly, every span has one weight per source (the
// same number in every span) and is valid for QuantizeWeights. Errors wrap
// ErrInvalidWeights.
func NewComposition(sliceRows int, spans []WeightSpan) (*Composition, error) {
	return NewSwitchedComposition(sliceRows, sliceRows, 0, spans)
}

// NewSwitchedComposition is NewComposition for a run whose slices had
// rowsBefore rows before step at and have rowsFrom rows from step at on (an
// elastic switch of the data-parallel degree, B unchanged): a span starts
// at step at (with the weights of the span that holds it), so that its
// quotas count the rows per slice from there, as a reweighting's do.
//
// Walks begin at the last span with a Start (step 0 without one); the
// weights of the spans before it are checked for form only (a source removed
// since made them ours to ignore). A switch before that span needs a span
// with a Start at the switch: its counts are the switch's.
//
// Length: the checks of every span, then the switch's span, in one pass.
func NewSwitchedComposition(rowsBefore, rowsFrom, at int, spans []WeightSpan) (*Composition, error) {
	for _, b := range []int{rowsBefore, rowsFrom} {
		if b <= 0 || b > MaxGlobalBatch {
			return nil, fmt.Errorf("%w: slice rows b=%d, must be in [1, %d]", ErrInvalidConfig, b, MaxGlobalBatch)
		}
	}
	if at < 0 {
		return nil, fmt.Errorf("%w: switch at step %d", ErrInvalidConfig, at)
	}
	if len(spans) == 0 {
		return nil, fmt.Errorf("%w: no weights", ErrInvalidWeights)
	}
	c := &Composition{b: int64(rowsFrom), n: len(spans[0].Weights)}
	last := 0 // the last span with a Start
	for j, s := range spans {
		if s.Start != nil {
			last = j
		}
	}
	for j, s := range spans {
		if err := checkStart(s, j, c.n); err != nil {
			return nil, err
		}
		switch {
		case j == 0 && s.FromStep != 0:
			return nil, fmt.Errorf("%w: the first weight span starts at step %d, want 0", ErrInvalidWeights, s.FromStep)
		case j > 0 && s.FromStep <= spans[j-1].FromStep:
			return nil, fmt.Errorf("%w: weight span %d starts at step %d, not after the previous one (step %d)", ErrInvalidWeights, j, s.FromStep, spans[j-1].FromStep)
		case len(s.Weights) != c.n:
			return nil, fmt.Errorf("%w: weight span %d (from step %d) has %d weights, want one per source (%d)", ErrInvalidWeights, j, s.FromStep, len(s.Weights), c.n)
		}
		u, err := QuantizeWeights(s.Weights)
		if err != nil && j < last && allZero(s.Weights) {
			// Never walked: the sources it weighted were removed since.
			u, err = make([]uint64, len(s.Weights)), nil
		}
		if err != nil {
			if len(spans) > 1 {
				return nil, fmt.Errorf("weights from step %d: %w", s.FromStep, err)
			}
			return nil, err
		}
		var total uint64
		for _, v := range u {
			total += v
		}
		sp := qspan{from: s.FromStep, u: u, total: total, b: int64(rowsFrom), start: s.Start}
		if s.FromStep < at {
			sp.b = int64(rowsBefore)
		}
		if j == last {
			c.origin = len(c.spans)
		}
		c.spans = append(c.spans, sp)
		if at > s.FromStep && (j+1 == len(spans) || spans[j+1].FromStep > at) {
			c.spans = append(c.spans, qspan{from: at, u: u, total: total, b: int64(rowsFrom)})
		}
	}
	if o := c.spans[c.origin].from; at > 0 && at < o && c.startAt(at) == nil {
		return nil, fmt.Errorf("%w: the elastic switch at step %d is before step %d, where the weight history's positions start, and no span at the switch carries positions", ErrInvalidPosition, at, o)
	}
	return c, nil
}

// allZero reports whether weights are one or more zeros.
func allZero(weights []float64) bool {
	return len(weights) > 0 && !slices.ContainsFunc(weights, func(w float64) bool { return w != 0 })
}

// checkStart checks span j's Start: one count >= 0 per source, all 0 at
// step 0.
func checkStart(s WeightSpan, j, n int) error {
	if s.Start == nil {
		return nil
	}
	if len(s.Start) != n {
		return fmt.Errorf("%w: weight span %d (from step %d) has %d positions, want one per source (%d)", ErrInvalidWeights, j, s.FromStep, len(s.Start), n)
	}
	for i, v := range s.Start {
		if v < 0 || (s.FromStep == 0 && v != 0) || v > int64(s.FromStep)*MaxGlobalBatch {
			return fmt.Errorf("%w: weight span %d (from step %d): source %d's position %d is impossible there", ErrInvalidWeights, j, s.FromStep, i, v)
		}
	}
	return nil
}

// startAt returns the Start of the span that begins at step, nil if none.
func (c *Composition) startAt(step int) []int64 {
	for _, sp := range c.spans {
		if sp.from == step && sp.start != nil {
			return sp.start
		}
	}
	return nil
}

// Origin returns the step where walks begin: the last span carrying its
// sources' positions (0 without one). Steps before it are not computed.
func (c *Composition) Origin() int { return c.spans[c.origin].from }

// CumAt returns C_i(step) for every source: a span's Start where one begins
// at step, else walked from the origin. A step before the origin without a
// Start is an error wrapping ErrInvalidPosition.
func (c *Composition) CumAt(step int) ([]int64, error) {
	if s := c.startAt(step); s != nil {
		return slices.Clone(s), nil
	}
	w := c.Walk()
	if err := w.Skip(step); err != nil {
		return nil, err
	}
	return slices.Clone(w.Cum()), nil
}

// Sources returns the number of sources.
func (c *Composition) Sources() int { return c.n }

// SliceRows returns b (of the last span: after a switch, the new slices').
func (c *Composition) SliceRows() int { return int(c.b) }

// Weight reports whether source i has a positive weight in the span that
// holds step.
func (c *Composition) Weight(i, step int) bool {
	return c.spanAt(step).u[i] > 0
}

// spanAt returns the span that holds step.
func (c *Composition) spanAt(step int) *qspan {
	j := len(c.spans) - 1
	for j > 0 && c.spans[j].from > step {
		j--
	}
	return &c.spans[j]
}

// LastSpanStart returns the step where the last weight span starts.
func (c *Composition) LastSpanStart() int { return c.spans[len(c.spans)-1].from }

// Walker walks a Composition step by step from its origin. It is not safe for
// concurrent use.
type Walker struct {
	c     *Composition
	step  int
	span  int
	cum   []int64 // C_i(step): rows per slice of source i in steps [0, step)
	base  []int64 // cum at the start of the current span
	due   []int64 // scratch
	order []int   // scratch
}

// Walk returns a walker at the origin (Origin; step 0 without positions
// in the spans), standing at the counts there.
func (c *Composition) Walk() *Walker {
	w := &Walker{c: c, cum: make([]int64, c.n), base: make([]int64, c.n),
		due: make([]int64, c.n), order: make([]int, 0, c.n)}
	if sp := c.spans[c.origin]; sp.start != nil {
		copy(w.cum, sp.start)
		copy(w.base, sp.start)
	}
	w.step, w.span = c.spans[c.origin].from, c.origin
	return w
}

// Clone returns a walker at w's step that walks on independently of w.
func (w *Walker) Clone() *Walker {
	return &Walker{c: w.c, step: w.step, span: w.span, cum: slices.Clone(w.cum), base: slices.Clone(w.base),
		due: make([]int64, len(w.due)), order: make([]int, 0, cap(w.order))}
}

// Step returns the step the next call of Next counts.
func (w *Walker) Step() int { return w.step }

// Cum returns C_i(Step()) for every source: the rows per slice of each source
// in the steps before Step(). The slice is the walker's; do not modify it.
func (w *Walker) Cum() []int64 { return w.cum }

// Next writes the rows per slice of each source in step Step() into counts
// (len Sources()) and advances one step.
func (w *Walker) Next(counts []int64) error {
	c := w.c
	if w.span+1 < len(c.spans) && c.spans[w.span+1].from == w.step {
		w.span++
		copy(w.base, w.cum)
	}
	sp := &c.spans[w.span]
	k := uint64(w.step-sp.from) + 1 // steps of the span at the end of this one
	rows := k * uint64(sp.b)
	left := sp.b
	w.order = w.order[:0]
	for i, u := range sp.u {
		hi, lo := bits.Mul64(rows, u)
		fl, rem := bits.Div64(hi, lo, sp.total)
		local := w.cum[i] - w.base[i]
		must := max(0, int64(fl)-local)
		counts[i] = must
		left -= must
		if rem != 0 && local+must == int64(fl) {
			// Row fl+1 of the span is released and not due: due at the
			// first k' with k'*b*u >= (fl+1)*U.
			dh, dl := bits.Mul64(fl+1, sp.total)
			den := uint64(sp.b) * u
			q, r := bits.Div64(dh, dl, den)
			if r != 0 {
				q++
			}
			w.due[i] = int64(q)
			w.order = append(w.order, i)
		}
	}
	if left < 0 || left > int64(len(w.order)) {
		return fmt.Errorf("%w: step %d: %d rows of the slice left for %d optional sources (internal error)", ErrComposition, w.step, left, len(w.order))
	}
	// Insertion sort by (due, index): few sources.
	o := w.order
	for a := 1; a < len(o); a++ {
		for z := a; z > 0 && (w.due[o[z]] < w.due[o[z-1]] || (w.due[o[z]] == w.due[o[z-1]] && o[z] < o[z-1])); z-- {
			o[z], o[z-1] = o[z-1], o[z]
		}
	}
	for _, i := range o[:left] {
		counts[i]++
	}
	for i := range counts {
		w.cum[i] += counts[i]
	}
	w.step++
	return nil
}

// Skip advances the walker to step (>= Step()). A step before the
// walker's is an error wrapping ErrInvalidPosition (before the origin: the
// ticket's history does not give its counts).
func (w *Walker) Skip(step int) error {
	if step < w.step {
		return fmt.Errorf("%w: step %d is before step %d, where the mixture's weight history gives the sources' positions (a resumed run starts there or later)", ErrInvalidPosition, step, w.step)
	}
	counts := make([]int64, w.c.n)
	for w.step < step {
		if err := w.Next(counts); err != nil {
			return err
		}
	}
	return nil
}
