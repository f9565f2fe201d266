package feed

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/meshfeed/meshfeed/batching"
	"github.com/meshfeed/meshfeed/loader"
)

// How a mixture's cursors read (mixture_stream.go): the pieces their
// readers are given (on the steps' ends, or of an even share), the steps'
// counts ahead those are cut on, and the gates that start each piece when
// its cursor nears it.

// aheadSteps is how many steps ahead a cursor's reader is given pieces
// cut on the steps' ends: past them, a new reader continues (push).
var aheadSteps = 4096 // a test sets it smaller

// stepPieces returns what mc's next reader reads, from where its last one
// stopped (mc.next in its sequence) to the end of the step aheadSteps
// steps on, in pieces that end on the ends of whole steps' takes of its
// source, and that reader's budget in flight: the single dataset's rule
// (planPieces) applied to the cursor's share of its slice's share. The
// share is split among the slice's cursors as the steps ahead take their
// rows (by the sources' weights); of the cursor's share, the columns
// decoded whole come first, a quarter of the rest is the piece (whole
// steps' takes, at least one step's), the cutter holds two pieces and the
// reader has the rest in flight, at least one piece. A step's take then
// lies in one piece (the composition counts each step's rows of a source
// in a slice: its take is rows [C(k), C(k+1)) of the cursor's sequence),
// as a slice's step lies in one of the single dataset's pieces, and the
// cursors of a slice together hold what one slice holds. ok is false where
// no step ahead takes a row of the source (the caller then cuts as
// without).
func (s *mixStream) stepPieces(mc *mixCursor, perRow float64, whole int64) (segs []batching.Segment, budget, pieceBytes int64, ok bool) {
	i := mc.src.idx
	from := mc.next
	cums, err := s.ahead.from(i, from, s.walk.Step()-1, aheadSteps)
	if err != nil || len(cums) < 2 || cums[len(cums)-1] <= from {
		return nil, 0, 0, false
	}
	steps := float64(len(cums) - 1)
	take := float64(cums[len(cums)-1]-cums[0]) / steps // rows a step, on average
	mc.take = take
	share := float64(s.share) * take / float64(s.mp.mix.SliceRows())
	avail := share - float64(whole)
	per := max(int(avail/perRow/4/take), 1) // steps a piece
	piece := float64(per) * take * perRow
	budget = int64(max(avail-2*piece, piece)) + whole
	// The pieces' ends, in rows from "from": every per-th step's end.
	var ends []int64
	for j := per; j < len(cums); j += per {
		if e := cums[j] - from; e > 0 && (len(ends) == 0 || e > ends[len(ends)-1]) {
			ends = append(ends, e)
		}
	}
	if last := cums[len(cums)-1] - from; len(ends) == 0 || ends[len(ends)-1] < last {
		ends = append(ends, last)
	}
	stop := ends[len(ends)-1]
	var at int64 // rows from "from" at the start of g
	e := 0
	for _, g := range mc.cur.Cutter().Reads(0) {
		for lo := g.Start; lo < g.End && at < stop; {
			for e < len(ends) && ends[e] <= at {
				e++
			}
			n := g.End - lo
			if e < len(ends) {
				n = min(n, ends[e]-at)
			}
			segs = append(segs, batching.Segment{RowGroup: g.RowGroup, Start: lo, End: lo + n})
			lo, at = lo+n, at+n
		}
		if at >= stop {
			break
		}
	}
	return segs, budget, int64(piece + 0.5), len(segs) > 0
}

// pieceGate returns the gate of a cursor's reader (loader.WithReaderGate)
// that g describes: the reader's n-th piece starts once its (n-1)-th is in
// the cursor's cutter and less than half a piece's rows are left ahead of
// the cursor there (and at least four steps' takes, take rows a step, and
// a shuffle window of w rows), or at once when the cursor waits for the
// reader. Otherwise each cursor's reader decodes its next piece as soon as
// it hands one over, so every cursor holds a decoded piece ahead of the
// one it takes from, at least a page: a slice's three cursors held three
// such pieces where the single dataset's slice holds one. A cursor takes
// a third of its slice's rows, so a piece lasts it three times as many
// steps, and half a piece ahead is still many steps ahead. A waiting
// gate is woken when its own condition holds (gateState.poke), not at
// every step.
func pieceGate(g *gateState, take float64, w int64) func(context.Context, loader.RowGroupRef) error {
	var n int64 // the pieces gated so far
	return func(ctx context.Context, ref loader.RowGroupRef) error {
		n++
		if n == 1 {
			return nil
		}
		lead := max((ref.End-ref.Start)/2, int64(4*take+0.5), 1) + w
		for {
			wake := g.arm(n-1, lead)
			if wake == nil {
				return nil
			}
			select {
			case <-wake:
				g.wakes.Add(1)
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
}

// mixturePieces returns the rows per piece of a mixture cursor's reader and
// that reader's budget in flight, for a cursor's share of the stream's
// read-ahead (compressed plus decoded bytes), its source's streamed bytes
// per row and bytes of columns decoded whole per row group
// (loader.Dataset.StreamedRowBytes). Of the share, the columns decoded
// whole come first; of the rest, half is the piece size (at least one row),
// the cutter holds two pieces (the one being cut and the one before it,
// which the steps in flight still view), and the reader has one in flight:
// at most one and a half shares, as with pieces of a quarter and the whole
// share in flight. A cursor reads a third of a slice's rows of a three-source
// mixture: pieces of a quarter of its third of a slice's share made three
// times the single dataset's pieces per step, each with its own mappings
// and edge pages; pieces of half make half as many (BENCHMARKS.md).
func mixturePieces(share int64, perRow float64, whole int64) (rows, budget int64) {
	avail := float64(share - whole)
	rows = max(int64(avail/perRow/2), 1)
	piece := int64(float64(rows)*perRow + 0.5)
	return rows, max(int64(avail)-2*piece, piece) + whole
}

// gateState is what a cursor's reader's gate (pieceGate) reads of the
// cursor, which the stream's goroutine updates, and the gate's wait.
type gateState struct {
	pushed  atomic.Int64 // records the reader returned and the cursor took in
	ahead   atomic.Int64 // rows pushed to the cursor's cutter and not taken (Cutter.Ahead)
	waiting atomic.Bool  // the cursor waits for the reader's next record
	wakes   atomic.Int64 // the times the gate was woken (tests)

	mu         sync.Mutex
	wake       chan struct{} // closed when the waiting gate may open (poke); nil: none waits
	want, lead int64         // the waiting gate's condition (open)
}

// open reports whether a gate waiting for want records pushed and at most
// lead rows ahead may start its piece. A cursor waiting for its reader
// opens the gate only once it has taken the records before the gate's
// piece: before that, the record it waits for is on its way already (the
// reader gated none of them), and waking the gate would only wake it.
func (g *gateState) open(want, lead int64) bool {
	return g.pushed.Load() >= want && (g.waiting.Load() || g.ahead.Load() <= lead)
}

// arm returns nil when the gate may open, else a channel that poke closes
// once it may.
func (g *gateState) arm(want, lead int64) <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.open(want, lead) {
		return nil
	}
	g.want, g.lead = want, lead
	if g.wake == nil {
		g.wake = make(chan struct{})
	}
	return g.wake
}

// poke wakes the gate if it waits and may now open: the stream's goroutine
// calls it after it updates the cursor's counts. Waking only the gates
// that may open, not every gate at every step, keeps a mixture's
// goroutine wakeups at about one per piece (TestMixtureGateHoldsLess).
func (g *gateState) poke() {
	g.mu.Lock()
	if g.wake != nil && g.open(g.want, g.lead) {
		close(g.wake)
		g.wake = nil
	}
	g.mu.Unlock()
}

// mixAhead records the composition's counts C(k) (Walker.Cum) of the steps
// from the one being cut on, for stepPieces: a walker of its own, ahead of
// the stream's.
type mixAhead struct {
	w      *batching.Walker
	steps  int       // the mixture's
	first  int       // the step of cums[0]
	cums   [][]int64 // C(first+j)
	counts []int64
}

func newMixAhead(mix *batching.Mixture, start int) (*mixAhead, error) {
	w := mix.Composition().Walk()
	if err := w.Skip(start); err != nil {
		return nil, err
	}
	return &mixAhead{w: w, steps: mix.Steps(), first: start, cums: [][]int64{slices.Clone(w.Cum())},
		counts: make([]int64, len(w.Cum()))}, nil
}

// step walks one step on; false at the mixture's end.
func (a *mixAhead) step() (bool, error) {
	if a.w.Step() >= a.steps {
		return false, nil
	}
	if err := a.w.Next(a.counts); err != nil {
		return false, err
	}
	a.cums = append(a.cums, slices.Clone(a.w.Cum()))
	return true, nil
}

// from returns source i's counts C_i(k) for k from k0, the last step whose
// count is at most pos, to k0+n (fewer at the mixture's end), first
// forgetting the steps before floor (no cursor reads from them again).
func (a *mixAhead) from(i int, pos int64, floor, n int) ([]int64, error) {
	if drop := floor - a.first; drop > 0 && drop < len(a.cums) {
		a.cums, a.first = slices.Clone(a.cums[drop:]), floor
	}
	for a.cums[len(a.cums)-1][i] <= pos && len(a.cums) <= 2*n { // a source no step takes from stops the search
		if ok, err := a.step(); err != nil || !ok {
			if err != nil {
				return nil, err
			}
			break
		}
	}
	k := sort.Search(len(a.cums), func(j int) bool { return a.cums[j][i] > pos }) - 1
	if k < 0 {
		return nil, fmt.Errorf("row %d of source %d is before step %d (internal error)", pos, i, a.first)
	}
	for len(a.cums) <= k+n {
		if ok, err := a.step(); err != nil || !ok {
			if err != nil {
				return nil, err
			}
			break
		}
	}
	end := min(k+n+1, len(a.cums))
	out := make([]int64, 0, end-k)
	for _, c := range a.cums[k:end] {
		out = append(out, c[i])
	}
	return out, nil
}
