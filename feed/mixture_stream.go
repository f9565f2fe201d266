package feed

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/meshfeed/meshfeed/batching"
	"github.com/meshfeed/meshfeed/filter"
	"github.com/meshfeed/meshfeed/loader"
	"github.com/meshfeed/meshfeed/transport"
)

// mixStream is one DoGet of a mixture.
type mixStream struct {
	mp      *mixturePlan
	mem     memory.Allocator
	ctx     context.Context // the readers'
	cancel  context.CancelFunc
	walk    *batching.Walker
	ahead   *mixAhead // the steps' ends the cursors' pieces are cut on
	counts  []int64
	curs    [][]*mixCursor        // [source][index in mp.slices]
	cols    *batching.PartColumns // the constant columns of the slices' parts
	budget  int64                 // read-ahead per cursor, evenly (mixturePieces, where the steps ahead are not known)
	share   int64                 // read-ahead per slice (sliceShare), which the slice's cursors split
	workers int
	closed  bool
	noSnap  bool // pipelineConfig.noSnap
	// partsBuf, realsBuf and srcsBuf are slice's scratch, kept for the
	// next slice.
	partsBuf  []arrow.RecordBatch
	realsBuf  []int64
	srcsBuf   []int32
	noGate    bool // pipelineConfig.noGate
	unreserve func()
	// place places the slices as the readers decode their rows
	// (mixture_place.go); nil: the slices are the cursors' parts.
	place *placer
}

// mixCursor reads one source's stream of one slice: a SourceCursor and the
// reader of the source epoch it is in.
type mixCursor struct {
	src   *mixSource
	d     int
	k     int // d's index in the request's slices
	cur   *batching.SourceCursor
	epoch int // the cursor's Phase (epoch, or piece of an elastic remainder) rd reads; -1 for none
	rd    *loader.RowGroupReader
	segs  []batching.Segment   // what rd reads, in order
	refs  []loader.RowGroupRef // the refs of segs (pieces of physical rows)
	got   int
	// next is where rd's reads end in the cursor's sequence (the
	// composition's count, Walker.Cum): the next reader reads from there.
	next int64
	// piece and budget: the bytes of rd's pieces (stepPieces; 0 when cut
	// otherwise) and its budget in flight.
	piece, budget int64
	// snap: rd moves its pieces' ends to page breaks
	// (loader.WithReaderSnapPieces), so a record it returns holds the
	// rows its ref names, which may cover several of segs or parts of them.
	snap bool
	// reads and done count the records the cursor's readers returned and
	// the pieces of segs they covered (tests).
	reads, done int
	// take is the rows a step takes from the cursor's source, on average
	// over the steps rd's pieces were cut on (stepPieces; 0 otherwise).
	take float64
	gate *gateState // rd's gate's view of the cursor; nil when not gated
}

// openMixture opens a stream over mp from the request's start step. The
// stream's read-ahead budget is shared by every (source, slice) reader.
// place: its slices may be placed (mixture_place.go; OpenWith's streams,
// whose buffers travel in place), else they are always parts.
func (p *Pipeline) openMixture(ctx context.Context, req *transport.Request, mem memory.Allocator, place bool) (transport.Stream, error) {
	mp, err := p.planMixture(ctx, req)
	if err != nil {
		return nil, err
	}
	if start := req.Start.Step; start >= mp.mix.Steps() {
		return nil, fmt.Errorf("feed: %w: start step %d is past the %d steps of the mixture (steps run 0..%d)",
			transport.ErrFailedPrecondition, start, mp.mix.Steps(), mp.mix.Steps()-1)
	}
	reserved, err := p.reserveMixture(ctx, mp)
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	n := len(mp.slices) * len(mp.srcs)
	s := &mixStream{mp: mp, mem: mem, ctx: sctx, cancel: cancel, walk: mp.mix.Composition().Walk(),
		counts: make([]int64, len(mp.srcs)), budget: sliceShare(p.cfg.readAhead, n),
		share:     sliceShare(p.cfg.readAhead, len(mp.slices)),
		workers:   max(runtime.GOMAXPROCS(0)/n, 1),
		noSnap:    p.cfg.noSnap,
		noGate:    p.cfg.noGate,
		unreserve: func() { p.serverLimits().Memory.Unreserve(reserved) }}
	if mp.packer == nil {
		s.cols = batching.NewPartColumns(mem, mp.in, mp.schema, len(mp.srcs), int64(mp.mix.SliceRows()))
	}
	if err := s.walk.Skip(req.Start.Step); err != nil {
		s.Close()
		return nil, err
	}
	if s.ahead, err = newMixAhead(mp.mix, req.Start.Step); err != nil {
		s.Close()
		return nil, err
	}
	s.place = newPlacer(mp, mem, s.walk, s.workers, !place || p.cfg.noPlace || s.share <= 0)
	for i, src := range mp.srcs {
		var row []*mixCursor
		for k, d := range mp.slices {
			cut := src.cutIn
			if s.place != nil {
				cut = s.place.empty // the cursor counts rows; the readers place them
			}
			cur, err := mp.mix.NewCursor(i, d, s.walk.Cum()[i], mem, batching.WithSchema(cut))
			if err != nil {
				s.Close()
				return nil, fmt.Errorf("feed: mixture %s slice %d: %w", src.name, d, err)
			}
			mc := &mixCursor{src: src, d: d, k: k, cur: cur, epoch: -1, next: s.walk.Cum()[i]}
			row = append(row, mc)
			s.startReader(mc)
		}
		s.curs = append(s.curs, row)
	}
	return s, nil
}

// mixtureHold is the most a mixture's cursors hold, as a multiple of the
// read-ahead budget they share, and the stream reserves that much: cut on
// the steps' ends (stepPieces) the cursors of a slice hold one slice's
// share (or three one-step pieces each, where a step's take is over a
// quarter of a cursor's part), and a cursor cut on an even share where no
// step ahead takes from its source (mixturePieces) holds at most one and a
// half shares.
const mixtureHold = 1.5

// reserveMixture takes the stream's memory from the server's account: what
// the cursors may hold of the read-ahead budget (mixtureHold times the one
// budget the sources share, or that budget and two steps' reads where
// one-step pieces exceed it), the sources' shuffle windows, a fixed cost
// per reader and two steps.
func (p *Pipeline) reserveMixture(ctx context.Context, mp *mixturePlan) (int64, error) {
	l := p.serverLimits()
	if l.Memory == nil {
		return 0, nil
	}
	n := float64(len(mp.slices))
	// One-step pieces may hold two steps' reads over the read-ahead
	// (stepPieces: three pieces a cursor where a step's take is over a
	// quarter of its part).
	var perRow float64
	for _, s := range mp.srcs {
		r, _ := s.ds.StreamedRowBytes()
		perRow = max(perRow, r)
	}
	ra := float64(p.cfg.readAhead)
	hold := max(mixtureHold*ra, ra+2*n*float64(mp.mix.SliceRows())*perRow)
	total := hold + 2*mp.stepBytes()
	for _, s := range mp.srcs {
		total += n * (sliceOverhead + float64(s.window)*tokenRowBytes(s.toks, s.ds.ArrowRowBytes()))
		total += tokensAhead(s.toks, s.ds, float64(p.cfg.readAhead)) // a bound: the sources share the budget
	}
	if l.MemoryBudget > 0 && total+mp.stepBytes() > float64(l.MemoryBudget) {
		return 0, fmt.Errorf("feed: %w: this mixture's stream needs about %.0f bytes of memory (the cursors' pieces, up to %.0f bytes for the read-ahead of %d; %d sources' windows and readers, three steps), over the server's memory budget of %d bytes (--memory-budget): ask for fewer slices per request or smaller shuffle windows, or raise --memory-budget",
			transport.ErrTooLarge, total+mp.stepBytes(), hold, p.cfg.readAhead, len(mp.srcs), l.MemoryBudget)
	}
	if err := l.Memory.Reserve(ctx, int64(total)); err != nil {
		return 0, fmt.Errorf("feed: waiting for %d bytes of the server's memory budget for this mixture: %w", int64(total), err)
	}
	return int64(total), nil
}

// startReader gives mc a reader of what its cursor's current epoch reads
// from where its last reader stopped, in pieces that fit its share of the
// budget: cut on the steps' ends (stepPieces) where the composition's steps
// ahead are known, else of half its even share (mixturePieces).
func (s *mixStream) startReader(mc *mixCursor) {
	if mc.rd != nil {
		mc.rd.Close()
		mc.rd = nil
	}
	mc.epoch, mc.got = mc.cur.Phase(), 0
	budget := s.budget
	mc.segs, mc.piece, mc.take = nil, 0, 0
	if s.share > 0 {
		if perRow, whole := mc.src.ds.StreamedRowBytes(); perRow > 0 {
			var ok bool
			if mc.segs, budget, mc.piece, ok = s.stepPieces(mc, perRow, whole); !ok {
				if s.place != nil {
					// No step ahead takes a row of the source: placed now,
					// its rows would hold slices of steps far ahead. Its
					// reader starts when a step takes from it (push).
					mc.segs = nil
					return
				}
				var pieceRows int64
				pieceRows, budget = mixturePieces(s.budget, perRow, whole)
				mc.segs = mc.cur.Cutter().Reads(pieceRows)
			}
		}
	}
	if mc.segs == nil {
		mc.segs = mc.cur.Cutter().Reads(0)
	}
	if len(mc.segs) == 0 {
		return
	}
	refs := make([]loader.RowGroupRef, len(mc.segs))
	start := mc.next
	for i, g := range mc.segs {
		refs[i] = keptRef(mc.src.refs[g.RowGroup], mc.src.selection(g.RowGroup), g)
		mc.next += g.Len()
	}
	mc.refs = refs
	mc.budget = budget
	if mc.src.window > 0 {
		_, whole := mc.src.ds.StreamedRowBytes()
		budget = max(budget, windowCost(mc.src.ds, mc.src.window, whole))
	}
	opts := []loader.ReaderOption{loader.WithReaderReadAhead(budget), loader.WithReaderDecodeWorkers(s.workers)}
	// Pieces end on the pages of the widest compressed column where the
	// rows read are the rows pushed: a cursor's pieces (a few steps' takes
	// of its source) are often smaller than a page, and a page two pieces
	// cut is decompressed to scratch and copied out by both.
	mc.snap = snapped(mc.src.sels != nil, len(mc.src.toks) > 0, s.noSnap)
	opts = append(opts, loader.WithReaderSnapPieces(mc.snap))
	mc.gate = nil
	if mc.snap && !s.noGate {
		mc.gate = &gateState{}
		opts = append(opts, loader.WithReaderGate(pieceGate(mc.gate, mc.take, mc.src.window)))
	}
	if src := mc.src; len(src.toks) > 0 {
		// Kept rows are taken, then tokenized, as each piece is decoded.
		opts = append(opts, loader.WithReaderTransform(prepareRead(src.ds, src.toks, src.cutIn, src.selection, nil, mc.segs, refs, s.workers, s.mem)))
	}
	if s.place != nil {
		into, xform := s.placeRead(mc, mc.segs, refs, start)
		opts = append(opts, loader.WithReaderInto(into), loader.WithReaderTransform(xform))
	}
	mc.rd = mc.src.ds.NewReader(s.ctx, refs, s.mem, opts...)
}

// Schema implements transport.Stream.
func (s *mixStream) Schema() *arrow.Schema { return s.mp.schema }

// Next implements transport.Stream.
func (s *mixStream) Next(ctx context.Context) (transport.Step, error) {
	return nextUnder(ctx, s.closed, s.cancel, s.next)
}

func (s *mixStream) next() (transport.Step, error) {
	mix := s.mp.mix
	st := s.walk.Step()
	if st >= mix.Steps() {
		return transport.Step{}, io.EOF
	}
	pos := slices.Clone(s.walk.Cum())
	if err := s.walk.Next(s.counts); err != nil {
		return transport.Step{}, err
	}

	step := transport.Step{
		Meta: transport.StepMeta{Epoch: 0, Step: st, Slices: slices.Clone(s.mp.slices), RealRows: make([]int, len(s.mp.slices))},
	}
	for k, d := range s.mp.slices {
		var recs []arrow.RecordBatch
		var real int64
		var err error
		if s.place != nil {
			var rec arrow.RecordBatch
			if rec, err = s.slicePlaced(st, k); err == nil {
				recs, real = []arrow.RecordBatch{rec}, rec.NumRows()
			}
		} else {
			recs, real, err = s.slice(st, k, d, pos)
		}
		if err != nil {
			step.Release()
			return transport.Step{}, fmt.Errorf("feed: mixture step %d slice %d: %w", st, d, err)
		}
		step.Slices, step.Meta.RealRows[k] = append(step.Slices, recs...), int(real)
	}
	for _, row := range s.curs {
		for _, mc := range row {
			if g := mc.gate; g != nil {
				g.ahead.Store(mc.cur.Cutter().Ahead())
				g.poke()
			}
		}
	}
	if s.place != nil {
		s.place.tbl.trim(st + 1)
	}
	return step, nil
}

// slicePlaced takes slice k of step st's rows from its cursors (records
// without columns: their readers placed the rows as they decoded them) and
// returns the slice the readers filled.
func (s *mixStream) slicePlaced(st, k int) (arrow.RecordBatch, error) {
	for i, n := range s.counts {
		mc := s.curs[i][k]
		for need := n; need > 0; {
			got, ok, err := mc.cur.Skip(need) // the rows are in the slice
			if err != nil {
				return nil, fmt.Errorf("%s: %w", mc.src.name, err)
			}
			if !ok {
				if err := s.push(mc); err != nil {
					return nil, err
				}
				continue
			}
			need -= got
		}
	}
	return s.place.record(st, k)
}

// slice builds slice d (the k-th of the request) of step st: each source's
// rows of the step, shaped, in the step's source order, as parts (views of
// the sources' records, PartColumns.Parts), not joined: the transport joins
// them as it sends them, where it copies the step anyway (the
// shared-memory wire's slot) or without a copy (Flight). With packing, the
// packer joins them, packing the parts' sequences into one new record
// (each copied once), and the slice is that record.
func (s *mixStream) slice(st, k, d int, pos []int64) ([]arrow.RecordBatch, int64, error) {
	mix := s.mp.mix
	parts, reals, srcs := s.partsBuf[:0], s.realsBuf[:0], s.srcsBuf[:0]
	defer func() {
		for _, p := range parts {
			p.Release()
		}
		clear(parts)
		s.partsBuf, s.realsBuf, s.srcsBuf = parts[:0], reals[:0], srcs[:0]
	}()
	var total int64
	for _, i := range mix.Order(st, d) {
		n := s.counts[i]
		if n == 0 {
			continue
		}
		real := mix.Real(st, int(i), d, pos[i], n)
		var err error
		if parts, reals, err = s.parts(s.curs[i][k], real, n, parts, reals); err != nil {
			return nil, 0, err
		}
		for len(srcs) < len(parts) {
			srcs = append(srcs, i)
		}
		total += real
	}
	if pk := s.mp.packer; pk != nil {
		rec, err := pk.ApplyParts(parts, s.mp.req.Mixture.SourceColumn, srcs, s.mem)
		if err != nil {
			return nil, 0, fmt.Errorf("packing the slice's %d rows (sources in order %v; the row named counts from the slice's first row): %w", total, mix.Order(st, d), err)
		}
		return []arrow.RecordBatch{rec}, rec.NumRows(), nil
	}
	recs, err := s.cols.Parts(parts, reals, srcs)
	return recs, total, err
}

// parts appends to parts the next real rows of mc's sequence (views of the
// decoded records where they can be: one part per record they lie in) and
// n-real padding rows, each renamed and shaped to the mixture's common
// schema, and their real rows to reals.
func (s *mixStream) parts(mc *mixCursor, real, n int64, parts []arrow.RecordBatch, reals []int64) ([]arrow.RecordBatch, []int64, error) {
	for need := real; need > 0; {
		rec, ok, err := mc.cur.Take(need)
		if err != nil {
			return parts, reals, fmt.Errorf("%s: %w", mc.src.name, err)
		}
		if !ok {
			if err := s.push(mc); err != nil {
				return parts, reals, err
			}
			continue
		}
		need -= rec.NumRows()
		out, err := s.shapePart(mc.src, rec)
		if err != nil {
			return parts, reals, err
		}
		parts, reals = append(parts, out), append(reals, out.NumRows())
	}
	if real < n {
		pad, err := batching.PadRecord(s.mem, mc.src.cutIn, nil, int(n-real))
		if err != nil {
			return parts, reals, err
		}
		out, err := s.shapePart(mc.src, pad)
		if err != nil {
			return parts, reals, err
		}
		parts, reals = append(parts, out), append(reals, 0)
	}
	return parts, reals, nil
}

// shapePart renames and shapes rec (released) into the common schema; rec
// itself where it needs neither and no packer reads the parts' names.
func (s *mixStream) shapePart(src *mixSource, rec arrow.RecordBatch) (arrow.RecordBatch, error) {
	if src.shaper == nil && s.mp.packer == nil {
		// The same columns as the common schema's; PartColumns.Parts reads
		// a part's columns, not its names.
		return rec, nil
	}
	if src.shaper == nil { // renamed is the common schema: the same columns
		out := array.NewRecordBatch(s.mp.in, rec.Columns(), rec.NumRows())
		rec.Release()
		return out, nil
	}
	renamed := array.NewRecordBatch(src.renamed, rec.Columns(), rec.NumRows())
	rec.Release()
	if src.shaper != nil {
		shaped, err := src.shaper.Apply(renamed, s.mem)
		renamed.Release()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", src.name, err)
		}
		renamed = shaped
	}
	out := array.NewRecordBatch(s.mp.in, renamed.Columns(), renamed.NumRows())
	renamed.Release()
	return out, nil
}

// push feeds mc's cutter the next record of its reader, opening the reader
// of a new source epoch when the cursor has moved on to one.
func (s *mixStream) push(mc *mixCursor) error {
	cut := mc.cur.Cutter()
	if mc.cur.Phase() != mc.epoch {
		s.startReader(mc)
	}
	if _, want := cut.Wants(); want && mc.got >= len(mc.segs) && (mc.rd != nil || s.place != nil) {
		// The reader read its steps ahead (stepPieces): the next one
		// continues (placed, one may not have started: startReader).
		s.startReader(mc)
	}
	seg, want := cut.Wants()
	if !want || mc.rd == nil || mc.got >= len(mc.segs) {
		return fmt.Errorf("%s stream %d: the cutter wants rows past what its reader reads (internal error)", mc.src.name, mc.d)
	}
	if err := s.ctx.Err(); err != nil {
		return err
	}
	if g := mc.gate; g != nil {
		g.waiting.Store(true) // its gate opens: the cursor needs the reader's next record now
		g.poke()
		defer func() {
			g.waiting.Store(false)
			g.ahead.Store(cut.Ahead())
		}()
	}
	rg, ref, err := mc.rd.Next()
	if err == nil && mc.gate != nil {
		mc.gate.pushed.Add(1)
	}
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = fmt.Errorf("reader ended after %d of %d reads", mc.got, len(mc.segs))
		}
		return fmt.Errorf("%s stream %d: %w", mc.src.name, mc.d, err)
	}
	mc.reads++
	seg = mc.segs[mc.got]
	read := mc.refs[mc.got]
	if mc.snap {
		return s.pushSnapped(mc, rg, ref, seg.RowGroup)
	}
	mc.got++
	mc.done++
	if len(mc.src.toks) == 0 { // else the reader took the kept rows (prepareRead)
		if rg, err = takeKept(rg, mc.src.selection(seg.RowGroup), seg, read, true, s.mem); err != nil {
			return fmt.Errorf("%s row group %d: %w", mc.src.ds.Files[ref.File].Object.URI, ref.Index, err)
		}
	}
	err = cut.Push(rg, seg)
	rg.Release()
	if err != nil {
		return fmt.Errorf("%s row group %d: %w", mc.src.ds.Files[ref.File].Object.URI, ref.Index, err)
	}
	return nil
}

// pushSnapped feeds mc's cutter rec, the rows ref names of the cursor's
// row group g (the plan's index), read by a reader that moved its pieces'
// ends to page breaks (snap.go). rec is released.
func (s *mixStream) pushSnapped(mc *mixCursor, rec arrow.RecordBatch, ref loader.RowGroupRef, g int) error {
	defer rec.Release()
	n, err := pushRead(mc.cur.Cutter(), mc.segs, mc.got, g, rec, ref)
	mc.got, mc.done = mc.got+n, mc.done+n
	if err != nil {
		return fmt.Errorf("%s row group %d: %w", mc.src.ds.Files[ref.File].Object.URI, ref.Index, err)
	}
	return nil
}

// selection returns the kept rows of the source's row group g, nil for all.
func (src *mixSource) selection(g int) *filter.Selection {
	if src.sels == nil {
		return nil
	}
	return src.sels[g]
}

// Close implements transport.Stream.
func (s *mixStream) Close() error {
	if s.closed {
		return nil
	}
	s.closed = true
	s.cancel()
	for _, row := range s.curs {
		for _, mc := range row {
			if mc.rd != nil {
				mc.rd.Close()
			}
			mc.cur.Release()
		}
	}
	if s.cols != nil {
		s.cols.Release()
	}
	if s.place != nil {
		s.place.release() // after the readers: none places rows any more
	}
	if s.unreserve != nil {
		s.unreserve()
	}
	return nil
}
