package batching

// Elastic resume of a mixture: a mixture saved at step k under D slices
// resumed under D' (docs/CONTRACT-elastic.md, "Mixtures").

import (
	"fmt"
	"sort"

	"github.com/apache/arrow-go/v18/arrow/memory"
)

// maxRemainderPieces bounds the pieces of one source's remainder: a source
// whose old slices stand in many different epochs (a source of a few rows
// per slice read for many epochs) would need many.
const maxRemainderPieces = 1 << 20

// remPiece is rows [from, to) of stream stream of epoch epoch of a source's
// plan before the switch (a source plan: one row per step, so the rows are
// in the order the old slices deliver them).
type remPiece struct {
	epoch, stream int
	from, to      int64
}

// sourceRemainder is the rest of one source's begun epochs at an elastic
// switch: for every source epoch that some old slice had begun (delivered a
// row of) by the switch, the rows no old slice had delivered, in order of
// epoch, then old stream, then row; re-split into D' contiguous remainder
// streams whose lengths differ by at most one row (the first M mod D' one
// longer). New slice d' of the source reads remainder stream d', then
// stream d' of the plain plan with D' from epoch next on.
type sourceRemainder struct {
	old    *Plan // the source's plan with the old D
	pos    int64 // rows per old slice delivered before the switch
	next   int   // the first epoch no old slice had begun
	pieces []remPiece
	offs   []int64 // offs[j]: first row of pieces[j] in the remainder; len(pieces)+1
	first  int64   // rows of epoch 0 in the remainder (they come first)
	lens   []int64 // per new stream
	lo     []int64 // first row of new stream d' in the remainder
}

// newSourceRemainder returns the remainder of a source whose plan with the
// new D is plan and with the old D is old, pos rows per old slice
// delivered. Errors wrap ErrInvalidMixture.
func newSourceRemainder(plan, old *Plan, pos int64) (*sourceRemainder, error) {
	dOld, dNew := old.cfg.D, plan.cfg.D
	minL, maxL := old.lens[dOld-1], old.lens[0]
	r := &sourceRemainder{old: old, pos: pos, offs: []int64{0}}
	if pos > 0 {
		r.next = int((pos + minL - 1) / minL) // ceil(pos / shortest stream): the last begun epoch + 1
	}
	eMin := int(pos / maxL)
	if n := int64(r.next-eMin) * int64(dOld); n > maxRemainderPieces {
		return nil, fmt.Errorf("%w: at the elastic switch the %d old slices of this source stand in epochs %d to %d (%d rows per slice delivered, streams of %d to %d rows): too far apart to re-split; resume with the old number of slices",
			ErrInvalidMixture, dOld, eMin, r.next-1, pos, minL, maxL)
	}
	for e := eMin; e < r.next; e++ {
		for d := range dOld {
			l := old.lens[d]
			from := max(0, pos-int64(e)*l)
			if from >= l {
				continue
			}
			r.pieces = append(r.pieces, remPiece{epoch: e, stream: d, from: from, to: l})
			r.offs = append(r.offs, r.offs[len(r.offs)-1]+l-from)
			if e == 0 {
				r.first += l - from
			}
		}
	}
	m := r.offs[len(r.offs)-1]
	r.lens, r.lo = splitRows(m, dNew)
	return r, nil
}

// rows returns M, the rows of the remainder.
func (r *sourceRemainder) rows() int64 { return r.offs[len(r.offs)-1] }

// firstRows returns how many rows of the source's first epoch new slice d
// still delivers after the switch: its remainder stream's rows of epoch 0,
// or, when no old slice had begun epoch 0, stream d of epoch 0 of the plan
// with D' (plan).
func (r *sourceRemainder) firstRows(plan *Plan, d int) int64 {
	if r.next == 0 {
		return plan.lens[d]
	}
	return max(0, min(r.lens[d], r.first-r.lo[d]))
}

// piecesOf returns the pieces of remainder stream d from its row p on.
func (r *sourceRemainder) piecesOf(d int, p int64) []remPiece {
	lo, hi := r.lo[d]+p, r.lo[d]+r.lens[d]
	j := sort.Search(len(r.pieces), func(j int) bool { return r.offs[j+1] > lo })
	var out []remPiece
	for ; j < len(r.pieces) && r.offs[j] < hi; j++ {
		pc := r.pieces[j]
		s, t := max(lo, r.offs[j]), min(hi, r.offs[j+1])
		out = append(out, remPiece{epoch: pc.epoch, stream: pc.stream, from: pc.from + s - r.offs[j], to: pc.from + t - r.offs[j]})
	}
	return out
}

// readEndAt returns the stream row of stream d where a cutter of this
// (source) plan that must deliver rows up to to stops reading: to, or the
// end of the shuffle window holding row to-1.
func (p *Plan) readEndAt(d int, to int64) int64 {
	if w := p.cfg.Window; w > 0 && to > 0 {
		return min(((to-1)/w+1)*w, p.lens[d])
	}
	return to
}

// planSwitch sets up an elastic switch of m (cfg.Elastic): the old source
// plans, the counts at the switch and every source's remainder. Without a
// switch, every source's first epoch is its plan's epoch 0.
func (m *Mixture) planSwitch() error {
	sw := m.cfg.Elastic
	n := len(m.src)
	m.base = make([]int64, n)
	m.firstLeft = make([][]int64, n)
	if sw == nil {
		for i, p := range m.src {
			m.firstLeft[i] = p.lens
		}
		return nil
	}
	base, err := m.comp.CumAt(sw.Step)
	if err != nil {
		return err
	}
	copy(m.base, base)
	m.rem = make([]*sourceRemainder, n)
	for i, p := range m.src {
		cfg := p.cfg
		cfg.GlobalBatch, cfg.D = sw.FromD, sw.FromD
		old, err := NewPlan(p.rgs, cfg)
		if err != nil {
			return fmt.Errorf("batching: source %d before the elastic switch (D=%d): %w", i, sw.FromD, err)
		}
		if old.n < int64(sw.FromD) {
			return fmt.Errorf("%w: source %d has %d rows, fewer than the %d slices before the elastic switch", ErrInvalidMixture, i, old.n, sw.FromD)
		}
		r, err := newSourceRemainder(p, old, m.base[i])
		if err != nil {
			return fmt.Errorf("source %d: %w", i, err)
		}
		m.rem[i] = r
		m.firstLeft[i] = make([]int64, m.cfg.D)
		for d := range m.firstLeft[i] {
			m.firstLeft[i][d] = r.firstRows(p, d)
		}
	}
	return nil
}

// checkSwitch checks cfg.Elastic against cfg.
func (cfg MixtureConfig) checkSwitch() error {
	sw := cfg.Elastic
	switch {
	case sw == nil:
		return nil
	case sw.FromD <= 0 || sw.FromD > MaxD || cfg.GlobalBatch%sw.FromD != 0:
		return fmt.Errorf("%w: elastic switch from D=%d: want 1 to %d slices dividing B=%d", ErrInvalidConfig, sw.FromD, MaxD, cfg.GlobalBatch)
	case sw.Epoch != 0 || sw.Step < 0 || sw.Step > MaxMixtureSteps:
		return fmt.Errorf("%w: elastic switch at epoch %d step %d: a mixture is one pass (epoch 0), steps 0 to %d", ErrInvalidPosition, sw.Epoch, sw.Step, MaxMixtureSteps)
	}
	return nil
}

// Switch returns the elastic switch the mixture resumes across, nil for
// none.
func (m *Mixture) Switch() *Switch { return m.cfg.Elastic }

// NewCursor returns the cursor of source i on slice d at row pos of its
// sequence as the composition counts it (Walker.Cum): the plain sequence of
// the source's plan (NewSourceCursor), or, after an elastic switch, the
// source's remainder stream d then its plan from the first epoch no old
// slice had begun. A position before the switch is ErrInvalidPosition.
func (m *Mixture) NewCursor(i, d int, pos int64, mem memory.Allocator, opts ...CutterOption) (*SourceCursor, error) {
	if m.rem == nil {
		return NewSourceCursor(m.src[i], d, pos, mem, opts...)
	}
	if i < 0 || i >= len(m.src) || d < 0 || d >= m.cfg.D || pos < m.base[i] {
		return nil, fmt.Errorf("%w: source %d slice %d at row %d of its sequence: before the elastic switch or outside the mixture", ErrInvalidPosition, i, d, pos)
	}
	p := pos - m.base[i]
	return newRemainderCursor(m.src[i], m.rem[i], d, p, mem, opts...)
}
