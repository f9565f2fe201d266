package feed

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/meshfeed/meshfeed/batching"
	"github.com/meshfeed/meshfeed/loader"
	"github.com/meshfeed/meshfeed/shape"
	"github.com/meshfeed/meshfeed/transport"
)

// pipelineStream is one DoGet over a Pipeline.
type pipelineStream struct {
	pl     *pipelinePlan
	cfg    *pipelineConfig
	mem    memory.Allocator
	ctx    context.Context // the readers' context
	cancel context.CancelFunc
	pos    batching.Position // position of the next step
	slices []*sliceCut       // per request slice, for epoch pos.Epoch; nil between epochs
	ahead  []*sliceCut       // the next epoch's, opened early by readAhead; nil when not yet
	closed bool

	unreserve func() // returns the stream's memory reservation (limits.go)
}

// sliceCut cuts one slice (stream d) of one epoch.
type sliceCut struct {
	d    int
	cut  slicer                 // a *batching.Cutter, or a *batching.RemainderCutter in an elastic epoch
	rd   *loader.RowGroupReader // nil when the stream reads nothing
	refs []loader.RowGroupRef   // what rd reads, in order (to check what it returns): row groups, or pieces of them
	segs []batching.Segment     // per ref, what is pushed; nil: the segment the cutter wants
	// groups are, per ref, the plan's row group (when segs is nil: for
	// the reader's work on tokenized columns, which takes the kept rows).
	groups []int
	got    int // refs rd's records covered (one each, unless snap)
	// snap: rd moves its pieces' ends to page breaks (snap.go), so a
	// record covers the rows its ref names, which may span several of
	// refs or parts of them.
	snap bool
}

// Schema implements transport.Stream.
func (s *pipelineStream) Schema() *arrow.Schema { return s.pl.schema }

// openEpoch sets up, for every requested slice, the cutter and the reader of
// epoch s.pos.Epoch starting at step s.pos.Step: those readAhead opened
// during the previous epoch, or new ones.
func (s *pipelineStream) openEpoch() error {
	pl := s.pl
	if s.ahead != nil {
		s.slices, s.ahead = s.ahead, nil
		return nil
	}
	if pl.rem != nil && s.pos.Epoch == pl.rem.Switch().Epoch {
		return s.openRemainder()
	}
	scs, err := s.plainSlices(s.pos)
	if err != nil {
		return err
	}
	s.slices = scs
	return nil
}

// plainSlices returns the cutters and readers of the plan's epoch pos.Epoch
// from step pos.Step, one per requested slice; their readers start reading.
func (s *pipelineStream) plainSlices(pos batching.Position) ([]*sliceCut, error) {
	pl := s.pl
	var out []*sliceCut
	for _, d := range pl.cfg.slices {
		cut, err := batching.NewCutter(pl.plan, pos.Epoch, d, pos.Step, s.mem,
			batching.WithMaskColumn(pl.cfg.mask), batching.WithSchema(pl.cutIn))
		if err != nil {
			closeSlices(out)
			return nil, fmt.Errorf("feed: epoch %d step %d slice %d: %w", pos.Epoch, pos.Step, d, err)
		}
		sc := &sliceCut{d: d, cut: cut}
		if rows := pl.pieces.pieceRows; rows > 0 {
			// Pieces of at most rows rows, on the slice grid, exactly what
			// the cutter will ask for (batching.Cutter.Reads).
			sc.segs = cut.Reads(rows)
			sc.refs = make([]loader.RowGroupRef, len(sc.segs))
			for i, g := range sc.segs {
				sc.refs[i] = pl.pieceRef(g)
			}
		} else {
			sc.refs, sc.groups = s.readRefs(pos, d)
		}
		out = append(out, sc)
	}
	share := s.edgeShare(out)
	s.claimHeld(out)
	for _, sc := range out {
		s.startReader(sc, share)
	}
	return out, nil
}

// claimHeld tells the Pipeline's HeldChunks how many of scs's readers read
// each row group, before any starts: the filter columns the plan kept of a
// row group are dropped once those readers are all done with it (or
// sooner: its bound, its time limit), not held for the rest of the epoch.
func (s *pipelineStream) claimHeld(scs []*sliceCut) {
	if s.cfg.held == nil {
		return
	}
	readers := map[[2]int]int{}
	for _, sc := range scs {
		seen := map[[2]int]bool{}
		for _, r := range sc.refs {
			if k := [2]int{r.File, r.Index}; !seen[k] {
				seen[k] = true
				readers[k]++
			}
		}
	}
	for k, n := range readers {
		s.cfg.held.Claim(s.pl.ds.Files[k[0]].Object, k[1], n)
	}
}

// edgeShare returns the FetchShare of the row groups that several of scs
// read pieces of (where one slice's edge and the next's fall inside the same
// row group: with a filter on a sorted column, the row groups at the edges
// of the kept range), so that their pages are fetched once, within the
// plan's bound (piecePlan.shareBytes); nil when there is none.
func (s *pipelineStream) edgeShare(scs []*sliceCut) *loader.FetchShare {
	if s.pl.pieces.shareBytes <= 0 || len(scs) < 2 || s.cfg.noEdgeShare {
		return nil
	}
	readers := map[[2]int]int{}
	for _, sc := range scs {
		seen := map[[2]int]bool{}
		for _, r := range sc.refs {
			k := [2]int{r.File, r.Index}
			if (r.Start != 0 || r.End != 0) && !seen[k] {
				seen[k] = true
				readers[k]++
			}
		}
	}
	return loader.NewFetchShare(readers, s.pl.pieces.shareBytes)
}

// readAhead opens the next epoch's slices, so that their readers fetch and
// decode its first row groups or pieces while this epoch's last steps are
// cut (without it the first steps of every epoch wait for them), once every
// slice of this epoch has taken its last record from its reader: their
// read-ahead budget is then free, and the memory held stays within the
// budget. An elastic remainder epoch, and the epochs before it, open when
// they start; so does an epoch whose set-up fails (openEpoch reports it).
func (s *pipelineStream) readAhead() {
	pl := s.pl
	next := s.pos.Epoch + 1
	if s.ahead != nil || s.slices == nil || (pl.cfg.epochs > 0 && next >= pl.cfg.epochs) ||
		(pl.rem != nil && next <= pl.rem.Switch().Epoch) {
		return
	}
	for _, sc := range s.slices {
		if sc.rd != nil && sc.got < len(sc.refs) {
			return
		}
	}
	if scs, err := s.plainSlices(batching.Position{Epoch: next}); err == nil {
		s.ahead = scs
	}
}

// addSlice adds sc to the current epoch, its reader started.
func (s *pipelineStream) addSlice(sc *sliceCut) {
	s.startReader(sc, nil)
	s.slices = append(s.slices, sc)
}

// startReader gives sc a reader of exactly sc.refs (none when it reads
// nothing): each of the stream's slices gets an even share of the
// read-ahead budget (of which, when it reads pieces, the part planPieces
// leaves in flight; with a shuffle window, at least one window of rows:
// budget.go) and of the cores for decoding.
func (s *pipelineStream) startReader(sc *sliceCut, share *loader.FetchShare) {
	if len(sc.refs) > 0 {
		pl := s.pl
		n := len(pl.cfg.slices)
		budget := pl.pieces.budgetFor(sliceShare(s.cfg.readAhead, n), sc.segs != nil)
		workers := max(runtime.GOMAXPROCS(0)/n, 1)
		opts := []loader.ReaderOption{loader.WithReaderReadAhead(budget), loader.WithReaderDecodeWorkers(workers), loader.WithReaderFetchShare(share),
			loader.WithReaderHeld(s.cfg.held)}
		if len(pl.toks) > 0 {
			// Kept rows are taken, then tokenized, as each record is decoded.
			opts = append(opts, loader.WithReaderTransform(prepareRead(pl.ds, pl.toks, pl.cutIn, pl.selection, sc.groups, sc.segs, sc.refs, workers, s.mem)))
		}
		// Pieces end on the pages of the widest compressed column where the
		// rows read are the rows pushed (a slice's pieces, a quarter of its
		// share, end inside a page about every other page otherwise).
		_, plain := sc.cut.(*batching.Cutter)
		sc.snap = plain && sc.segs != nil && snapped(pl.sels != nil, len(pl.toks) > 0, s.cfg.noSnap)
		opts = append(opts, loader.WithReaderSnapPieces(sc.snap))
		sc.rd = pl.ds.NewReader(s.ctx, sc.refs, s.mem, opts...)
	}
}

// readRefs returns the row groups that stream d's cutter will ask for from
// pos on, in that order (batching.Plan.StreamReads), and their indices in
// the plan: nothing earlier is read.
func (s *pipelineStream) readRefs(pos batching.Position, d int) ([]loader.RowGroupRef, []int) {
	idx := s.pl.plan.StreamReads(pos, d)
	refs := make([]loader.RowGroupRef, len(idx))
	for i, g := range idx {
		refs[i] = s.pl.refs[g]
	}
	return refs, idx
}

// closeEpoch releases the cutters and readers of the current epoch.
func (s *pipelineStream) closeEpoch() {
	closeSlices(s.slices)
	s.slices = nil
}

// closeSlices releases the cutters and readers of scs.
func closeSlices(scs []*sliceCut) {
	for _, sc := range scs {
		sc.cut.Release()
		if sc.rd != nil {
			sc.rd.Close()
		}
	}
}

// Next implements transport.Stream: the step's slices, one record per
// requested slice in slice order.
func (s *pipelineStream) Next(ctx context.Context) (transport.Step, error) {
	return nextUnder(ctx, s.closed, s.cancel, s.next)
}

// nextUnder runs next, the step of a stream, under ctx: an error after
// Close, ctx's error when it is done before or during next (cancel, the
// stream's own cancellation, runs when ctx ends), else next's result.
func nextUnder(ctx context.Context, closed bool, cancel func(), next func() (transport.Step, error)) (transport.Step, error) {
	if closed {
		return transport.Step{}, errors.New("feed: Next after Close")
	}
	if err := ctx.Err(); err != nil {
		return transport.Step{}, err
	}
	stop := context.AfterFunc(ctx, cancel)
	defer stop()
	step, err := next()
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return transport.Step{}, cerr
		}
		return transport.Step{}, err
	}
	return step, nil
}

// advance moves pos past the end of its epoch (closing that epoch's
// slices) and is io.EOF past pl's last epoch.
func advance(pl *pipelinePlan, pos *batching.Position, closeEpoch func()) error {
	if pos.Step >= pl.plan.StepsPerEpoch() {
		closeEpoch()
		*pos = batching.Position{Epoch: pos.Epoch + 1}
	}
	if pl.cfg.epochs > 0 && pos.Epoch >= pl.cfg.epochs {
		closeEpoch()
		return io.EOF
	}
	return nil
}

// newStep returns the step at pos with room for pl's slices and their real
// rows, to be cut.
func newStep(pl *pipelinePlan, pos batching.Position) transport.Step {
	n := len(pl.cfg.slices)
	return transport.Step{
		Slices: make([]arrow.RecordBatch, n),
		Meta:   transport.StepMeta{Epoch: pos.Epoch, Step: pos.Step, Slices: slices.Clone(pl.cfg.slices), RealRows: make([]int, n)},
	}
}

func (s *pipelineStream) next() (transport.Step, error) {
	if err := advance(s.pl, &s.pos, s.closeEpoch); err != nil {
		return transport.Step{}, err
	}
	if s.slices == nil {
		if err := s.openEpoch(); err != nil {
			return transport.Step{}, err
		}
	}
	step := newStep(s.pl, s.pos)
	if err := s.cutStep(step.Slices, step.Meta.RealRows); err != nil {
		step.Release()
		return transport.Step{}, err
	}
	s.pos.Step++
	s.readAhead()
	return step, nil
}

// cutStep cuts (and shapes) the slices of step s.pos into recs and their
// real rows into real, one slice after the other. (Cutting them on one
// goroutine each was measured on 2 cores with BenchmarkServePipeline and
// did not help: the readers already decode ahead in the background and
// cutting views of decoded row groups is cheap.) On error, the records cut
// so far are left in recs for the caller to release.
func (s *pipelineStream) cutStep(recs []arrow.RecordBatch, real []int) error {
	for i, sc := range s.slices {
		var err error
		if recs[i], real[i], err = s.cutShaped(sc); err != nil {
			return err
		}
	}
	return nil
}

// cutShaped returns the next slice of sc's stream, shaped, and its real
// rows. Errors are wrapped with the step and slice and mapped to this
// package's sentinels.
func (s *pipelineStream) cutShaped(sc *sliceCut) (arrow.RecordBatch, int, error) {
	pl := s.pl
	rec, real, err := s.cutSlice(sc)
	if err != nil {
		return nil, 0, fmt.Errorf("feed: epoch %d step %d slice %d: %w", s.pos.Epoch, s.pos.Step, sc.d, err)
	}
	if pl.shaper != nil {
		shaped, err := pl.shaper.Apply(rec, s.mem)
		rec.Release()
		if err != nil {
			return nil, 0, fmt.Errorf("feed: epoch %d step %d slice %d (%s; the row named below counts from the slice's first row)%s: %w",
				s.pos.Epoch, s.pos.Step, sc.d, s.sliceRows(sc.d), s.source(sc.d, err), err)
		}
		rec = shaped
		if pl.cfg.packed {
			real = int(rec.NumRows()) // packed rows; drop and raise deliver full slices
		}
	}
	return rec, real, nil
}

// sliceRows names the rows of the current step's slice d: "rows F..L of
// stream d", or, in the epoch of an elastic switch, of remainder stream d.
func (s *pipelineStream) sliceRows(d int) string {
	b := s.pl.plan.SliceRows()
	if s.pl.rem != nil && s.pos.Epoch == s.pl.rem.Switch().Epoch {
		sw := s.pl.rem.Switch()
		i := s.pos.Step - sw.Step
		return fmt.Sprintf("rows %d..%d of remainder stream %d of the elastic switch from num_slices %d at step %d", i*b, (i+1)*b-1, d, sw.FromD, sw.Step)
	}
	return fmt.Sprintf("rows %d..%d of stream %d", s.pos.Step*b, (s.pos.Step+1)*b-1, d)
}

// source names the file row that a shaping error of a row of the current
// step's slice of stream d is about: ", from FILE row group G row R (row F
// of the file)", or "" when the error names no row or the slice is packed
// (its rows are not the stream's).
func (s *pipelineStream) source(d int, err error) string {
	var re *shape.RowError
	if s.pl.cfg.packed || !errors.As(err, &re) || (s.pl.rem != nil && s.pos.Epoch == s.pl.rem.Switch().Epoch) {
		return "" // packed rows, or an elastic epoch: not the plan's streams
	}
	q := int64(s.pos.Step*s.pl.plan.SliceRows() + re.Row)
	g, row, ok := s.pl.plan.SourceRow(s.pos.Epoch, d, q)
	if !ok {
		return ", a padding row"
	}
	ref := s.pl.refs[g]
	if s.pl.sels != nil && s.pl.sels[g] != nil {
		row, _ = s.pl.sels[g].Physical(row, row+1) // the plan numbers the kept rows
	}
	fileRow := row
	for _, m := range s.pl.ds.Files[ref.File].RowGroups[:ref.Index] {
		fileRow += m.Rows
	}
	return fmt.Sprintf(", from %s row group %d row %d (row %d of the file)", s.pl.ds.Files[ref.File].Object.URI, ref.Index, row, fileRow)
}

// cutSlice returns the next slice of sc's stream, pushing the row groups its
// cutter asks for.
func (s *pipelineStream) cutSlice(sc *sliceCut) (arrow.RecordBatch, int, error) {
	for {
		rec, real, ok, err := sc.cut.Next()
		if err != nil {
			return nil, 0, err
		}
		if ok {
			return rec, real, nil
		}
		seg, want := sc.cut.Wants()
		if !want {
			return nil, 0, fmt.Errorf("stream %d: the cutter has no slice for step %d and wants no row group (done=%v)", sc.d, sc.cut.Step(), sc.cut.Done())
		}
		if sc.rd == nil || sc.got >= len(sc.refs) {
			return nil, 0, fmt.Errorf("stream %d: the cutter wants row group %d past the %d row groups read", sc.d, seg.RowGroup, len(sc.refs))
		}
		if err := s.ctx.Err(); err != nil {
			return nil, 0, err
		}
		rg, ref, err := sc.rd.Next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = fmt.Errorf("stream %d: reader ended after %d of %d row groups", sc.d, sc.got, len(sc.refs))
			}
			return nil, 0, err
		}
		read := sc.refs[sc.got]
		if sc.segs != nil {
			seg = sc.segs[sc.got]
		}
		if sc.snap {
			err := s.pushSnapped(sc, rg, ref, seg.RowGroup)
			rg.Release()
			if err != nil {
				return nil, 0, err
			}
			continue
		}
		sc.got++
		if exp := s.pl.refs[seg.RowGroup]; ref.File != exp.File || ref.Index != exp.Index {
			rg.Release()
			return nil, 0, fmt.Errorf("stream %d: read file %d row group %d, but the cutter wants file %d row group %d",
				sc.d, ref.File, ref.Index, exp.File, exp.Index)
		}
		if len(s.pl.toks) == 0 { // else the reader took the kept rows (prepareRead)
			if rg, err = s.selectRows(rg, seg, read, sc.segs != nil); err != nil {
				return nil, 0, fmt.Errorf("%s row group %d: %w", s.pl.ds.Files[ref.File].Object.URI, ref.Index, err)
			}
		}
		err = sc.cut.Push(rg, seg)
		rg.Release()
		if err != nil {
			return nil, 0, fmt.Errorf("%s row group %d: %w", s.pl.ds.Files[ref.File].Object.URI, ref.Index, err)
		}
	}
}

// pushSnapped pushes rec, the rows ref names of the plan's row group g, to
// sc's cutter, read by a reader that moved its pieces' ends to page breaks
// (snap.go), and counts the refs it covered. The caller keeps its
// reference to rec.
func (s *pipelineStream) pushSnapped(sc *sliceCut, rec arrow.RecordBatch, ref loader.RowGroupRef, g int) error {
	if exp := s.pl.refs[g]; ref.File != exp.File || ref.Index != exp.Index {
		return fmt.Errorf("stream %d: read file %d row group %d, but the cutter wants file %d row group %d",
			sc.d, ref.File, ref.Index, exp.File, exp.Index)
	}
	n, err := pushRead(sc.cut, sc.segs, sc.got, g, rec, ref)
	sc.got += n
	if err != nil {
		return fmt.Errorf("%s row group %d: %w", s.pl.ds.Files[ref.File].Object.URI, ref.Index, err)
	}
	return nil
}

// Close implements Stream: it stops the readers and releases the cutters and
// everything they hold.
func (s *pipelineStream) Close() error {
	if s.closed {
		return nil
	}
	s.closed = true
	s.cancel()
	s.closeEpoch()
	closeSlices(s.ahead)
	s.ahead = nil
	if s.unreserve != nil {
		s.unreserve()
	}
	return nil
}
