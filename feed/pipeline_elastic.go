package feed

// Elastic resume in the pipeline: the epoch of a switch of data-parallel
// degree is cut by batching.RemainderCutters (see docs/CONTRACT-elastic.md).

import (
	"fmt"
	"math"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/meshfeed/meshfeed/batching"
	"github.com/meshfeed/meshfeed/shape"
	"github.com/meshfeed/meshfeed/transport"
)

// slicer is what a sliceCut cuts with: a batching.Cutter or, in the epoch of
// an elastic switch, a batching.RemainderCutter.
type slicer interface {
	Next() (arrow.RecordBatch, int, bool, error)
	Wants() (batching.Segment, bool)
	Push(rec arrow.RecordBatch, seg batching.Segment) error
	Step() int
	Done() bool
	Release()
}

var (
	_ slicer = (*batching.Cutter)(nil)
	_ slicer = (*batching.RemainderCutter)(nil)
)

// planElastic plans the remainder of the switch's epoch when the request
// resumes inside it with another data-parallel degree. A switch to the same
// degree, or one whose epoch is over, changes nothing.
func (pl *pipelinePlan) planElastic() error {
	e := pl.cfg.elastic
	if e == nil || e.FromSlices == pl.cfg.plan.D || pl.cfg.start.Epoch != e.Epoch {
		return nil
	}
	if r := pl.cfg.packRatio(); r > 0 {
		if err := checkPackedSwitch(pl.cfg.plan.GlobalBatch, e.FromSlices, pl.cfg.plan.D, r); err != nil {
			return err
		}
	}
	rem, err := pl.plan.Remainder(batching.Switch{FromD: e.FromSlices, Epoch: e.Epoch, Step: e.Step})
	if err != nil {
		return fmt.Errorf("feed: elastic switch from num_slices %d at epoch %d step %d: %w",
			e.FromSlices, e.Epoch, e.Step, err)
	}
	pl.rem = rem
	return nil
}

// openRemainder sets up, for every requested slice, the remainder cutter of
// the switch's epoch from s.pos.Step, and a reader of exactly the segments it
// will ask for.
func (s *pipelineStream) openRemainder() error {
	pl := s.pl
	for _, d := range pl.cfg.slices {
		cut, err := batching.NewRemainderCutter(pl.rem, d, s.pos.Step, s.mem,
			batching.WithMaskColumn(pl.cfg.mask), batching.WithSchema(pl.cutIn))
		if err != nil {
			return fmt.Errorf("feed: elastic epoch %d step %d slice %d: %w", s.pos.Epoch, s.pos.Step, d, err)
		}
		sc := &sliceCut{d: d, cut: cut}
		for _, seg := range cut.Segments() {
			sc.refs = append(sc.refs, pl.refs[seg.RowGroup])
			sc.groups = append(sc.groups, seg.RowGroup)
		}
		s.addSlice(sc)
	}
	return nil
}

// packRatio is the pack_ratio of the request's packed columns (they agree,
// shape.Column.Validate), 0 without packing.
func (c *streamConfig) packRatio() float64 {
	for _, sc := range c.shaping {
		if sc.PackRatio > 0 {
			return sc.PackRatio
		}
	}
	return 0
}

// checkPackedSwitch allows an elastic switch from d to d2 slices with
// packing only when the packed global batch keeps its leading dimension,
// d*PackedRows(B/d, r) == d2*PackedRows(B/d2, r), so that a compiled training
// step sees the same shapes before and after the switch. Otherwise it names
// both shapes and the ratios that would keep them equal.
func checkPackedSwitch(B, d, d2 int, r float64) error {
	b, b2 := B/d, B/d2
	p, p2 := shape.PackedRows(b, r), shape.PackedRows(b2, r)
	if d*p == d2*p2 {
		return nil
	}
	return fmt.Errorf("feed: %w: elastic switch from num_slices %d to %d with pack_ratio %v: the packed global batch of "+
		"global_batch_size %d source rows has %d x ceil(%d/%v) = %d rows under num_slices %d but %d x ceil(%d/%v) = %d rows under %d, "+
		"so a compiled training step would see another shape; elastic resume with packing needs the same packed rows on both sides: %s; "+
		"keep num_slices %d until this epoch ends (a state saved at an epoch boundary names no switch), or start the run with such a ratio",
		transport.ErrBadRequest, d, d2, r, B, d, b, r, d*p, d, d2, b2, r, d2*p2, d2, samePackedRatios(B, d, d2, r), d)
}

// samePackedRatios says which pack ratios keep the packed global batch of B
// rows the same under d and d2 slices: those dividing both b = B/d and
// b2 = B/d2, and in general the intervals nearest r (packedIntervals).
func samePackedRatios(B, d, d2 int, r float64) string {
	b, b2 := B/d, B/d2
	var near []string
	for _, iv := range packedIntervals(B, d, d2, r) {
		near = append(near, fmt.Sprintf("[%.6g, %.6g) (%d packed rows)", iv.lo, iv.hi, iv.rows))
	}
	return fmt.Sprintf("ratios dividing both %d and %d (the largest is %d), or any ratio r with %d*ceil(%d/r) == %d*ceil(%d/r), nearest %v: %s",
		b, b2, gcd(b, b2), d, b, d2, b2, r, strings.Join(near, " or "))
}

// ratioInterval is the ratios [lo, hi) that pack a global batch into rows
// packed rows under both degrees.
type ratioInterval struct {
	lo, hi float64
	rows   int
}

// packedIntervals returns the nearest interval of ratios at least r and the
// nearest below r that keep the packed global batch of B rows the same
// under d and d2 slices. For G packed rows in all (a multiple of lcm(d, d2),
// at most B), the ratios [B/G, hi) give ceil(b/r) = G/d and ceil(b2/r) =
// G/d2, hi = min(b/(G/d-1), b2/(G/d2-1)); the interval can be empty.
func packedIntervals(B, d, d2 int, r float64) []ratioInterval {
	b, b2 := B/d, B/d2
	l := d / gcd(d, d2) * d2
	interval := func(m int) (ratioInterval, bool) {
		g := m * l
		if g < l || g > B {
			return ratioInterval{}, false
		}
		iv := ratioInterval{lo: float64(B) / float64(g), hi: math.Inf(1), rows: g}
		if p := g / d; p > 1 {
			iv.hi = float64(b) / float64(p-1)
		}
		if p2 := g / d2; p2 > 1 {
			iv.hi = math.Min(iv.hi, float64(b2)/float64(p2-1))
		}
		return iv, iv.lo < iv.hi && shape.PackedRows(b, iv.lo)*d == g && shape.PackedRows(b2, iv.lo)*d2 == g
	}
	m0 := max(1, int(float64(B)/r)/l)
	var out []ratioInterval
	// From m0 down: fewer packed rows (ratios >= r); from m0+1 up: more.
	for _, dir := range []int{-1, 1} {
		start := m0
		if dir > 0 {
			start = m0 + 1
		}
		for m, tries := start, 0; tries < 64; m, tries = m+dir, tries+1 {
			if iv, ok := interval(m); ok {
				out = append(out, iv)
				break
			}
		}
	}
	return out
}

// gcd is the greatest common divisor of two positive ints.
func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
