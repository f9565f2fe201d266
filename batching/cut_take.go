package batching

import (
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// Take returns the next n rows of the cutter's stream, for a cutter over a
// mixture source's plan (SourceConfig: slices of one row, so Step counts
// the stream's rows). The rows are a view of a pushed record when one
// record holds them and there is no shuffle window, a copy otherwise. ok is
// false when the cutter needs the segment that Wants names: push it and
// call Take again with the same n. Asking for rows past the end of the
// stream is ErrInvalidPosition. The record belongs to the caller.
func (c *Cutter) Take(n int64) (rec arrow.RecordBatch, ok bool, err error) {
	if c.closed {
		return nil, false, ErrCutterClosed
	}
	lo := int64(c.step)
	hi := lo + n
	if c.b != 1 || n <= 0 || hi > c.plan.lens[c.d] {
		return nil, false, fmt.Errorf("%w: take %d rows at row %d of stream %d (%d rows, slice rows %d): want a source plan's cutter and rows inside the stream",
			ErrInvalidPosition, n, lo, c.d, c.plan.lens[c.d], c.b)
	}
	var data arrow.RecordBatch
	if c.w == 0 {
		data, ok, err = c.cutContiguous(lo, hi)
	} else {
		data, ok, err = c.cutWindowed(lo, hi)
	}
	if err != nil || !ok {
		return nil, false, err
	}
	c.moveTo(hi)
	return data, true, nil
}

// skip is Take without the record, for a cutter with no shuffle window:
// it moves past rows [Step, Step+n), which it must hold (else ok is false,
// as Take).
func (c *Cutter) skip(n int64) (ok bool, err error) {
	if c.closed {
		return false, ErrCutterClosed
	}
	lo := int64(c.step)
	hi := lo + n
	if c.b != 1 || c.w != 0 || n <= 0 || hi > c.plan.lens[c.d] {
		return false, fmt.Errorf("%w: skip %d rows at row %d of stream %d (%d rows, slice rows %d, window %d): want a source plan's cutter without a window and rows inside the stream",
			ErrInvalidPosition, n, lo, c.d, c.plan.lens[c.d], c.b, c.w)
	}
	if c.buffered() < hi {
		return false, c.needInput()
	}
	c.moveTo(hi)
	return true, nil
}

// moveTo moves the cutter's stream position to row hi (rows before it
// taken) and releases the pushed records no row from there on needs.
func (c *Cutter) moveTo(hi int64) {
	c.step = int(hi)
	if hi >= c.plan.lens[c.d] {
		c.releaseBefore(c.end + 1)
	} else {
		next := hi
		if c.w > 0 {
			next = next / c.w * c.w
		}
		c.releaseBefore(next)
	}
}

// SourceCursor reads one stream (slice d) of a mixture source as one
// unbounded sequence: epoch 0's stream d, then epoch 1's, ... (each epoch
// its own row group order and shuffle windows). After an elastic switch
// (Mixture.NewCursor) the sequence starts with the source's remainder
// stream d, pieces of the streams of the plan before the switch, and
// continues with the plan's epochs from the first one no old slice had
// begun. It owns one Cutter at a time, for the epoch or piece it is in. It
// is not safe for concurrent use.
type SourceCursor struct {
	plan  *Plan
	d     int
	mem   memory.Allocator
	opts  []CutterOption
	epoch int // of plan, once past the remainder
	cut   *Cutter
	phase int

	old   *Plan      // the plan before the switch, whose streams pre names
	pre   []remPiece // remainder pieces not yet read; pre[0] is cut's while inPre
	inPre bool
}

// NewSourceCursor returns a cursor at row pos of the sequence of stream d
// of plan (a SourceConfig plan): epoch pos / StreamLen(d), row pos mod
// StreamLen(d). Reading starts at the shuffle window holding that row.
func NewSourceCursor(plan *Plan, d int, pos int64, mem memory.Allocator, opts ...CutterOption) (*SourceCursor, error) {
	if plan == nil || d < 0 || d >= plan.cfg.D || plan.lens[d] == 0 || pos < 0 {
		return nil, fmt.Errorf("%w: source cursor at row %d of stream %d", ErrInvalidPosition, pos, d)
	}
	s := &SourceCursor{plan: plan, d: d, mem: mem, opts: opts}
	if err := s.openEpoch(pos); err != nil {
		return nil, err
	}
	return s, nil
}

// newRemainderCursor returns a cursor of new stream d of a source with
// remainder r, at row p of its sequence counted from the switch.
func newRemainderCursor(plan *Plan, r *sourceRemainder, d int, p int64, mem memory.Allocator, opts ...CutterOption) (*SourceCursor, error) {
	s := &SourceCursor{plan: plan, d: d, mem: mem, opts: opts, old: r.old, epoch: r.next}
	var err error
	if p < r.lens[d] {
		s.pre = r.piecesOf(d, p)
		err = s.openPiece()
	} else {
		err = s.openEpoch(int64(r.next)*plan.lens[d] + p - r.lens[d])
	}
	if err != nil {
		return nil, err
	}
	return s, nil
}

// openEpoch opens the cutter of the plan's epoch holding row pos of the
// plain sequence.
func (s *SourceCursor) openEpoch(pos int64) error {
	l := s.plan.lens[s.d]
	s.epoch = int(pos / l)
	cut, err := NewCutter(s.plan, s.epoch, s.d, int(pos%l), s.mem, s.opts...)
	s.cut = cut
	return err
}

// openPiece opens the cutter of pre[0], reading no further than it needs.
func (s *SourceCursor) openPiece() error {
	pc := s.pre[0]
	cut, err := NewCutter(s.old, pc.epoch, pc.stream, int(pc.from), s.mem, s.opts...)
	if err != nil {
		return err
	}
	cut.end = min(cut.end, s.old.readEndAt(pc.stream, pc.to))
	s.cut, s.inPre = cut, true
	return nil
}

// Epoch returns the source epoch of the plan the cursor reads (while it
// reads an elastic remainder: the first epoch it reads after it).
func (s *SourceCursor) Epoch() int { return s.epoch }

// Phase counts the cutters the cursor has moved on to: it changes when
// the cursor starts another epoch or another piece of an elastic remainder
// (then Cutter is another cutter, whose reads start anew).
func (s *SourceCursor) Phase() int { return s.phase }

// Cutter returns the cutter of the current epoch or piece: push what its
// Wants names (Reads lists its row ranges) when Take returns ok=false.
func (s *SourceCursor) Cutter() *Cutter { return s.cut }

// end returns the stream row where the current cutter's rows end.
func (s *SourceCursor) end() int64 {
	if s.inPre {
		return s.pre[0].to
	}
	return s.plan.lens[s.d]
}

// advance moves to the next piece or epoch when the current cutter is
// done.
func (s *SourceCursor) advance() error {
	if int64(s.cut.step) < s.end() {
		return nil
	}
	s.cut.Release()
	s.cut = nil
	s.phase++
	if s.inPre {
		s.pre = s.pre[1:]
		if len(s.pre) > 0 {
			return s.openPiece()
		}
		s.inPre = false
	} else {
		s.epoch++
	}
	cut, err := NewCutter(s.plan, s.epoch, s.d, 0, s.mem, s.opts...)
	s.cut = cut
	return err
}

// Take returns the next rows of the sequence, at most n (n >= 1): fewer
// when the current epoch's stream (or remainder piece) ends first (call
// again for the rest; Cutter is then the next one's cutter), or, with no
// shuffle window, when the pushed record holding the first row ends first
// (so that the rows are a view of it, not a copy). ok is false when the
// cutter needs input (Cutter().Wants). The record belongs to the caller.
func (s *SourceCursor) Take(n int64) (arrow.RecordBatch, bool, error) {
	if s.cut == nil {
		return nil, false, fmt.Errorf("%w: source cursor of stream %d has no cutter (an earlier error)", ErrInvalidPosition, s.d)
	}
	if err := s.advance(); err != nil {
		return nil, false, err
	}
	n = min(n, s.end()-int64(s.cut.step))
	if e := s.cut.pieceEnd(int64(s.cut.step)); s.cut.w == 0 && e > 0 {
		n = min(n, e-int64(s.cut.step)) // a view of one pushed record, not a copy
	}
	return s.cut.Take(n)
}

// Skip is Take without the record, for a cursor with no shuffle window
// whose rows are counted rather than read (a mixture whose slices are
// placed as its rows are decoded): it moves past the rows Take(n) would
// return and returns how many (ok false, and 0, when the cutter needs
// input, as Take).
func (s *SourceCursor) Skip(n int64) (int64, bool, error) {
	if s.cut == nil {
		return 0, false, fmt.Errorf("%w: source cursor of stream %d has no cutter (an earlier error)", ErrInvalidPosition, s.d)
	}
	if err := s.advance(); err != nil {
		return 0, false, err
	}
	n = min(n, s.end()-int64(s.cut.step))
	ok, err := s.cut.skip(n)
	if !ok {
		return 0, false, err
	}
	return n, true, nil
}

// pieceEnd returns the stream row where the pushed record holding stream
// row r ends, or 0 when none holds it.
func (c *Cutter) pieceEnd(r int64) int64 {
	if i := c.locate(r); i < len(c.pieces) && c.pieces[i].from <= r {
		return c.pieces[i].to
	}
	return 0
}

// Release frees what the cursor holds.
func (s *SourceCursor) Release() {
	if s.cut != nil {
		s.cut.Release()
		s.cut = nil
	}
}
