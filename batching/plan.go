package batching

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"sync"
)

// RowGroup is one row group of the dataset, in dataset order (files sorted by
// URI, row groups in file order). File and Index only serve error messages and
// the caller's bookkeeping; the plan addresses row groups by their position in
// the slice given to NewPlan.
type RowGroup struct {
	File  int   // index of the file in the sorted file list
	Index int   // index of the row group within its file
	Rows  int64 // number of rows; 0 is allowed (the row group is never read)
	Bytes int64 // compressed bytes of the projected column chunks
}

// Segment is a run of consecutive rows of one row group that belongs to a stream.
type Segment struct {
	RowGroup   int   // index into the row groups given to NewPlan
	Start, End int64 // rows [Start, End) within the row group
}

// Len returns the number of rows of the segment.
func (s Segment) Len() int64 { return s.End - s.Start }

// Config holds what the plan depends on. The sequence of global batches is a
// function of the dataset's row counts and these fields only.
type Config struct {
	// GlobalBatch is B, the rows of one global batch; > 0 and a multiple of D.
	GlobalBatch int
	// D is the data-parallel degree: the number of distinct batch slices and of
	// streams; > 0. Each slice has b = B/D rows.
	D int
	// Seed seeds the row group order and the shuffle windows.
	Seed uint64
	// ShuffleRowGroups permutes the row groups of every epoch with a seed
	// derived from (Seed, epoch). False keeps dataset order.
	ShuffleRowGroups bool
	// Window is W, the shuffle window in rows within each stream; 0 keeps the
	// stream's order, negative is invalid, at most math.MaxInt32.
	Window int64
	// Policy decides what happens to the last, incomplete global batch.
	Policy Policy
}

// Validate reports every problem of c at once, each wrapping ErrInvalidConfig.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...))
	}
	if c.GlobalBatch <= 0 {
		bad("global batch size B=%d, must be > 0", c.GlobalBatch)
	}
	if c.D <= 0 {
		bad("data-parallel degree D=%d, must be > 0", c.D)
	}
	if c.GlobalBatch > MaxGlobalBatch {
		bad("global batch size B=%d, must be <= %d", c.GlobalBatch, MaxGlobalBatch)
	}
	if c.D > MaxD {
		bad("data-parallel degree D=%d, must be <= %d (a plan keeps a few words per stream)", c.D, MaxD)
	}
	if c.GlobalBatch > 0 && c.D > 0 && c.GlobalBatch%c.D != 0 {
		bad("global batch size B=%d is not a multiple of the data-parallel degree D=%d (remainder %d); pick B as a multiple of D",
			c.GlobalBatch, c.D, c.GlobalBatch%c.D)
	}
	if c.Window < 0 {
		bad("shuffle window W=%d, must be >= 0 (0 keeps file order)", c.Window)
	}
	if c.Window > math.MaxInt32 {
		bad("shuffle window W=%d, must be <= %d", c.Window, math.MaxInt32)
	}
	if !c.Policy.valid() {
		bad("last-batch policy %v, valid values are drop, pad, raise", c.Policy)
	}
	return errors.Join(errs...)
}

// Bounds of Config, checked by Validate before a plan allocates anything
// that depends on them.
const (
	// MaxGlobalBatch bounds B: a slice is one Arrow record.
	MaxGlobalBatch = math.MaxInt32
	// MaxD bounds D: a plan keeps two int64 per stream, and an elastic
	// remainder a few per stream of both degrees.
	MaxD = 1 << 16
)

// Position is a point in the sequence of global batches: step Step of epoch
// Epoch, both counted from 0.
type Position struct {
	Epoch, Step int
}

// Plan is the epoch plan of DESIGN.md's contract: which row of the dataset lands
// in which slice of which step. It is computed from row counts alone and is safe
// for concurrent use. Epoch orders are computed lazily and the last two are kept.
type Plan struct {
	cfg   Config
	rgs   []RowGroup
	n     int64
	b     int64
	steps int
	// lens[d] is the length of stream d and starts[d] its first row in the
	// epoch sequence; both are the same for every epoch.
	lens, starts []int64

	mu    sync.Mutex
	cache [2]*epochOrder
	clock int
}

// epochOrder is the row group order of one epoch.
type epochOrder struct {
	epoch int
	order []int32 // order[i] = row group at position i
	cum   []int64 // cum[i] = rows before position i; len(order)+1 entries
}

// NewPlan checks cfg and the row counts and computes the plan. It fails when the
// dataset has no rows, when the policy is Raise and N is not a multiple of B, and
// when the plan would have no steps (Drop with N < B).
func NewPlan(rowGroups []RowGroup, cfg Config) (*Plan, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if len(rowGroups) > math.MaxInt32 {
		return nil, fmt.Errorf("%w: %d row groups, at most %d", ErrInvalidRowGroup, len(rowGroups), math.MaxInt32)
	}
	var n int64
	for i, rg := range rowGroups {
		if rg.Rows < 0 || rg.Bytes < 0 {
			return nil, fmt.Errorf("%w: row group %d (file %d, row group %d in file): rows=%d bytes=%d, must be >= 0",
				ErrInvalidRowGroup, i, rg.File, rg.Index, rg.Rows, rg.Bytes)
		}
		if n > math.MaxInt64-rg.Rows {
			return nil, fmt.Errorf("%w: row count overflows int64 at row group %d", ErrInvalidRowGroup, i)
		}
		n += rg.Rows
	}
	if n == 0 {
		return nil, fmt.Errorf("%w (%d row groups, all empty)", ErrEmptyDataset, len(rowGroups))
	}
	bigB := int64(cfg.GlobalBatch)
	rem := n % bigB
	var steps int64
	switch cfg.Policy {
	case Drop:
		steps = n / bigB
		if steps == 0 {
			return nil, fmt.Errorf("%w: N=%d rows < B=%d with policy drop; use policy pad or a smaller B", ErrNoSteps, n, bigB)
		}
	case Pad:
		steps = (n + bigB - 1) / bigB
	case Raise:
		if rem != 0 {
			return nil, fmt.Errorf("%w: N=%d rows is not a multiple of B=%d (remainder %d); use policy drop (skip the remainder of %d rows) or pad (mask them), or pick a B that divides N",
				ErrIndivisible, n, bigB, rem, rem)
		}
		steps = n / bigB
	default:
		return nil, fmt.Errorf("%w: last-batch policy %v", ErrInvalidConfig, cfg.Policy)
	}
	if steps > math.MaxInt32 {
		return nil, fmt.Errorf("%w: %d steps per epoch, at most %d", ErrInvalidConfig, steps, math.MaxInt32)
	}
	p := &Plan{
		cfg:   cfg,
		rgs:   append([]RowGroup(nil), rowGroups...),
		n:     n,
		b:     int64(cfg.GlobalBatch / cfg.D),
		steps: int(steps),
	}
	p.lens, p.starts = splitRows(n, cfg.D)
	return p, nil
}

// splitRows splits n rows into d contiguous streams as evenly as possible:
// stream i has n/d rows, one more for the first n%d streams, and starts at
// row i*(n/d) + min(i, n%d). Plans, remainders and mixture remainders all
// split this way.
func splitRows(n int64, d int) (lens, starts []int64) {
	lens, starts = make([]int64, d), make([]int64, d)
	dd := int64(d)
	for s := range d {
		i := int64(s)
		lens[s] = n / dd
		if i < n%dd {
			lens[s]++
		}
		starts[s] = i*(n/dd) + min(i, n%dd)
	}
	return lens, starts
}

// Config returns the configuration of the plan.
func (p *Plan) Config() Config { return p.cfg }

// RowGroups returns a copy of the row groups of the plan, in dataset order.
func (p *Plan) RowGroups() []RowGroup { return append([]RowGroup(nil), p.rgs...) }

// N returns the number of rows of the dataset.
func (p *Plan) N() int64 { return p.n }

// SliceRows returns b = B/D, the rows of one slice.
func (p *Plan) SliceRows() int { return int(p.b) }

// StepsPerEpoch returns the number of steps of every epoch: floor(N/B) for
// Drop, ceil(N/B) for Pad, N/B for Raise.
func (p *Plan) StepsPerEpoch() int { return p.steps }

// DroppedRows returns the rows per epoch that Drop does not deliver (N mod B);
// 0 for the other policies.
func (p *Plan) DroppedRows() int64 {
	if p.cfg.Policy == Drop {
		return p.n - int64(p.steps)*int64(p.cfg.GlobalBatch)
	}
	return 0
}

// PaddedRows returns the padding rows per epoch (ceil(N/B)*B - N) for Pad; 0 for
// the other policies.
func (p *Plan) PaddedRows() int64 {
	if p.cfg.Policy == Pad {
		return int64(p.steps)*int64(p.cfg.GlobalBatch) - p.n
	}
	return 0
}

// StreamLen returns the number of rows of stream d (the same in every epoch):
// N/D, plus one for the first N mod D streams. It is 0 for an invalid d.
func (p *Plan) StreamLen(d int) int64 {
	if d < 0 || d >= p.cfg.D {
		return 0
	}
	return p.lens[d]
}

// StreamStart returns the first row of stream d in an epoch's sequence of
// rows (the same in every epoch): d*(N/D) + min(d, N mod D). It is 0 for an
// invalid d.
func (p *Plan) StreamStart(d int) int64 {
	if d < 0 || d >= p.cfg.D {
		return 0
	}
	return p.starts[d]
}

// RowsPlan returns the plan of a dataset of rows rows in one row group, in
// file order, for global batch globalBatch over d slices under the named
// last-batch policy (ParsePolicy): what a synthetic dataset (the server's
// demo backend) delivers.
func RowsPlan(rows int64, globalBatch, d int, policy string) (*Plan, error) {
	pol, err := ParsePolicy(policy)
	if err != nil {
		return nil, err
	}
	return NewPlan([]RowGroup{{Rows: rows}}, Config{GlobalBatch: globalBatch, D: d, Policy: pol})
}

// delivered returns the rows of stream d that are delivered in an epoch.
func (p *Plan) delivered(d int) int64 {
	if p.cfg.Policy == Pad {
		return p.lens[d]
	}
	return int64(p.steps) * p.b
}

// ReadEnd returns the row of stream d where reading for an epoch stops: the end
// of the delivered rows (W = 0) or of the shuffle window holding the last
// delivered row (W > 0). With Drop the rows of a stream past it are never read.
func (p *Plan) ReadEnd(d int) int64 {
	if d < 0 || d >= p.cfg.D {
		return 0
	}
	del := p.delivered(d)
	w := p.cfg.Window
	if w == 0 {
		return del
	}
	return min(p.lens[d], (del+w-1)/w*w)
}

// SliceReal returns how many rows of slice d of the given step are real rows of
// the dataset; the rest, always at the end of the slice, are padding. It is b
// except in the last step under Pad, and 0 for an invalid step or d.
func (p *Plan) SliceReal(step, d int) int {
	if step < 0 || step >= p.steps || d < 0 || d >= p.cfg.D {
		return 0
	}
	left := p.lens[d] - int64(step)*p.b
	return int(max(0, min(p.b, left)))
}

// Check returns an error wrapping ErrInvalidPosition when pos (with pos.Step <=
// StepsPerEpoch; the end of an epoch is a valid position) or a slice number is
// outside the plan.
func (p *Plan) Check(pos Position, slices ...int) error {
	if pos.Epoch < 0 || pos.Step < 0 || pos.Step > p.steps {
		return fmt.Errorf("%w: epoch %d step %d; epochs start at 0 and there are %d steps per epoch",
			ErrInvalidPosition, pos.Epoch, pos.Step, p.steps)
	}
	for _, d := range slices {
		if d < 0 || d >= p.cfg.D {
			return fmt.Errorf("%w: slice %d, the plan has slices 0 to %d", ErrInvalidPosition, d, p.cfg.D-1)
		}
	}
	return nil
}

// Next returns the position after pos: the next step, or step 0 of the next
// epoch after the last step. The number of epochs belongs to the iterator.
func (p *Plan) Next(pos Position) Position {
	if pos.Step+1 < p.steps {
		return Position{Epoch: pos.Epoch, Step: pos.Step + 1}
	}
	return Position{Epoch: pos.Epoch + 1}
}

// order returns the row group order of epoch (cached).
func (p *Plan) order(epoch int) *epochOrder {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, e := range p.cache {
		if e != nil && e.epoch == epoch {
			return e
		}
	}
	var ord []int32
	if p.cfg.ShuffleRowGroups {
		ord = permutation(deriveSeed(p.cfg.Seed, domainRowGroups, uint64(epoch)), len(p.rgs))
	} else {
		ord = make([]int32, len(p.rgs))
		for i := range ord {
			ord[i] = int32(i)
		}
	}
	cum := make([]int64, len(ord)+1)
	for i, g := range ord {
		cum[i+1] = cum[i] + p.rgs[g].Rows
	}
	e := &epochOrder{epoch: epoch, order: ord, cum: cum}
	p.cache[p.clock%len(p.cache)] = e
	p.clock++
	return e
}

// RowGroupOrder returns the row groups of epoch in the order their rows are
// concatenated: a permutation drawn with the seed deriveSeed(Seed, 1, epoch) when
// ShuffleRowGroups is set (see rand.go), the identity otherwise. Nil for a
// negative epoch.
func (p *Plan) RowGroupOrder(epoch int) []int32 {
	if epoch < 0 {
		return nil
	}
	return append([]int32(nil), p.order(epoch).order...)
}

// segments returns the segments holding rows [from, to) of stream d in epoch,
// and the stream row where the first returned segment starts.
func (p *Plan) segments(epoch, d int, from, to int64) []Segment {
	if from >= to {
		return nil
	}
	e := p.order(epoch)
	lo, hi := p.starts[d]+from, p.starts[d]+to
	// First position whose rows end after lo.
	i := sort.Search(len(e.order), func(i int) bool { return e.cum[i+1] > lo })
	var segs []Segment
	for ; i < len(e.order) && e.cum[i] < hi; i++ {
		s, t := max(lo, e.cum[i]), min(hi, e.cum[i+1])
		if s >= t {
			continue
		}
		segs = append(segs, Segment{RowGroup: int(e.order[i]), Start: s - e.cum[i], End: t - e.cum[i]})
	}
	return segs
}

// Stream returns the segments of stream d in epoch, in order: the stream's
// StreamLen(d) rows of the epoch sequence (row groups in RowGroupOrder, rows
// concatenated, split into D contiguous streams, the first N mod D one row
// longer). Empty row groups never appear. Nil for an invalid epoch or d.
func (p *Plan) Stream(epoch, d int) []Segment {
	if epoch < 0 || d < 0 || d >= p.cfg.D {
		return nil
	}
	return p.segments(epoch, d, 0, p.lens[d])
}

// WindowPerm returns the permutation of shuffle window k of stream d in epoch:
// the window holds stream rows [k*W, min((k+1)*W, StreamLen(d))), and position i
// of the permuted window is stream row k*W + perm[i]. It is drawn with the seed
// deriveSeed(Seed, 2, epoch, d, k) (see rand.go). Nil when W = 0 or the window
// is outside the stream.
func (p *Plan) WindowPerm(epoch, d, k int) []int32 {
	w := p.cfg.Window
	if w == 0 || epoch < 0 || d < 0 || d >= p.cfg.D || k < 0 || int64(k)*w >= p.lens[d] {
		return nil
	}
	n := min(w, p.lens[d]-int64(k)*w)
	return permutation(deriveSeed(p.cfg.Seed, domainWindow, uint64(epoch), uint64(d), uint64(k)), int(n))
}

// readFrom returns the stream row where reading for step starts in stream d:
// the start of the window holding row step*b (W > 0) or that row (W = 0), or
// ReadEnd(d) when the stream delivers no real row at or after that step.
func (p *Plan) readFrom(step, d int) int64 {
	row := int64(step) * p.b
	end := p.ReadEnd(d)
	if row >= p.delivered(d) {
		return end
	}
	if w := p.cfg.Window; w > 0 {
		row = row / w * w
	}
	return row
}

// ReadStart says where reading for position pos of stream d starts: the
// segment of Stream(pos.Epoch, d) with index segmentIndex, at rowInSegment rows
// past that segment's Start, which is stream row windowStartRowInStream: the
// start of the shuffle window that holds row pos.Step*b (k*W with k =
// floor(pos.Step*b/W)), or that row itself when W = 0. Nothing earlier is read.
// When the stream has no real row left at that step, segmentIndex is the number
// of segments, rowInSegment 0 and windowStartRowInStream ReadEnd(d). Positions
// that Check rejects give (0, 0, 0).
func (p *Plan) ReadStart(pos Position, d int) (segmentIndex int, rowInSegment int64, windowStartRowInStream int64) {
	if p.Check(pos, d) != nil {
		return 0, 0, 0
	}
	from := p.readFrom(pos.Step, d)
	segs := p.Stream(pos.Epoch, d)
	if from >= p.ReadEnd(d) {
		return len(segs), 0, from
	}
	var at int64
	for i, s := range segs {
		if from < at+s.Len() {
			return i, from - at, from
		}
		at += s.Len()
	}
	return len(segs), 0, from
}

// SourceRow says which dataset row stream d delivers at stream position q of
// an epoch (q = step*b + row within the slice): the index of its row group
// (into the plan's row groups) and its row within that row group, after the
// shuffle window's permutation. ok is false for positions past the stream's
// rows (padding) and for invalid arguments.
func (p *Plan) SourceRow(epoch, d int, q int64) (rowGroup int, row int64, ok bool) {
	if epoch < 0 || d < 0 || d >= p.cfg.D || q < 0 || q >= p.lens[d] {
		return 0, 0, false
	}
	r := q
	if w := p.cfg.Window; w > 0 {
		k := q / w
		r = k*w + int64(p.WindowPerm(epoch, d, int(k))[q-k*w])
	}
	var at int64
	for _, seg := range p.Stream(epoch, d) {
		if r < at+seg.Len() {
			return seg.RowGroup, seg.Start + r - at, true
		}
		at += seg.Len()
	}
	return 0, 0, false
}

// StreamReads returns the row groups (indices into the plan's row groups)
// that the Cutter of stream d, started at pos, asks for, in the order it asks
// for them: the segments of Stream(pos.Epoch, d) from ReadStart up to
// ReadEnd. A reader that fetches exactly these feeds the cutter; nothing
// earlier in the stream is read. Positions that Check rejects give nil.
func (p *Plan) StreamReads(pos Position, d int) []int {
	if p.Check(pos, d) != nil {
		return nil
	}
	segs := p.Stream(pos.Epoch, d)
	first, _, _ := p.ReadStart(pos, d)
	end := p.ReadEnd(d)
	var at int64 // stream row where segs[i] starts
	var out []int
	for i, seg := range segs {
		if at >= end {
			break
		}
		if i >= first {
			out = append(out, seg.RowGroup)
		}
		at += seg.Len()
	}
	return out
}

// ReadSet returns the row groups, ascending, that the streams of the given
// slices read in a whole epoch. Slice numbers outside the plan are ignored.
func (p *Plan) ReadSet(epoch int, slices []int) []int {
	return p.ReadSetFrom(Position{Epoch: epoch}, slices)
}

// ReadSetFrom is ReadSet for reading that starts at pos (a resumed epoch).
func (p *Plan) ReadSetFrom(pos Position, slices []int) []int {
	if p.Check(pos) != nil {
		return nil
	}
	seen := make(map[int]struct{})
	var out []int
	for _, d := range slices {
		if d < 0 || d >= p.cfg.D {
			continue
		}
		for _, s := range p.segments(pos.Epoch, d, p.readFrom(pos.Step, d), p.ReadEnd(d)) {
			if _, ok := seen[s.RowGroup]; !ok {
				seen[s.RowGroup] = struct{}{}
				out = append(out, s.RowGroup)
			}
		}
	}
	sort.Ints(out)
	return out
}

// Bytes returns the compressed bytes of the row groups of ReadSet(epoch,
// slices): what a process serving those slices reads in an epoch.
func (p *Plan) Bytes(epoch int, slices []int) int64 {
	var n int64
	for _, g := range p.ReadSet(epoch, slices) {
		n += p.rgs[g].Bytes
	}
	return n
}
