package feed

// Elastic resume in the pipeline: the epoch of a switch of data-parallel
// degree is cut by batching.RemainderCutters (see docs/CONTRACT-elastic.md).

import (
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/meshfeed/meshfeed/batching"
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
	if pl.cfg.packed {
		return fmt.Errorf("feed: %w: elastic resume with a packed column is not supported (packing changes the rows of a slice)", transport.ErrBadRequest)
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
