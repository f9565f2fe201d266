package feed

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/meshfeed/meshfeed/batching"
	"github.com/meshfeed/meshfeed/internal/arrowmem"
	"github.com/meshfeed/meshfeed/loader"
	"github.com/meshfeed/meshfeed/transport"
)

// concatStream is one DoGet of a concatenated-packing request: per slice,
// a reader of the documents its stream's tokens come from (from the
// documents holding the start step's first token on, whole shuffle windows
// when there is one), tokenized as they arrive, and packed into rows of L
// tokens step by step (batching.PackRuns).
type concatStream struct {
	pl     *pipelinePlan
	cp     *concatPlan
	cfg    *pipelineConfig
	mem    memory.Allocator
	ctx    context.Context
	cancel context.CancelFunc
	pos    batching.Position
	slices []*concatSlice // nil between epochs
	ahead  []*concatSlice // the next epoch's, opened once every slice has read all of its own (openAhead)
	closed bool

	unreserve func()
}

// concatSlice is one slice's documents of one epoch: the tokens of the
// documents at stream positions [chunks[0].first, held) (before the
// shuffle window's permutation: the order they are read in), as its
// reader tokenized them (packconcat_docs.go).
type concatSlice struct {
	d      int
	rd     *loader.RowGroupReader // nil: the slice reads nothing
	refs   []loader.RowGroupRef   // what rd reads, in order
	segs   []batching.Segment     // per ref, the plan's rows it holds (the kept rows' numbering under filters)
	got    int
	ready  atomic.Int32 // reads its reader has tokenized
	held   int64
	chunks []docChunk
	cur    batching.ConcatCursor // the block of documents the last runs went through
}

// openConcat opens the stream of a concatenated plan at its start position.
func (p *Pipeline) openConcat(ctx context.Context, pl *pipelinePlan, mem memory.Allocator, unreserve func()) (transport.Stream, error) {
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s := &concatStream{pl: pl, cp: pl.concat, cfg: &p.cfg, mem: mem, ctx: sctx, cancel: cancel, pos: pl.cfg.start, unreserve: unreserve}
	s.openEpoch()
	return s, nil
}

// Schema implements transport.Stream.
func (s *concatStream) Schema() *arrow.Schema { return s.pl.schema }

// openEpoch opens every slice's reader for epoch s.pos.Epoch from step
// s.pos.Step.
func (s *concatStream) openEpoch() {
	s.slices = s.openSlices()
}

// openAhead opens the next epoch's readers once every slice's reader has
// tokenized all of the current epoch's row groups (none is read any more:
// what they hold is ids, limits.go counts them beside the next epoch's),
// so that the next epoch's first row groups are read and tokenized while
// the current epoch's last steps are packed.
func (s *concatStream) openAhead() {
	if s.ahead != nil {
		return
	}
	for _, sc := range s.slices {
		if sc.rd != nil && int(sc.ready.Load()) < len(sc.refs) {
			return
		}
	}
	next := batching.Position{Epoch: s.pos.Epoch + 1}
	if e := s.pl.cfg.epochs; e > 0 && next.Epoch >= e {
		return
	}
	cur := s.pos
	s.pos = next
	s.ahead = s.openSlices()
	s.pos = cur
}

// openSlices opens every slice's reader for epoch s.pos.Epoch from step
// s.pos.Step.
func (s *concatStream) openSlices() []*concatSlice {
	cp := s.cp.plan
	n := len(s.pl.cfg.slices)
	var out []*concatSlice
	for _, d := range s.pl.cfg.slices {
		sc := &concatSlice{d: d}
		lo, hi := s.streamTokens(d)
		_, _, r0, r1 := cp.DocRange(s.pos.Epoch, lo, hi)
		sc.held = r0
		for _, seg := range cp.ReadSegments(s.pos.Epoch, r0, r1) {
			ref := s.pl.refs[seg.RowGroup]
			lo, hi := seg.Start, seg.End
			if sel := s.pl.selection(seg.RowGroup); sel != nil {
				lo, hi = sel.Physical(lo, hi) // the physical rows holding the kept ones
			}
			if lo != 0 || hi != ref.Rows {
				ref.Start, ref.End = lo, hi
			}
			sc.refs, sc.segs = append(sc.refs, ref), append(sc.segs, seg)
		}
		if len(sc.refs) > 0 {
			sc.rd = s.pl.ds.NewReader(s.ctx, sc.refs, s.mem,
				loader.WithReaderReadAhead(sliceShare(s.cfg.readAhead, n)),
				loader.WithReaderDecodeWorkers(s.readerWorkers()),
				// Kept rows are taken, then tokenized, as each record is
				// decoded, ahead of the step that needs them.
				loader.WithReaderTransform(s.concatRead(sc.refs, sc.segs, &sc.ready, s.readerWorkers())))
		}
		out = append(out, sc)
	}
	return out
}

// elastic returns the remainder of an elastic switch when the current
// epoch is the switch's, else nil.
func (s *concatStream) elastic() *batching.Remainder {
	if rem := s.cp.rem; rem != nil && s.pos.Epoch == rem.Switch().Epoch {
		return rem
	}
	return nil
}

// streamTokens returns the tokens slice d delivers from s.pos to the end of
// the epoch: one range of the epoch's sequence, or in an elastic switch's
// epoch the span from its first piece's tokens to its last's (the tokens
// between them, which other slices delivered before the switch, are read
// and skipped).
func (s *concatStream) streamTokens(d int) (lo, hi int64) {
	cp := s.cp.plan
	rem := s.elastic()
	if rem == nil {
		return cp.StreamTokens(s.pos, d)
	}
	ps := rem.Pieces(s.pos.Step, d)
	if len(ps) == 0 {
		return 0, 0
	}
	first, last := ps[0], ps[len(ps)-1]
	return cp.RowTokens(rem.Old().StreamStart(first.Stream)+first.From, rem.Old().StreamStart(last.Stream)+last.To)
}

// stepRows returns the packed rows (ranges of the epoch's sequence) that
// slice d holds at step s.pos.Step, and how many they are; the slice's
// other rows are padding.
func (s *concatStream) stepRows(d int) ([][2]int64, int) {
	cp := s.cp.plan
	if rem := s.elastic(); rem != nil {
		return cp.RemainderRows(rem, s.pos.Step, d), rem.SliceReal(s.pos.Step, d)
	}
	real := cp.SliceReal(s.pos.Step, d)
	if real == 0 {
		return nil, 0
	}
	row := cp.RowsPlan().StreamStart(d) + int64(s.pos.Step*cp.SliceRows())
	return [][2]int64{{row, row + int64(real)}}, real
}

// closeEpoch stops the epoch's readers.
func (s *concatStream) closeEpoch() {
	closeConcatSlices(s.slices)
	s.slices = nil
}

// closeConcatSlices stops the readers of ss and releases what they hold.
func closeConcatSlices(ss []*concatSlice) {
	for _, sc := range ss {
		if sc.rd != nil {
			sc.rd.Close()
		}
		sc.release()
	}
}

// Next implements transport.Stream.
func (s *concatStream) Next(ctx context.Context) (transport.Step, error) {
	return nextUnder(ctx, s.closed, s.cancel, s.next)
}

func (s *concatStream) next() (transport.Step, error) {
	if err := advance(s.pl, &s.pos, s.closeEpoch); err != nil {
		return transport.Step{}, err
	}
	if s.slices == nil && s.ahead != nil && s.pos.Step == 0 {
		s.slices, s.ahead = s.ahead, nil
	}
	if s.slices == nil {
		s.openEpoch()
	}
	step := newStep(s.pl, s.pos)
	for i, sc := range s.slices {
		rec, real, err := s.pack(sc)
		if err != nil {
			step.Release()
			return transport.Step{}, fmt.Errorf("feed: epoch %d step %d slice %d: %w", s.pos.Epoch, s.pos.Step, sc.d, err)
		}
		step.Slices[i], step.Meta.RealRows[i] = rec, real
	}
	s.pos.Step++
	s.openAhead()
	return step, nil
}

// pack returns slice sc's packed rows of step s.pos and how many hold tokens.
func (s *concatStream) pack(sc *concatSlice) (arrow.RecordBatch, int, error) {
	cp := s.cp.plan
	b, l := cp.SliceRows(), cp.Length()
	bufs := [3]*memory.Buffer{}
	vals := [3][]int32{}
	for i := range bufs {
		bufs[i] = arrowmem.NewOverwriteBuffer(s.mem, 4*b*l)
		vals[i] = unsafe.Slice((*int32)(unsafe.Pointer(unsafe.SliceData(bufs[i].Bytes()))), b*l)
	}
	ranges, real := s.stepRows(sc.d)
	at, last := 0, int64(-1)
	for _, rr := range ranges {
		runs, err := s.runs(sc, rr)
		if err != nil {
			for _, buf := range bufs {
				buf.Release()
			}
			return nil, 0, err
		}
		n := int(rr[1] - rr[0])
		batching.PackRuns(runs, l, sc.doc, s.cp.eod, s.cp.col.fill, vals[0][at*l:(at+n)*l], vals[1][at*l:(at+n)*l], vals[2][at*l:(at+n)*l])
		at += n
		if len(runs) > 0 {
			last = runs[len(runs)-1].Doc
		}
	}
	batching.PackRuns(nil, l, sc.doc, s.cp.eod, s.cp.col.fill, vals[0][at*l:], vals[1][at*l:], vals[2][at*l:])
	if last >= 0 {
		sc.drop(cp.WindowStart(last))
	}
	return concatRecord(s.pl.schema, bufs, b, l, real, s.mem), real, nil
}

// runs returns the document runs of packed rows rr, their documents read
// and tokenized, each checked against the count planned.
func (s *concatStream) runs(sc *concatSlice, rr [2]int64) ([]batching.DocRun, error) {
	cp := s.cp.plan
	lo, hi := cp.RowTokens(rr[0], rr[1])
	runs := cp.RunsAt(&sc.cur, s.pos.Epoch, lo, hi)
	if len(runs) == 0 {
		return nil, nil
	}
	if err := s.fill(sc, cp.WindowEnd(runs[len(runs)-1].Doc)); err != nil {
		return nil, err
	}
	for _, r := range runs {
		if got := sc.docLen(r.Raw); got != r.Tokens {
			ref := s.pl.refs[r.RowGroup]
			return nil, fmt.Errorf("%w: %s row group %d row %d: column %q has %d tokens, but the token-count index planned %d: the index is not of this tokenizer and file (rebuild it with meshfeed index)",
				transport.ErrFailedPrecondition, s.pl.ds.Files[ref.File].Object.URI, ref.Index, r.Row, s.cp.col.name, got, r.Tokens)
		}
	}
	return runs, nil
}

// concatRecord builds the slice's record from its three buffers of b*l
// int32 (which it takes over) and, under pad, the mask of real rows.
func concatRecord(schema *arrow.Schema, bufs [3]*memory.Buffer, b, l, real int, mem memory.Allocator) arrow.RecordBatch {
	cols := make([]arrow.Array, 0, schema.NumFields())
	defer func() {
		for _, c := range cols {
			c.Release()
		}
	}()
	for i, buf := range bufs {
		child := array.NewData(arrow.PrimitiveTypes.Int32, b*l, []*memory.Buffer{nil, buf}, nil, 0, 0)
		data := array.NewData(schema.Field(i).Type, b, []*memory.Buffer{nil}, []arrow.ArrayData{child}, 0, 0)
		cols = append(cols, array.MakeFromData(data))
		data.Release()
		child.Release()
		buf.Release()
	}
	if schema.NumFields() > 3 {
		mb := array.NewBooleanBuilder(mem)
		defer mb.Release()
		mb.Reserve(b)
		for i := range b {
			mb.UnsafeAppend(i < real)
		}
		cols = append(cols, mb.NewArray())
	}
	return array.NewRecordBatch(schema, cols, int64(b))
}

// fill takes the tokenized documents from sc's reader until stream
// position need is held.
func (s *concatStream) fill(sc *concatSlice, need int64) error {
	for sc.held < need {
		if sc.rd == nil || sc.got >= len(sc.refs) {
			return fmt.Errorf("stream %d needs document %d past the %d row groups read (internal error)", sc.d, need-1, len(sc.refs))
		}
		if err := s.ctx.Err(); err != nil {
			return err
		}
		rec, _, err := sc.rd.Next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = fmt.Errorf("stream %d: reader ended after %d of %d row groups", sc.d, sc.got, len(sc.refs))
			}
			return err
		}
		sc.got++
		if err := sc.hold(rec); err != nil {
			return err
		}
	}
	return nil
}

// Close implements transport.Stream.
func (s *concatStream) Close() error {
	if s.closed {
		return nil
	}
	s.closed = true
	s.cancel()
	s.closeEpoch()
	closeConcatSlices(s.ahead)
	s.ahead = nil
	if s.unreserve != nil {
		s.unreserve()
	}
	return nil
}
