package batching

// Elastic resume: a position saved under data-parallel degree D resumed under
// another degree D' (see docs/CONTRACT-elastic.md).

import (
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// Switch says where a run under another data-parallel degree stopped: steps
// [0, Step) of epoch Epoch were delivered under a plan with D = FromD (and
// otherwise the same Config: B, seed, shuffle, window, policy).
type Switch struct {
	FromD       int
	Epoch, Step int
}

// Piece is a run of one stream of the plan the run switched from: delivered
// positions [From, To) of stream Stream, that is the rows that its slices
// deliver at positions From..To-1 counted from the stream's first delivered
// row (step s delivers positions [s*b, (s+1)*b)), in the order they are
// delivered (window permutations applied).
type Piece struct {
	Stream   int
	From, To int64
}

// Len returns the rows of the piece.
func (p Piece) Len() int64 { return p.To - p.From }

// Remainder is the rest of the epoch in which a run switched from D to D'
// streams: the rows of that epoch that the plan with D did not deliver
// before the switch, re-split over D' streams.
//
// The remainder sequence R is, for each old stream d in order, its delivered
// positions [Step*b, delivered_d) (b = B/D; delivered_d is the stream's
// length under Pad and StepsPerEpoch*b otherwise, so the rows that Drop drops
// stay dropped). R has M rows; it is split into D' contiguous remainder
// streams whose lengths differ by at most one row (the first M mod D' are one
// longer), and step Step+k of the epoch gives new slice d' rows [k*b', (k+1)*b')
// of remainder stream d' (b' = B/D'). The global batch B is unchanged, so M is
// N - Step*B under Pad and (StepsPerEpoch-Step)*B otherwise: the epoch still
// ends after StepsPerEpoch steps, and only its last step can hold padding
// (Pad), placed at the end of the remainder streams that are shorter than
// the steps left times b'. From the next epoch on, the plain plan with D'
// applies.
type Remainder struct {
	plan *Plan // the plan with D'
	old  *Plan // the plan with D = FromD
	sw   Switch
	m    int64
	offs []int64 // offs[d] = first row of old stream d's rows in R; FromD+1 entries
	lens []int64 // rows of remainder stream d'
	lo   []int64 // first row of remainder stream d' in R
}

// Remainder returns the remainder of epoch sw.Epoch for a run that switched
// to p (D') from sw.FromD streams after sw.Step steps. It is an error
// wrapping ErrInvalidPosition when sw names a position outside the plan, or
// ErrInvalidConfig when B is not a multiple of sw.FromD.
func (p *Plan) Remainder(sw Switch) (*Remainder, error) {
	if sw.FromD <= 0 {
		return nil, fmt.Errorf("%w: switch from D=%d, must be > 0", ErrInvalidConfig, sw.FromD)
	}
	if err := p.Check(Position{Epoch: sw.Epoch, Step: sw.Step}); err != nil {
		return nil, fmt.Errorf("batching: remainder: %w", err)
	}
	cfg := p.cfg
	cfg.D = sw.FromD
	old, err := NewPlan(p.rgs, cfg)
	if err != nil {
		return nil, fmt.Errorf("batching: remainder: the plan with D=%d before the switch: %w", sw.FromD, err)
	}
	r := &Remainder{plan: p, old: old, sw: sw, offs: make([]int64, sw.FromD+1)}
	for d := range sw.FromD {
		r.offs[d+1] = r.offs[d] + max(0, old.delivered(d)-int64(sw.Step)*old.b)
	}
	r.m = r.offs[sw.FromD]
	r.lens, r.lo = splitRows(r.m, p.cfg.D)
	return r, nil
}

// Switch returns where the run switched.
func (r *Remainder) Switch() Switch { return r.sw }

// Old returns the plan with D = FromD, whose streams the pieces name.
func (r *Remainder) Old() *Plan { return r.old }

// Rows returns M, the rows of the remainder.
func (r *Remainder) Rows() int64 { return r.m }

// StreamLen returns the rows of remainder stream d (0 for an invalid d).
func (r *Remainder) StreamLen(d int) int64 {
	if d < 0 || d >= len(r.lens) {
		return 0
	}
	return r.lens[d]
}

// SliceReal returns how many rows of new slice d at step (sw.Step <= step <
// StepsPerEpoch) are real rows; the rest, at the end, are padding. 0 outside.
func (r *Remainder) SliceReal(step, d int) int {
	if step < r.sw.Step || step >= r.plan.steps || d < 0 || d >= len(r.lens) {
		return 0
	}
	left := r.lens[d] - int64(step-r.sw.Step)*r.plan.b
	return int(max(0, min(r.plan.b, left)))
}

// Pieces returns the pieces of old streams that make up remainder stream d
// from the slice of step on (sw.Step <= step <= StepsPerEpoch), in order.
// Nil when nothing is left or for an invalid d or step.
func (r *Remainder) Pieces(step, d int) []Piece {
	if d < 0 || d >= len(r.lens) || step < r.sw.Step || step > r.plan.steps {
		return nil
	}
	skip := min(r.lens[d], int64(step-r.sw.Step)*r.plan.b)
	lo, hi := r.lo[d]+skip, r.lo[d]+r.lens[d]
	base := int64(r.sw.Step) * r.old.b
	var out []Piece
	for od := range r.sw.FromD {
		s, t := max(lo, r.offs[od]), min(hi, r.offs[od+1])
		if s < t {
			out = append(out, Piece{Stream: od, From: base + s - r.offs[od], To: base + t - r.offs[od]})
		}
	}
	return out
}

// Rebatcher concatenates runs of rows pushed in order into slices of b rows,
// padding the last one under Pad: it turns the pieces of old streams (slices
// of the plan before a switch, trimmed to the piece) into the slices of a
// remainder stream. Records pushed must all have the output schema (under
// Pad including the boolean mask column, true for every pushed row); padding
// rows hold zero values (empty lists) and false in the mask. Every returned
// slice is a copy owned by the caller.
type Rebatcher struct {
	schema *arrow.Schema
	b      int
	pad    bool
	mem    memory.Allocator
	recs   []arrow.RecordBatch
	rows   int64
}

// NewRebatcher returns a Rebatcher of slices of b rows of schema; pad says
// whether a short slice is padded (Pad) or an error.
func NewRebatcher(schema *arrow.Schema, b int, pad bool, mem memory.Allocator) *Rebatcher {
	if mem == nil {
		mem = memory.DefaultAllocator
	}
	return &Rebatcher{schema: schema, b: b, pad: pad, mem: mem}
}

// Push adds the rows of rec (retained) after those pushed before.
func (rb *Rebatcher) Push(rec arrow.RecordBatch) error {
	if !rec.Schema().Equal(rb.schema) {
		return fmt.Errorf("%w: rebatcher pushed schema %v, want %v", ErrSchemaMismatch, rec.Schema(), rb.schema)
	}
	if rec.NumRows() == 0 {
		return nil
	}
	rec.Retain()
	rb.recs = append(rb.recs, rec)
	rb.rows += rec.NumRows()
	return nil
}

// Buffered returns the rows pushed and not yet cut.
func (rb *Rebatcher) Buffered() int64 { return rb.rows }

// Cut returns a slice of b rows holding the first real buffered rows (real <=
// b and <= Buffered), padded to b rows when real < b under Pad.
func (rb *Rebatcher) Cut(real int) (arrow.RecordBatch, error) {
	if real < 0 || real > rb.b || int64(real) > rb.rows {
		return nil, fmt.Errorf("batching: rebatcher: cut %d rows with %d buffered and slices of %d", real, rb.rows, rb.b)
	}
	if real < rb.b && !rb.pad {
		return nil, fmt.Errorf("batching: rebatcher: a slice of %d real rows of %d without padding", real, rb.b)
	}
	var take []arrow.RecordBatch
	defer func() {
		for _, t := range take {
			t.Release()
		}
	}()
	left := int64(real)
	for left > 0 {
		r := rb.recs[0]
		n := min(left, r.NumRows())
		take = append(take, r.NewSlice(0, n))
		if n == r.NumRows() {
			r.Release()
			rb.recs = rb.recs[1:]
		} else {
			rb.recs[0] = r.NewSlice(n, r.NumRows())
			r.Release()
		}
		left -= n
		rb.rows -= n
	}
	cols := make([]arrow.Array, rb.schema.NumFields())
	defer releaseAll(cols)
	arrs := make([]arrow.Array, len(take))
	for j := range cols {
		var col arrow.Array
		switch len(take) {
		case 0:
		case 1:
			col = take[0].Column(j)
			col.Retain()
		default:
			for i, t := range take {
				arrs[i] = t.Column(j)
			}
			c, err := array.Concatenate(arrs, rb.mem)
			if err != nil {
				return nil, fmt.Errorf("batching: rebatcher: column %q: %w", rb.schema.Field(j).Name, err)
			}
			col = c
		}
		padded, err := padColumn(rb.mem, rb.schema.Field(j).Type, col, rb.b)
		if col != nil {
			col.Release()
		}
		if err != nil {
			return nil, fmt.Errorf("batching: rebatcher: column %q: %w", rb.schema.Field(j).Name, err)
		}
		cols[j] = padded
	}
	return array.NewRecordBatch(rb.schema, cols, int64(rb.b)), nil
}

// Release frees the buffered rows.
func (rb *Rebatcher) Release() {
	for _, r := range rb.recs {
		r.Release()
	}
	rb.recs, rb.rows = nil, 0
}

// RemainderCutter cuts new slice d of a Remainder, from a start step to the
// end of the epoch, with the protocol of a Cutter: the caller pushes the
// segments that Wants names (row groups of the same dataset) and pulls
// slices with Next. Inside, each piece of the remainder stream is cut by a
// Cutter of the old plan (so the window permutations are those the old plan
// applies), trimmed to the piece and regrouped into slices of b' = B/D' rows
// by a Rebatcher: every slice is a copy. Segments lists, in advance, every
// segment Wants will name, so that a reader can fetch them ahead.
//
// A RemainderCutter is not safe for concurrent use; Release it when done.
type RemainderCutter struct {
	rem    *Remainder
	d      int
	step   int
	mem    memory.Allocator
	opts   []CutterOption
	schema *arrow.Schema // of the input records (WithSchema)

	pieces []Piece
	pi     int     // current piece
	cur    *Cutter // cutter of the old plan for pieces[pi]; nil before it starts
	rb     *Rebatcher
	closed bool
}

// NewRemainderCutter returns the cutter of new slice d of rem from step
// start (rem's switch step <= start <= StepsPerEpoch). opts are those of a
// Cutter; WithSchema is required (a remainder slice can be all padding).
func NewRemainderCutter(rem *Remainder, d, start int, mem memory.Allocator, opts ...CutterOption) (*RemainderCutter, error) {
	if rem == nil {
		return nil, fmt.Errorf("%w: nil remainder", ErrInvalidConfig)
	}
	if d < 0 || d >= rem.plan.cfg.D || start < rem.sw.Step || start > rem.plan.steps {
		return nil, fmt.Errorf("%w: remainder slice %d from step %d; slices 0 to %d, steps %d to %d",
			ErrInvalidPosition, d, start, rem.plan.cfg.D-1, rem.sw.Step, rem.plan.steps)
	}
	if mem == nil {
		mem = memory.DefaultAllocator
	}
	cfg := cutterConfig{mask: DefaultMaskColumn}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.schema == nil {
		return nil, fmt.Errorf("%w: a remainder cutter needs WithSchema", ErrNoSchema)
	}
	c := &RemainderCutter{rem: rem, d: d, step: start, mem: mem, opts: opts, schema: cfg.schema,
		pieces: rem.Pieces(start, d)}
	out := cfg.schema
	if rem.plan.cfg.Policy == Pad {
		if len(out.FieldIndices(cfg.mask)) > 0 {
			return nil, fmt.Errorf("%w: %q", ErrMaskColumnExists, cfg.mask)
		}
		md := out.Metadata()
		out = arrow.NewSchema(append(out.Fields(), arrow.Field{Name: cfg.mask, Type: arrow.FixedWidthTypes.Boolean}), &md)
	}
	c.rb = NewRebatcher(out, rem.plan.SliceRows(), rem.plan.cfg.Policy == Pad, mem)
	return c, nil
}

// Step returns the step of the slice that the next successful Next returns.
func (c *RemainderCutter) Step() int { return c.step }

// Done reports whether every slice of the epoch has been returned.
func (c *RemainderCutter) Done() bool { return c.step >= c.rem.plan.steps }

// pieceNeed returns the old step where the cutter of piece p starts and the
// old stream row up to which it reads: the end of the piece's last row
// (W = 0) or of the shuffle window holding it.
func (c *RemainderCutter) pieceNeed(p Piece) (step int, end int64) {
	old := c.rem.old
	b := old.b
	step = int(p.From / b)
	last := (p.To - 1) / b // old step of the piece's last row
	hi := last*b + int64(old.SliceReal(int(last), p.Stream))
	if w := old.cfg.Window; w > 0 {
		// The cutter cuts the whole slice, whose rows lie in the windows
		// up to the one holding its last row.
		return step, min(((hi-1)/w+1)*w, old.lens[p.Stream])
	}
	return step, hi
}

// Segments returns every segment that Wants will name, in order: for each
// piece, the segments of its old stream from where its cutter starts
// reading up to the row it needs.
func (c *RemainderCutter) Segments() []Segment {
	var out []Segment
	old := c.rem.old
	for _, p := range c.pieces[c.pi:] {
		step, end := c.pieceNeed(p)
		first, _, _ := old.ReadStart(Position{Epoch: c.rem.sw.Epoch, Step: step}, p.Stream)
		var at int64
		for i, s := range old.Stream(c.rem.sw.Epoch, p.Stream) {
			if at >= end {
				break
			}
			if i >= first {
				out = append(out, s)
			}
			at += s.Len()
		}
	}
	return out
}

// start opens the old cutter of the current piece, if needed; false when
// there are no pieces left.
func (c *RemainderCutter) start() (bool, error) {
	if c.cur != nil {
		return true, nil
	}
	if c.pi >= len(c.pieces) {
		return false, nil
	}
	step, _ := c.pieceNeed(c.pieces[c.pi])
	cur, err := NewCutter(c.rem.old, c.rem.sw.Epoch, c.pieces[c.pi].Stream, step, c.mem, c.opts...)
	if err != nil {
		return false, err
	}
	c.cur = cur
	return true, nil
}

// Wants returns the segment that the next Push must carry, and false when
// none is needed now.
func (c *RemainderCutter) Wants() (Segment, bool) {
	if c.closed {
		return Segment{}, false
	}
	if ok, err := c.start(); !ok || err != nil {
		return Segment{}, false
	}
	return c.cur.Wants()
}

// Push hands the cutter the record of the segment that Wants names.
func (c *RemainderCutter) Push(rec arrow.RecordBatch, seg Segment) error {
	if c.closed {
		return ErrCutterClosed
	}
	if ok, err := c.start(); err != nil {
		return err
	} else if !ok {
		return fmt.Errorf("%w: remainder slice %d wants no more segments, got row group %d", ErrUnexpectedSegment, c.d, seg.RowGroup)
	}
	return c.cur.Push(rec, seg)
}

// Next returns the slice of the next step and its real rows; ok is false
// when the cutter needs the segment of Wants, or when Done.
func (c *RemainderCutter) Next() (rec arrow.RecordBatch, real int, ok bool, err error) {
	if c.closed {
		return nil, 0, false, ErrCutterClosed
	}
	if c.Done() {
		return nil, 0, false, nil
	}
	real = c.rem.SliceReal(c.step, c.d)
	for c.rb.Buffered() < int64(real) {
		more, err := c.start()
		if err != nil {
			return nil, 0, false, err
		}
		if !more {
			return nil, 0, false, fmt.Errorf("%w: remainder slice %d step %d needs %d rows, the pieces hold %d (internal error)",
				ErrUnexpectedSegment, c.d, c.step, real, c.rb.Buffered())
		}
		p := c.pieces[c.pi]
		s := c.cur.Step()
		srec, sreal, sok, err := c.cur.Next()
		if err != nil || !sok {
			return nil, 0, false, err
		}
		lo := int64(s) * c.rem.old.b
		from, to := max(p.From-lo, 0), min(p.To-lo, int64(sreal))
		if from < to {
			part := srec.NewSlice(from, to)
			err = c.rb.Push(part)
			part.Release()
		}
		srec.Release()
		if err != nil {
			return nil, 0, false, err
		}
		if lo+int64(sreal) >= p.To {
			c.cur.Release()
			c.cur = nil
			c.pi++
		}
	}
	rec, err = c.rb.Cut(real)
	if err != nil {
		return nil, 0, false, err
	}
	c.step++
	return rec, real, true, nil
}

// Release frees what the cutter holds. Slices already returned stay valid.
func (c *RemainderCutter) Release() {
	if c.closed {
		return
	}
	c.closed = true
	if c.cur != nil {
		c.cur.Release()
		c.cur = nil
	}
	c.rb.Release()
}
