package batching

// Concatenate-then-split packing (DESIGN.md, "Concatenated packing"): the
// documents of an epoch, each followed by an end-of-document token, form one
// token sequence that is cut into rows of exactly L tokens; those packed rows
// are split into D streams and steps exactly as rows are by Plan.

import (
	"fmt"
	"math"
	"sort"
	"sync"
)

// concatBlock is the number of documents per block of an epoch's prefix
// sums when there is no shuffle window (with one, a block is a window).
const concatBlock = 1024

// ConcatPlan is the plan of concatenated packing. The documents' order is
// the row plan's with D = 1 (row groups permuted by (Seed, epoch), the
// shuffle window over the one document sequence); each document of t tokens
// contributes t+1 tokens (its end-of-document token last), so an epoch has
// T = sum(t) + N tokens, the same every epoch, and R = ceil(T/L) packed rows
// (only the very last one short of L, padded). The R packed rows are split
// into D contiguous streams (lengths differing by at most one, the first R
// mod D longer) and cut into steps of b = B/D packed rows per slice under
// the policy, as Plan does with rows. Everything follows from the token
// counts: every process computes the same T, R and steps.
//
// It is safe for concurrent use; the prefix sums of the last two epochs
// are kept.
type ConcatPlan struct {
	cfg    Config
	docs   *Plan     // the documents' order: the row plan with D = 1
	rows   *Plan     // the packed rows: the row plan of R rows in one row group, W = 0
	counts [][]int32 // tokens of each document (without its end token), per row group
	length int64
	block  int64 // documents per block of the prefix sums
	t, r   int64

	mu    sync.Mutex
	cache [2]*concatEpoch
	clock int
}

// concatEpoch holds the prefix sums of one epoch's blocks: cum[k] is the
// tokens before block k (documents [k*block, (k+1)*block) in epoch order).
type concatEpoch struct {
	epoch int
	cum   []int64
}

// DocRun is a run of consecutive tokens of one document, in the epoch's
// token sequence.
type DocRun struct {
	// Doc is the document's position in the epoch's document order; Raw its
	// position in the stream before the shuffle window's permutation (the
	// order row groups are read in: ConcatPlan.ReadSegments).
	Doc, Raw int64
	// RowGroup and Row say which document it is (RowGroup indexes the
	// plan's row groups).
	RowGroup int
	Row      int64
	// Off is the first token of the run inside the document, N its tokens;
	// Tokens is the document's tokens without its end token, so token
	// Tokens of the document (its last) is the end-of-document token.
	Off, N, Tokens int64
}

// NewConcatPlan checks cfg, length (L > 0) and the token counts (counts[i]
// holds the tokens of every row of rowGroups[i], without the end token:
// len(counts[i]) == rowGroups[i].Rows, each >= 0) and computes the plan. It
// fails like NewPlan with packed rows in place of rows: R < B under Drop, R
// not a multiple of B under Raise.
func NewConcatPlan(rowGroups []RowGroup, counts [][]int32, cfg Config, length int) (*ConcatPlan, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if length <= 0 || length > math.MaxInt32 {
		return nil, fmt.Errorf("%w: concatenated packing needs a length L in [1, %d], got %d", ErrInvalidConfig, math.MaxInt32, length)
	}
	if len(counts) != len(rowGroups) {
		return nil, fmt.Errorf("%w: token counts of %d row groups for %d row groups", ErrInvalidRowGroup, len(counts), len(rowGroups))
	}
	var t int64
	for i, rg := range rowGroups {
		if int64(len(counts[i])) != rg.Rows {
			return nil, fmt.Errorf("%w: row group %d (file %d, row group %d in file): %d token counts for %d rows",
				ErrInvalidRowGroup, i, rg.File, rg.Index, len(counts[i]), rg.Rows)
		}
		for j, c := range counts[i] {
			if c < 0 {
				return nil, fmt.Errorf("%w: row group %d (file %d, row group %d in file) row %d: %d tokens",
					ErrInvalidRowGroup, i, rg.File, rg.Index, j, c)
			}
			t += int64(c) + 1
		}
	}
	docs, err := NewPlan(rowGroups, Config{GlobalBatch: 1, D: 1, Seed: cfg.Seed,
		ShuffleRowGroups: cfg.ShuffleRowGroups, Window: cfg.Window, Policy: Drop})
	if err != nil {
		return nil, err
	}
	l := int64(length)
	p := &ConcatPlan{cfg: cfg, docs: docs, counts: counts, length: l, t: t, r: (t + l - 1) / l, block: concatBlock}
	if cfg.Window > 0 {
		p.block = cfg.Window
	}
	rowsCfg := cfg
	rowsCfg.Window = 0
	if p.rows, err = NewPlan([]RowGroup{{Rows: p.r}}, rowsCfg); err != nil {
		return nil, fmt.Errorf("packed rows: %w (T=%d tokens in rows of L=%d)", err, t, l)
	}
	return p, nil
}

// Config returns the plan's configuration.
func (p *ConcatPlan) Config() Config { return p.cfg }

// Docs returns the plan of the documents' order (D = 1, one document per
// step): its RowGroupOrder and WindowPerm are the epoch's.
func (p *ConcatPlan) Docs() *Plan { return p.docs }

// Length returns L, the tokens of a packed row.
func (p *ConcatPlan) Length() int { return int(p.length) }

// Tokens returns T, the tokens of an epoch (end tokens included).
func (p *ConcatPlan) Tokens() int64 { return p.t }

// Rows returns R = ceil(T/L), the packed rows of an epoch.
func (p *ConcatPlan) Rows() int64 { return p.r }

// N returns the documents of an epoch.
func (p *ConcatPlan) N() int64 { return p.docs.N() }

// RowsPlan returns the plan of the packed rows: R rows in one row group,
// without a shuffle window, split into D streams and cut into steps under
// the policy. Its SliceRows, StepsPerEpoch, DroppedRows, PaddedRows,
// StreamLen, StreamStart, SliceReal, Check and Remainder are the packed
// rows'.
func (p *ConcatPlan) RowsPlan() *Plan { return p.rows }

// SliceRows returns b = B/D, the packed rows of one slice.
func (p *ConcatPlan) SliceRows() int { return p.rows.SliceRows() }

// StepsPerEpoch returns floor(R/B) (Drop), ceil(R/B) (Pad) or R/B (Raise).
func (p *ConcatPlan) StepsPerEpoch() int { return p.rows.StepsPerEpoch() }

// SliceReal returns the packed rows of slice d of step that hold tokens;
// the rest (at the end of the slice, under Pad) are all padding.
func (p *ConcatPlan) SliceReal(step, d int) int { return p.rows.SliceReal(step, d) }

// SliceTokens returns the tokens [lo, hi) of the epoch's sequence that slice
// d of step holds, from its first packed row on (hi - lo < SliceRows()*L only
// in the last row of the epoch and for padding rows).
func (p *ConcatPlan) SliceTokens(step, d int) (lo, hi int64) {
	if step < 0 || step >= p.rows.steps || d < 0 || d >= p.cfg.D {
		return 0, 0
	}
	row := p.rows.starts[d] + int64(step)*p.rows.b
	return p.tokenRange(row, row+int64(p.SliceReal(step, d)))
}

// StreamTokens returns the tokens [lo, hi) that stream d delivers from step
// pos.Step to the end of epoch pos.Epoch's delivered rows.
func (p *ConcatPlan) StreamTokens(pos Position, d int) (lo, hi int64) {
	if p.rows.Check(pos, d) != nil {
		return 0, 0
	}
	end := min(p.rows.lens[d], p.rows.delivered(d))
	from := min(int64(pos.Step)*p.rows.b, end)
	return p.tokenRange(p.rows.starts[d]+from, p.rows.starts[d]+end)
}

// tokenRange returns the tokens of packed rows [r0, r1).
func (p *ConcatPlan) tokenRange(r0, r1 int64) (int64, int64) {
	return min(p.t, r0*p.length), min(p.t, r1*p.length)
}

// epochCum returns the block prefix sums of epoch (cached).
func (p *ConcatPlan) epochCum(epoch int) []int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, e := range p.cache {
		if e != nil && e.epoch == epoch {
			return e.cum
		}
	}
	n := p.docs.N()
	cum := make([]int64, (n+p.block-1)/p.block+1)
	var q, sum int64
	for _, seg := range p.docs.Stream(epoch, 0) {
		for _, c := range p.counts[seg.RowGroup][seg.Start:seg.End] {
			sum += int64(c) + 1
			q++
			if q%p.block == 0 {
				cum[q/p.block] = sum
			}
		}
	}
	cum[len(cum)-1] = sum
	p.cache[p.clock%len(p.cache)] = &concatEpoch{epoch: epoch, cum: cum}
	p.clock++
	return cum
}

// blockDocs returns the documents of block k of epoch, in epoch order.
func (p *ConcatPlan) blockDocs(epoch int, k int64) []DocRun {
	lo := k * p.block
	hi := min(p.docs.N(), lo+p.block)
	raw := make([]DocRun, 0, hi-lo)
	q := lo
	for _, seg := range p.docs.segments(epoch, 0, lo, hi) {
		for r := seg.Start; r < seg.End; r++ {
			raw = append(raw, DocRun{Raw: q, RowGroup: seg.RowGroup, Row: r, Tokens: int64(p.counts[seg.RowGroup][r])})
			q++
		}
	}
	if p.cfg.Window == 0 {
		for i := range raw {
			raw[i].Doc = raw[i].Raw
		}
		return raw
	}
	out := make([]DocRun, len(raw))
	for i, j := range p.docs.WindowPerm(epoch, 0, int(k)) {
		out[i] = raw[j]
		out[i].Doc = lo + int64(i)
	}
	return out
}

// Runs returns the document runs that hold tokens [lo, hi) of epoch's
// sequence, in order (clamped to [0, T)).
func (p *ConcatPlan) Runs(epoch int, lo, hi int64) []DocRun {
	lo, hi = max(lo, 0), min(hi, p.t)
	if epoch < 0 || lo >= hi {
		return nil
	}
	cum := p.epochCum(epoch)
	k := int64(sort.Search(len(cum)-1, func(i int) bool { return cum[i+1] > lo }))
	at := cum[k] // tokens before the current document
	var out []DocRun
	for ; at < hi; k++ {
		for _, doc := range p.blockDocs(epoch, k) {
			size := doc.Tokens + 1
			if at+size > lo {
				doc.Off = max(0, lo-at)
				doc.N = min(at+size, hi) - at - doc.Off
				out = append(out, doc)
			}
			at += size
			if at >= hi {
				break
			}
		}
	}
	return out
}

// DocRange returns the documents [q0, q1) (epoch order) that hold tokens
// [lo, hi) of epoch, and the stream positions [r0, r1) to read for them:
// [q0, q1) itself without a shuffle window, else the whole windows holding
// them. Empty ranges for lo >= hi.
func (p *ConcatPlan) DocRange(epoch int, lo, hi int64) (q0, q1, r0, r1 int64) {
	lo, hi = max(lo, 0), min(hi, p.t)
	if epoch < 0 || lo >= hi {
		return 0, 0, 0, 0
	}
	q0, q1 = p.docAt(epoch, lo), p.docAt(epoch, hi-1)+1
	r0, r1 = q0, q1
	if w := p.cfg.Window; w > 0 {
		r0, r1 = q0/w*w, min(p.docs.N(), (q1+w-1)/w*w)
	}
	return q0, q1, r0, r1
}

// docAt returns the position of the document holding token t of epoch.
func (p *ConcatPlan) docAt(epoch int, t int64) int64 {
	runs := p.Runs(epoch, t, t+1)
	return runs[0].Doc
}

// ReadSegments returns the row-group segments holding stream positions [r0,
// r1) of epoch's documents (before the window's permutation), in order.
func (p *ConcatPlan) ReadSegments(epoch int, r0, r1 int64) []Segment {
	if epoch < 0 {
		return nil
	}
	return p.docs.segments(epoch, 0, max(r0, 0), min(r1, p.docs.N()))
}

// WindowStart returns the first stream position of the window holding
// document position q (q itself without a window).
func (p *ConcatPlan) WindowStart(q int64) int64 {
	if w := p.cfg.Window; w > 0 {
		return q / w * w
	}
	return q
}

// WindowEnd returns the stream position after the window holding document
// position q (q+1 without a window).
func (p *ConcatPlan) WindowEnd(q int64) int64 {
	if w := p.cfg.Window; w > 0 {
		return min(p.docs.N(), (q/w+1)*w)
	}
	return q + 1
}

// PackRuns writes packed rows of L = length tokens from runs (as Runs
// returns them for tokens [lo, hi), lo a multiple of L) into tokens,
// segmentIDs and positions, three buffers of the same length, a multiple of
// L (the slice's rows times L). ids returns a run's document tokens
// (Tokens of them; the end token eod follows the last). Per row, segment ids
// count the document pieces from 1 and positions restart at 0 with each
// piece, so a document continued from the previous row is a new segment
// from position 0 (no attention across rows). Tokens past the runs are
// padding: fill, segment 0, position 0.
func PackRuns(runs []DocRun, length int, ids func(DocRun) []int32, eod, fill int32, tokens, segmentIDs, positions []int32) {
	l := int64(length)
	at := int64(0) // tokens written
	row, seg := int64(-1), int32(0)
	for _, r := range runs {
		doc := ids(r)
		for k := int64(0); k < r.N; {
			if at/l != row {
				row, seg = at/l, 0
			}
			seg++
			n := min(r.N-k, l-at%l)
			off := r.Off + k
			dst := tokens[at : at+n]
			if end := off + n; end <= r.Tokens {
				copy(dst, doc[off:end])
			} else {
				copy(dst, doc[off:r.Tokens])
				dst[n-1] = eod
			}
			for j := range n {
				segmentIDs[at+j] = seg
				positions[at+j] = int32(j)
			}
			at += n
			k += n
		}
	}
	for i := at; i < int64(len(tokens)); i++ {
		tokens[i], segmentIDs[i], positions[i] = fill, 0, 0
	}
}

// RemainderRows returns the packed rows (in the epoch's sequence of R rows)
// that new slice d holds at step of an elastic switch's epoch, in order:
// rem is RowsPlan().Remainder(sw), whose pieces name rows of the old
// plan's streams (no window permutes packed rows). Their tokens are
// SliceTokens' for each range; the slice's rows past them are padding.
func (p *ConcatPlan) RemainderRows(rem *Remainder, step, d int) [][2]int64 {
	left := int64(rem.SliceReal(step, d))
	var out [][2]int64
	for _, pc := range rem.Pieces(step, d) {
		if left == 0 {
			break
		}
		n := min(left, pc.Len())
		start := rem.Old().StreamStart(pc.Stream) + pc.From
		out = append(out, [2]int64{start, start + n})
		left -= n
	}
	return out
}

// RowTokens returns the tokens [lo, hi) of packed rows [r0, r1).
func (p *ConcatPlan) RowTokens(r0, r1 int64) (lo, hi int64) { return p.tokenRange(r0, r1) }
