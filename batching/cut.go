package batching

import (
	"fmt"
	"sort"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/meshfeed/meshfeed/internal/arrowmem"
)

// DefaultMaskColumn is the name of the boolean mask column that a Cutter
// appends to every slice under policy Pad.
const DefaultMaskColumn = "valid"

// cutterConfig holds the options of a Cutter.
type cutterConfig struct {
	mask   string
	schema *arrow.Schema
}

// CutterOption configures a Cutter.
type CutterOption func(*cutterConfig)

// WithMaskColumn names the boolean mask column appended under policy Pad.
// Default DefaultMaskColumn ("valid"); an empty name keeps the default.
func WithMaskColumn(name string) CutterOption {
	return func(c *cutterConfig) {
		if name != "" {
			c.mask = name
		}
	}
}

// WithSchema gives the schema of the records the cutter will be pushed. It is
// needed only when a slice must be produced before any record arrives (a stream
// with no real rows left, under Pad); pushed records must match it. Default: the
// schema of the first pushed record.
func WithSchema(s *arrow.Schema) CutterOption {
	return func(c *cutterConfig) { c.schema = s }
}

// piece is a pushed record and the stream rows [from, to) it supplies; stream
// row r is row off+r-from of rec.
type piece struct {
	rec      arrow.RecordBatch
	off      int64
	from, to int64
}

// run is n consecutive rows from row of source src.
type run struct {
	src    int
	row, n int64
}

// Cutter turns the decoded row groups of one stream into the b-row slices of
// consecutive steps, from a start step to the end of an epoch.
//
// The caller pushes, in order, the records of the stream's segments starting at
// the one that ReadStart names, and pulls slices with Next. Next reports (nil,
// 0, false, nil) when it needs the segment that Wants returns, or when the epoch
// is over (Done). A segment may also be pushed in consecutive pieces (Push,
// Reads). Pushing only when Next asks keeps the memory a cutter holds bounded
// by the shuffle window plus two pushed records (row groups, or pieces) plus
// one slice.
//
// Slices: with W = 0 a slice that lies within one row group is a zero-copy view
// of the pushed record; a slice straddling row groups is assembled with one copy.
// With W > 0 every slice is gathered (copied) in the window's permuted order:
// fixed-width columns (primitive types, fixed_size_list of them) by memcpy of
// whole rows, other columns by concatenating one-row views. Under Pad the last
// slices are padded with zero values to b rows and every slice gets a boolean
// mask column (true for real rows). CopiedBytes counts the bytes of every copied
// column buffer.
//
// # Caveats
//
// A Cutter is not safe for concurrent use. Push retains the record; the caller
// keeps its own reference and releases it as usual. Every slice returned by Next
// is owned by the caller, who must Release it; it stays valid after the cutter is
// released. Release the cutter to free what it holds.
type Cutter struct {
	plan     *Plan
	epoch, d int
	step     int // step of the next slice
	b, w     int64
	mem      memory.Allocator
	cfg      cutterConfig
	outSch   *arrow.Schema

	segs     []Segment
	segStart []int64 // stream row where segs[i] starts
	next     int     // index of the next segment to push
	pushed   int64   // stream row that the pushes of segs[next] reached; -1 before the first
	from     int64   // first stream row read
	end      int64   // stream row where reading stops

	pieces []piece
	carry  arrow.RecordBatch // W > 0: gathered rows of earlier windows for the slice being built
	permK  int               // window whose permutation is in perm; -1 for none
	perm   []int32
	copied int64
	closed bool
}

// NewCutter returns a cutter for stream d of epoch, producing the slices of
// steps startStep to StepsPerEpoch-1. mem allocates copies, padding and masks.
func NewCutter(plan *Plan, epoch, d, startStep int, mem memory.Allocator, opts ...CutterOption) (*Cutter, error) {
	if plan == nil {
		return nil, fmt.Errorf("%w: nil plan", ErrInvalidConfig)
	}
	if err := plan.Check(Position{Epoch: epoch, Step: startStep}, d); err != nil {
		return nil, fmt.Errorf("batching: new cutter for stream %d: %w", d, err)
	}
	if mem == nil {
		mem = memory.DefaultAllocator
	}
	c := &Cutter{
		plan: plan, epoch: epoch, d: d, step: startStep,
		b: plan.b, w: plan.cfg.Window, mem: mem,
		cfg: cutterConfig{mask: DefaultMaskColumn}, permK: -1, pushed: -1,
	}
	for _, o := range opts {
		o(&c.cfg)
	}
	c.segs = plan.Stream(epoch, d)
	c.segStart = make([]int64, len(c.segs)+1)
	for i, s := range c.segs {
		c.segStart[i+1] = c.segStart[i] + s.Len()
	}
	c.next, _, c.from = plan.ReadStart(Position{Epoch: epoch, Step: startStep}, d)
	c.end = plan.ReadEnd(d)
	if c.cfg.schema != nil {
		if err := c.setSchema(c.cfg.schema); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// setSchema fixes the input schema and derives the output schema.
func (c *Cutter) setSchema(s *arrow.Schema) error {
	out, err := SliceSchema(s, c.plan.cfg.Policy, c.cfg.mask)
	if err != nil {
		return err
	}
	c.cfg.schema, c.outSch = s, out
	return nil
}

// SliceSchema returns the schema of the slices that a Cutter cuts from row
// groups of schema in: in itself, or under Pad in with the boolean mask
// column named mask appended. A column of in named mask is
// ErrMaskColumnExists.
func SliceSchema(in *arrow.Schema, policy Policy, mask string) (*arrow.Schema, error) {
	if policy != Pad {
		return in, nil
	}
	if len(in.FieldIndices(mask)) > 0 {
		return nil, fmt.Errorf("%w: %q (choose another with WithMaskColumn)", ErrMaskColumnExists, mask)
	}
	fields := append(in.Fields(), arrow.Field{Name: mask, Type: arrow.FixedWidthTypes.Boolean})
	md := in.Metadata()
	return arrow.NewSchema(fields, &md), nil
}

// Step returns the step of the slice that the next successful Next returns.
func (c *Cutter) Step() int { return c.step }

// Done reports whether every slice of the epoch has been returned.
func (c *Cutter) Done() bool { return c.step >= c.plan.steps }

// CopiedBytes returns the bytes of column buffers the cutter has copied or
// filled (straddling slices, gathers, padding); mask columns are not counted.
func (c *Cutter) CopiedBytes() int64 { return c.copied }

// Ahead returns the rows of the stream pushed and not yet cut or taken:
// how far the records pushed so far reach past the cutter's position.
func (c *Cutter) Ahead() int64 { return max(c.buffered()-int64(c.step)*int64(c.b), 0) }

// Wants returns the segment that the next Push must carry, and false when the
// cutter accepts no more segments (everything it needs was pushed). Before
// the first push of a segment it is the whole segment of the plan's stream;
// after a partial push (a piece, see Push) it is what remains of it, from the
// row the pushes reached.
func (c *Cutter) Wants() (Segment, bool) {
	if c.closed || c.next >= len(c.segs) || c.segStart[c.next] >= c.end {
		return Segment{}, false
	}
	seg := c.segs[c.next]
	if c.pushed >= 0 {
		seg.Start += c.pushed - c.segStart[c.next]
	}
	return seg, true
}

// Push hands the cutter rows of the segment that Wants names: the whole row
// group's record (rec.NumRows() equal to the row group's Rows), or a record
// of just rows [seg.Start, seg.End) of the row group. seg is the segment of
// Wants or a piece of it: consecutive pieces of a segment may be pushed one
// after the other (each when Next asks for input), each starting where the
// previous one ended (or anywhere before the first row the cutter reads, see
// Reads) and ending at or before the segment's end. A piece's rows must not
// leave a gap: rows the cutter needs are never skipped. The cutter retains
// rec for as long as it needs it.
func (c *Cutter) Push(rec arrow.RecordBatch, seg Segment) error {
	if c.closed {
		return ErrCutterClosed
	}
	want, ok := c.Wants()
	if !ok || seg.RowGroup != want.RowGroup || seg.End > want.End || seg.Start >= seg.End {
		return fmt.Errorf("%w: stream %d epoch %d got row group %d rows [%d, %d), want %s",
			ErrUnexpectedSegment, c.d, c.epoch, seg.RowGroup, seg.Start, seg.End, c.describeWant())
	}
	full := c.segs[c.next]
	base := c.segStart[c.next] // stream row of full.Start
	need := max(c.from, base)  // the next stream row the cutter needs
	if c.pushed >= 0 {
		need = c.pushed
	}
	stop := min(c.segStart[c.next+1], c.end) // stream row where reading this segment stops
	from, to := base+seg.Start-full.Start, base+seg.End-full.Start
	if seg.Start < full.Start || from > need || to <= need {
		return fmt.Errorf("%w: stream %d epoch %d got row group %d rows [%d, %d), want rows from %d (%s)",
			ErrUnexpectedSegment, c.d, c.epoch, seg.RowGroup, seg.Start, seg.End, full.Start+need-base, c.describeWant())
	}
	if rec == nil {
		return fmt.Errorf("%w: nil record for row group %d", ErrUnexpectedSegment, seg.RowGroup)
	}
	var off int64
	switch rows := rec.NumRows(); {
	case rows == c.plan.rgs[seg.RowGroup].Rows:
		off = seg.Start
	case rows == seg.Len():
		off = 0
	default:
		return fmt.Errorf("%w: row group %d: record has %d rows, want %d (whole row group) or %d (rows [%d, %d))",
			ErrUnexpectedSegment, seg.RowGroup, rows, c.plan.rgs[seg.RowGroup].Rows, seg.Len(), seg.Start, seg.End)
	}
	if c.cfg.schema == nil {
		if err := c.setSchema(rec.Schema()); err != nil {
			return err
		}
	} else if !c.cfg.schema.Equal(rec.Schema()) {
		return fmt.Errorf("%w: row group %d (file %d, row group %d in file): schema %v, want %v",
			ErrSchemaMismatch, seg.RowGroup, c.plan.rgs[seg.RowGroup].File, c.plan.rgs[seg.RowGroup].Index,
			rec.Schema(), c.cfg.schema)
	}
	// Trim to what is read: the first segment may start before the read
	// start, the last one may run past the read end, a piece may repeat
	// rows before the ones needed.
	if from < need {
		off += need - from
		from = need
	}
	to = min(to, stop)
	if to >= stop {
		c.next++
		c.pushed = -1
	} else {
		c.pushed = to
	}
	if from >= to {
		return nil
	}
	rec.Retain()
	c.pieces = append(c.pieces, piece{rec: rec, off: off, from: from, to: to})
	return nil
}

// Reads returns the row ranges the cutter will still read, in push order:
// the rest of its segments, trimmed to the rows it needs (the first may
// start inside a row group, the last end inside one), each longer than
// maxRows rows split into pieces of at most maxRows rows (maxRows <= 0: not
// split). When maxRows is at least the slice size b, pieces end on multiples
// of the largest multiple of b not above maxRows in stream rows, so that
// with no shuffle window every slice inside a row group lies inside one
// piece (a view, not a copy). Pushing them in order, each when Next asks for
// input, feeds the cutter to the end of its epoch.
func (c *Cutter) Reads(maxRows int64) []Segment {
	if c.closed {
		return nil
	}
	grid := maxRows
	if maxRows >= c.b {
		grid = maxRows / c.b * c.b
	}
	var out []Segment
	for i := c.next; i < len(c.segs) && c.segStart[i] < c.end; i++ {
		base := c.segStart[i]
		lo := max(c.from, base)
		if i == c.next && c.pushed >= 0 {
			lo = c.pushed
		}
		hi := min(c.segStart[i+1], c.end)
		for lo < hi {
			end := hi
			if grid > 0 && hi-lo > maxRows {
				end = min(hi, (lo/grid+1)*grid)
			}
			g := c.segs[i]
			out = append(out, Segment{RowGroup: g.RowGroup, Start: g.Start + lo - base, End: g.Start + end - base})
			lo = end
		}
	}
	return out
}

func (c *Cutter) describeWant() string {
	if w, ok := c.Wants(); ok {
		return fmt.Sprintf("row group %d rows [%d, %d)", w.RowGroup, w.Start, w.End)
	}
	return "no more segments"
}

// buffered returns the stream row up to which rows are buffered.
func (c *Cutter) buffered() int64 {
	if len(c.pieces) == 0 {
		if c.next < len(c.segStart) {
			return max(c.from, c.segStart[c.next])
		}
		return c.from
	}
	return c.pieces[len(c.pieces)-1].to
}

// locate returns the index of the piece holding stream row r.
func (c *Cutter) locate(r int64) int {
	return sort.Search(len(c.pieces), func(i int) bool { return c.pieces[i].to > r })
}

// releaseBefore releases the pieces that end at or before stream row r.
func (c *Cutter) releaseBefore(r int64) {
	i := 0
	for i < len(c.pieces) && c.pieces[i].to <= r {
		c.pieces[i].rec.Release()
		c.pieces[i] = piece{}
		i++
	}
	c.pieces = c.pieces[i:]
}

// Next returns the slice of the next step, with the number of real rows in it.
// ok is false when the cutter needs the segment of Wants, or when Done.
func (c *Cutter) Next() (rec arrow.RecordBatch, real int, ok bool, err error) {
	if c.closed {
		return nil, 0, false, ErrCutterClosed
	}
	if c.Done() {
		c.releaseBefore(c.end + 1)
		return nil, 0, false, nil
	}
	s := c.step
	real = c.plan.SliceReal(s, c.d)
	lo := int64(s) * c.b
	hi := lo + int64(real)
	var data arrow.RecordBatch
	if real > 0 {
		if c.w == 0 {
			data, ok, err = c.cutContiguous(lo, hi)
		} else {
			data, ok, err = c.cutWindowed(lo, hi)
		}
		if err != nil || !ok {
			return nil, 0, false, err
		}
	} else if c.outSch == nil {
		return nil, 0, false, fmt.Errorf("%w: stream %d step %d is all padding and no record was pushed; pass WithSchema",
			ErrNoSchema, c.d, s)
	}
	rec, err = c.finish(data, real)
	if data != nil {
		data.Release()
	}
	if err != nil {
		return nil, 0, false, err
	}
	c.step++
	// Release what the following slices no longer need.
	if c.Done() {
		c.releaseBefore(c.end + 1)
	} else {
		nlo := int64(c.step) * c.b
		if c.w > 0 {
			nlo = nlo / c.w * c.w
		}
		c.releaseBefore(nlo)
	}
	return rec, real, true, nil
}

// cutContiguous returns stream rows [lo, hi) (W = 0): a view when one piece
// holds them, one copy otherwise.
func (c *Cutter) cutContiguous(lo, hi int64) (arrow.RecordBatch, bool, error) {
	if c.buffered() < hi {
		return nil, false, c.needInput()
	}
	i := c.locate(lo)
	p := c.pieces[i]
	if hi <= p.to {
		return p.rec.NewSlice(p.off+lo-p.from, p.off+hi-p.from), true, nil
	}
	var runs []run
	for r := lo; r < hi; i++ {
		p := c.pieces[i]
		n := min(hi, p.to) - r
		runs = append(runs, run{src: i, row: p.off + r - p.from, n: n})
		r += n
	}
	srcs := make([]arrow.RecordBatch, len(c.pieces))
	for j, p := range c.pieces {
		srcs[j] = p.rec
	}
	rec, err := c.gather(srcs, runs, hi-lo)
	return rec, err == nil, err
}

// cutWindowed returns rows [lo, hi) of the window-permuted stream (W > 0).
// Rows of earlier windows are carried in c.carry so that the raw rows of only
// one window are held at a time.
func (c *Cutter) cutWindowed(lo, hi int64) (arrow.RecordBatch, bool, error) {
	for {
		at := lo
		if c.carry != nil {
			at += c.carry.NumRows()
		}
		k := at / c.w
		wStart := k * c.w
		wEnd := min(wStart+c.w, c.plan.lens[c.d])
		if c.buffered() < wEnd {
			return nil, false, c.needInput()
		}
		if c.permK != int(k) {
			c.perm, c.permK = c.plan.WindowPerm(c.epoch, c.d, int(k)), int(k)
		}
		perm := c.perm
		partEnd := min(hi, wStart+c.w)
		srcs := make([]arrow.RecordBatch, 0, len(c.pieces)+1)
		base := 0
		var runs []run
		if c.carry != nil {
			srcs = append(srcs, c.carry)
			runs = append(runs, run{src: 0, row: 0, n: c.carry.NumRows()})
			base = 1
		}
		for _, p := range c.pieces {
			srcs = append(srcs, p.rec)
		}
		last := 0
		for q := at; q < partEnd; q++ {
			r := wStart + int64(perm[q-wStart])
			i := last
			if p := c.pieces[i]; r < p.from || r >= p.to {
				i = c.locate(r)
				last = i
			}
			p := c.pieces[i]
			row := p.off + r - p.from
			if n := len(runs); n > 0 && runs[n-1].src == base+i && runs[n-1].row+runs[n-1].n == row {
				runs[n-1].n++
				continue
			}
			runs = append(runs, run{src: base + i, row: row, n: 1})
		}
		rec, err := c.gather(srcs, runs, partEnd-lo)
		if err != nil {
			return nil, false, err
		}
		if c.carry != nil {
			c.carry.Release()
			c.carry = nil
		}
		if partEnd == hi {
			return rec, true, nil
		}
		// The slice continues in the next window: carry what we have and drop
		// the raw rows of this window.
		c.carry = rec
		c.releaseBefore(wStart + c.w)
	}
}

// needInput returns nil when a segment can be pushed, an error otherwise.
func (c *Cutter) needInput() error {
	if _, ok := c.Wants(); ok {
		return nil
	}
	return fmt.Errorf("%w: stream %d step %d needs rows past the end of its segments (internal error)",
		ErrUnexpectedSegment, c.d, c.step)
}

// gather builds an n-row record from the runs of srcs, in order.
func (c *Cutter) gather(srcs []arrow.RecordBatch, runs []run, n int64) (arrow.RecordBatch, error) {
	sch := c.cfg.schema
	cols := make([]arrow.Array, sch.NumFields())
	defer releaseAll(cols)
	arrs := make([]arrow.Array, len(srcs))
	for j := range cols {
		for i, s := range srcs {
			arrs[i] = s.Column(j)
		}
		col, err := gatherColumn(c.mem, sch.Field(j).Type, arrs, runs, n)
		if err != nil {
			return nil, fmt.Errorf("batching: stream %d step %d column %q: %w", c.d, c.step, sch.Field(j).Name, err)
		}
		cols[j] = col
		// A dictionary column's dictionary counts too (arrowmem.DataBytes),
		// though Concatenate may share a dictionary every source has in
		// common: for such columns CopiedBytes is an upper bound.
		c.copied += arrowmem.DataBytes(col.Data())
	}
	return array.NewRecordBatch(sch, cols, n), nil
}

// finish pads data (real rows, or nil when real is 0) to b rows under Pad and
// appends the mask column.
func (c *Cutter) finish(data arrow.RecordBatch, real int) (arrow.RecordBatch, error) {
	if c.plan.cfg.Policy != Pad {
		data.Retain()
		return data, nil
	}
	b := int(c.b)
	sch := c.cfg.schema
	cols := make([]arrow.Array, sch.NumFields()+1)
	defer releaseAll(cols)
	for j := 0; j < sch.NumFields(); j++ {
		var col arrow.Array
		if data != nil {
			col = data.Column(j)
		}
		padded, err := padColumn(c.mem, sch.Field(j).Type, col, b)
		if err != nil {
			return nil, fmt.Errorf("batching: stream %d step %d column %q: %w", c.d, c.step, sch.Field(j).Name, err)
		}
		if padded != col {
			c.copied += arrowmem.DataBytes(padded.Data())
		}
		cols[j] = padded
	}
	mb := array.NewBooleanBuilder(c.mem)
	defer mb.Release()
	mb.Reserve(b)
	for i := 0; i < b; i++ {
		mb.UnsafeAppend(i < real)
	}
	cols[len(cols)-1] = mb.NewArray()
	return array.NewRecordBatch(c.outSch, cols, int64(b)), nil
}

// Release frees everything the cutter holds. Slices already returned stay valid.
func (c *Cutter) Release() {
	if c.closed {
		return
	}
	c.closed = true
	c.releaseBefore(c.end + 1)
	for _, p := range c.pieces { // defensive: pieces past end cannot exist
		p.rec.Release()
	}
	c.pieces = nil
	if c.carry != nil {
		c.carry.Release()
		c.carry = nil
	}
}

func releaseAll(arrs []arrow.Array) {
	for _, a := range arrs {
		if a != nil {
			a.Release()
		}
	}
}
