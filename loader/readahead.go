package loader

import (
	"context"
	"io"
	"slices"
	"sort"
	"sync"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/meshfeed/meshfeed/format"
)

// RowGroupReader reads a sequence of row groups in order, fetching and
// decoding the next ones while the caller works on the current one, under an
// in-flight byte budget (WithReaderReadAhead) and a decode concurrency
// (WithDecodeWorkers). A ref with a row range (RowGroupRef.Start, End), or
// any ref under WithReaderMaxPiece, is read as pieces: records of
// consecutive rows of its row group, each decoded from the pages of its rows
// where the column allows (see the package's caveats), so that a large row
// group never has to be in memory whole.
//
// # Caveats
//
// Records returned by Next belong to the caller, who must Release them.
// Close must be called (also after an error or io.EOF); it cancels work in
// flight and releases every record not handed out.
type RowGroupReader struct {
	budget   int64 // in-flight bytes
	workers  int   // concurrent decodes
	reads    int   // row groups or pieces in flight (fetching or decoding)
	maxPiece int64 // bytes per piece; 0: refs as given
	snap     bool  // pieces' shared ends move to page breaks (WithReaderSnapPieces)
	gate     func(ctx context.Context, ref RowGroupRef) error
	share    *FetchShare // nil, or where pieces' pages shared with other readers are fetched
	held     *HeldChunks // nil, or bytes held for this reader (WithReaderHeld)
	keep     *Keeper     // nil, or what it keeps for the next readers (WithReaderKeep)
	xform    Transform
	into     func(ref RowGroupRef) *format.Into
	ds       *Dataset
	ctx      context.Context
	cancel   context.CancelFunc
	queue    chan *pending
	wg       sync.WaitGroup
	stats    ReadStats

	mu       sync.Mutex
	inflight int64
	pinned   int64 // part of inflight: whole columns kept for pieces still to come
	peak     int64
	entries  map[[2]int]*rgEntry // row groups read in pieces, by file and index
	heldLeft map[[2]int]bool     // under WithReaderHeld: row groups not done with yet
	freed    chan struct{}       // signalled when budget is returned
	closed   bool
}

type pending struct {
	ref  RowGroupRef
	cost int64
	ent  *rgEntry // pieces: the row group's shared state
	done chan struct{}
	rec  arrow.RecordBatch
	err  error
}

// ReaderOption configures one RowGroupReader, overriding the Dataset's
// settings for it.
type ReaderOption func(*RowGroupReader)

// WithReaderReadAhead sets this reader's in-flight byte budget: the
// compressed plus decoded bytes of row groups fetched but not yet handed to
// the caller, for example a feed stream's budget split among its slices. One
// row group (or piece) is always allowed even when larger. Default
// DefaultReadAhead; 0 reads one row group at a time with no read-ahead;
// negative values are taken as 0.
func WithReaderReadAhead(bytes int64) ReaderOption {
	return func(r *RowGroupReader) { r.budget = max(bytes, 0) }
}

// WithReaderDecodeWorkers sets how many row groups this reader decodes at
// once (see WithDecodeWorkers); values below 1 are taken as 1.
func WithReaderDecodeWorkers(n int) ReaderOption {
	return func(r *RowGroupReader) { r.workers = max(n, 1) }
}

// WithReaderReadsInFlight sets how many row groups (or pieces) this reader
// has in flight at once, fetching or decoding (see WithReadsInFlight);
// values below its decode workers are taken as that number.
func WithReaderReadsInFlight(n int) ReaderOption {
	return func(r *RowGroupReader) { r.reads = n }
}

// WithReaderMaxPiece makes this reader read every ref whose rows cost more
// than bytes (compressed plus decoded, Dataset.PieceCost) in pieces of about
// bytes each (at least one row): Next then returns consecutive row ranges of
// the row group, each ref's Start and End naming them. 0 (the default)
// reads refs as given.
func WithReaderMaxPiece(bytes int64) ReaderOption {
	return func(r *RowGroupReader) { r.maxPiece = max(bytes, 0) }
}

// WithReaderSnapPieces makes this reader move the ends between
// consecutive pieces of one row group (refs k and k+1 of one row group, k's
// End at k+1's Start) to page breaks: each to the nearest row where a page
// of the row group's widest compressed streamed column begins
// (format.Ranged.PageBreaks), when that row is no further than the shorter
// of the two pieces; pieces between ends that meet are read as one. A
// piece that ends inside a compressed page has the page decompressed to
// scratch and copied out, in two parts, by it and by the next piece; ended
// on pages, both decompress in place. Next's refs then name the rows read
// (a piece may cover several refs, or parts of two); each run's first
// Start and last End are kept. Default off. Not with a Transform that
// reads its refs by index (k).
func WithReaderSnapPieces(on bool) ReaderOption {
	return func(r *RowGroupReader) { r.snap = on }
}

// WithReaderGate makes this reader call g with each piece it reads (a ref
// with a row range, as it reads it: after WithReaderSnapPieces) before it
// takes read-ahead budget for it, and start reading the piece when g
// returns nil: a caller that knows when it needs the rows (a mixture's
// cursor, whose steps are known) starts each piece no earlier than it must,
// instead of as soon as the budget allows. g must return when ctx (the
// reader's, done once it is closed) is; on an error the reader reads no
// further. Whole row groups are not gated. Default: none.
func WithReaderGate(g func(ctx context.Context, ref RowGroupRef) error) ReaderOption {
	return func(r *RowGroupReader) { r.gate = g }
}

// NewReader starts reading refs in order (typically a plan's read set for one
// stream). Reading starts at once in the background.
func (ds *Dataset) NewReader(ctx context.Context, refs []RowGroupRef, mem memory.Allocator, opts ...ReaderOption) *RowGroupReader {
	ctx, cancel := context.WithCancel(ctx)
	r := &RowGroupReader{
		budget:  DefaultReadAhead,
		workers: ds.cfg.decodeWorkers,
		reads:   ds.cfg.readsInFlight,
		ds:      ds,
		ctx:     ctx,
		cancel:  cancel,
		queue:   make(chan *pending, 64),
		freed:   make(chan struct{}, 1),
		entries: map[[2]int]*rgEntry{},
	}
	for _, o := range opts {
		o(r)
	}
	if r.held != nil {
		r.heldLeft = map[[2]int]bool{}
		for _, ref := range refs {
			r.heldLeft[[2]int{ref.File, ref.Index}] = true
		}
	}
	r.wg.Add(1)
	go r.produce(append([]RowGroupRef(nil), refs...), mem)
	return r
}

// PeakInFlight is the most bytes (compressed plus estimated decoded) that
// were in flight at once: at most the read-ahead budget, or one row group
// (or piece) when a single one is larger. Columns decoded whole for pieces
// count from their row group's first piece until its last one is decoded.
func (r *RowGroupReader) PeakInFlight() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.peak
}

// Stats reports what this reader has fetched and decoded so far.
func (r *RowGroupReader) Stats() *ReadStats { return &r.stats }

func (r *RowGroupReader) cost(ref RowGroupRef) int64 {
	rg := r.ds.Files[ref.File].RowGroups[ref.Index]
	return rg.Bytes + rg.DecodedBytes
}

// acquire waits until cost fits the budget (one row group always fits when
// nothing else is in flight but columns kept for pieces).
func (r *RowGroupReader) acquire(cost int64) error {
	for {
		r.mu.Lock()
		if r.inflight == r.pinned || r.inflight+cost <= r.budget {
			r.inflight += cost
			r.peak = max(r.peak, r.inflight)
			r.mu.Unlock()
			return nil
		}
		r.mu.Unlock()
		select {
		case <-r.freed:
		case <-r.ctx.Done():
			return r.ctx.Err()
		}
	}
}

func (r *RowGroupReader) release(cost int64) {
	r.mu.Lock()
	r.inflight -= cost
	r.mu.Unlock()
	select {
	case r.freed <- struct{}{}:
	default:
	}
}

// pin adds n bytes kept for later pieces to the in-flight count, without
// waiting (they are in memory already); unpin returns them.
func (r *RowGroupReader) pin(n int64) {
	r.mu.Lock()
	r.inflight += n
	r.pinned += n
	r.peak = max(r.peak, r.inflight)
	r.mu.Unlock()
}

func (r *RowGroupReader) unpin(n int64) {
	r.mu.Lock()
	r.pinned -= n
	r.mu.Unlock()
	r.release(n)
}

// pieces splits refs into what is read: refs as given, and under
// WithReaderMaxPiece the ranges costing more than maxPiece in pieces. Each
// row group read in pieces gets its entry, counting them.
func (r *RowGroupReader) pieces(refs []RowGroupRef) []RowGroupRef {
	var out []RowGroupRef
	for _, ref := range refs {
		start, end := ref.span()
		if r.maxPiece > 0 && end > start && r.ds.PieceCost(ref, start, end) > r.maxPiece {
			streamed, _ := r.ds.streamedCost(ref.File, ref.Index)
			n := end - start
			if streamed > 0 && ref.Rows > 0 {
				n = max(1, r.maxPiece*ref.Rows/streamed)
			}
			for s := start; s < end; s += n {
				p := ref
				p.Start, p.End = s, min(s+n, end)
				out = append(out, p)
			}
			continue
		}
		out = append(out, ref)
	}
	for _, ref := range out {
		if ref.whole() {
			continue
		}
		k := [2]int{ref.File, ref.Index}
		e := r.entries[k]
		if e == nil {
			e = &rgEntry{shares: &r.ds.shares, key: k}
			e.pages.Pages = r.ds.shares.acquire(k)
			r.entries[k] = e
		}
		e.left++
		e.until = max(e.until, ref.End)
	}
	return out
}

// pieceCost returns what a piece charges: the pages its streamed columns
// decode (their compressed bytes, and their rows' share of the decoded
// size), plus the columns decoded whole the first time its row group needs
// them, which stay pinned until the row group's last piece is decoded.
func (r *RowGroupReader) pieceCost(p *pending) (cost, pin int64, err error) {
	start, end := p.ref.span()
	return r.ds.pieceCharge(r.ctx, p.ref, piece{start: start, end: end, stats: &r.stats, e: p.ent, share: r.share, held: r.held})
}

// pieceDone records that p's piece was decoded, and releases its row
// group's entry (and what it pinned) after the last one.
func (r *RowGroupReader) pieceDone(p *pending) {
	e := p.ent
	e.mu.Lock()
	e.left--
	extra := e.pages.TakeExtra()
	e.pin += extra
	last := e.left == 0
	var pin int64
	if last {
		pin = e.pin
		e.pin = 0
		e.release()
	}
	e.mu.Unlock()
	if extra > 0 {
		r.pin(extra)
	}
	if last {
		r.mu.Lock()
		delete(r.entries, [2]int{p.ref.File, p.ref.Index})
		r.mu.Unlock()
		r.unpin(pin)
		r.share.done(p.ref.File, p.ref.Index)
		r.heldDone(p.ref.File, p.ref.Index)
	}
}

// heldDone tells the reader's HeldChunks that it is done with row group
// rg of file fi (once: its later reads of it, if any, fetch).
func (r *RowGroupReader) heldDone(fi, rg int) {
	if r.held == nil {
		return
	}
	k := [2]int{fi, rg}
	r.mu.Lock()
	left := r.heldLeft[k]
	delete(r.heldLeft, k)
	r.mu.Unlock()
	if left {
		r.held.done(r.ds.Files[fi].Object, rg)
	}
}

func (r *RowGroupReader) produce(refs []RowGroupRef, mem memory.Allocator) {
	defer r.wg.Done()
	defer close(r.queue)
	// Up to reads row groups are in flight; up to workers of them decode
	// at once (the gate), the others wait for their bytes.
	workers := make(chan struct{}, max(r.reads, r.workers))
	gate := make(decodeGate, r.workers)
	r.mu.Lock()
	refs = r.pieces(refs)
	r.mu.Unlock()
	for k := 0; k < len(refs); k++ {
		p := &pending{ref: refs[k], done: make(chan struct{})}
		var pin int64
		if p.ref.whole() {
			p.cost = r.cost(p.ref)
		} else {
			r.mu.Lock()
			p.ent = r.entries[[2]int{p.ref.File, p.ref.Index}]
			r.mu.Unlock()
			var err error
			if r.snap {
				refs, err = r.snapPieces(refs, k, p.ent)
				p.ref = refs[k]
			}
			if err == nil {
				p.cost, pin, err = r.pieceCost(p)
			}
			if err != nil {
				// Locating the pages failed: Next reports it in order.
				p.err = err
				p.ent = nil
				close(p.done)
				select {
				case r.queue <- p:
				case <-r.ctx.Done():
				}
				return
			}
		}
		if r.gate != nil && p.ent != nil {
			if err := r.gate(r.ctx, p.ref); err != nil {
				return // closed (as when acquire fails)
			}
		}
		if err := r.acquire(p.cost + pin); err != nil {
			return
		}
		if pin > 0 {
			// Counted in inflight by acquire; pinned from now on.
			r.mu.Lock()
			r.pinned += pin
			r.mu.Unlock()
		}
		select {
		case workers <- struct{}{}:
		case <-r.ctx.Done():
			r.release(p.cost)
			return
		}
		if p.ent != nil {
			gate.enter() // in order (see decodeGate); decodes always end
		}
		select {
		case r.queue <- p:
		case <-r.ctx.Done():
			if p.ent != nil {
				gate.leave()
			}
			<-workers
			r.release(p.cost)
			return
		}
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			defer func() { <-workers }()
			r.read(k, p, mem, gate)
		}()
	}
}

// read reads p, the k-th read, and runs the transform on it (a piece holds
// its slot of gate already; a whole row group takes one to decode).
func (r *RowGroupReader) read(k int, p *pending, mem memory.Allocator, gate decodeGate) {
	ref := p.ref
	if p.ent == nil {
		p.rec, p.err = r.ds.readRowGroupVia(r.ctx, ref.File, ref.Index, mem, readVia{stats: &r.stats, gate: gate, held: r.held, keep: r.keep})
		r.heldDone(ref.File, ref.Index)
	} else {
		start, end := ref.span()
		var into *format.Into
		if r.into != nil {
			into = r.into(ref)
		}
		p.rec, p.err = r.ds.readPiece(r.ctx, ref, piece{start: start, end: end, mem: mem, stats: &r.stats, e: p.ent, share: r.share, held: r.held, into: into})
		if p.err == nil {
			r.stats.Pieces.Add(1)
		}
		r.pieceDone(p)
		if r.xform != nil && p.err == nil {
			// On the slot the piece decoded in, at once: no other
			// piece of this reader decodes in between (in order with
			// one worker; a placed mixture copies the record out).
			p.rec, p.err = r.xform(k, ref, p.rec)
		}
		gate.leave()
		close(p.done)
		return
	}
	if r.xform != nil && p.err == nil {
		gate.enter()
		p.rec, p.err = r.xform(k, ref, p.rec)
		gate.leave()
	}
	close(p.done)
}

// Next returns the next row group's record in order, io.EOF after the last,
// or the first error (which names the file and row group).
func (r *RowGroupReader) Next() (arrow.RecordBatch, RowGroupRef, error) {
	var p *pending
	var ok bool
	select {
	case p, ok = <-r.queue:
	case <-r.ctx.Done():
		return nil, RowGroupRef{}, r.ctx.Err()
	}
	if !ok {
		if err := r.ctx.Err(); err != nil {
			return nil, RowGroupRef{}, err
		}
		return nil, RowGroupRef{}, io.EOF
	}
	select {
	case <-p.done:
	case <-r.ctx.Done():
		<-p.done
		if p.rec != nil {
			p.rec.Release()
		}
		r.release(p.cost)
		return nil, p.ref, r.ctx.Err()
	}
	r.release(p.cost)
	if p.err != nil {
		r.cancel()
		return nil, p.ref, p.err
	}
	return p.rec, p.ref, nil
}

// Close cancels reading and releases every record not handed out. It waits
// for background work to stop.
func (r *RowGroupReader) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	r.mu.Unlock()
	r.cancel()
	for p := range r.queue {
		<-p.done
		if p.rec != nil {
			p.rec.Release()
		}
	}
	r.wg.Wait()
	for k, e := range r.entries {
		e.mu.Lock()
		e.release()
		e.mu.Unlock()
		r.share.done(k[0], k[1])
	}
	r.entries = nil
	r.mu.Lock()
	left := r.heldLeft
	r.heldLeft = nil
	r.mu.Unlock()
	for k := range left {
		r.held.done(r.ds.Files[k[0]].Object, k[1])
	}
	return nil
}

// CostliestSlice returns the row group where reading its first n rows (one
// slice of a plan) costs the read-ahead budget the most, by PieceCost (the
// rows' share of the streamed columns plus the columns decoded whole), and
// that cost: the row group that decides whether a plan's slices fit their
// share. ok is false when the dataset has no rows.
func (ds *Dataset) CostliestSlice(n int64) (ref RowGroupRef, cost int64, ok bool) {
	for _, r := range ds.RowGroups() {
		if r.Rows <= 0 {
			continue
		}
		if c := ds.PieceCost(r, 0, min(max(n, 1), r.Rows)); !ok || c > cost {
			ref, cost, ok = r, c, true
		}
	}
	return ref, cost, ok
}

// snapPieces moves the ends between the pieces of the run of refs that
// starts at k (the pieces of one row group that follow each other, each
// starting where the one before ended; nothing when refs[k] continues the
// one before it, whose run this was) to page breaks
// (WithReaderSnapPieces): each end to the nearest row where a page of the
// row group's widest compressed streamed column begins, or to the run's
// own start or end, when that is no further than the shorter of the two
// pieces it separates (so no end passes the next one), then joins the
// pieces between ends that met or reached the run's. It returns refs, the
// joined ones removed; e is the row group's entry, one piece less to
// decode per piece joined.
func (r *RowGroupReader) snapPieces(refs []RowGroupRef, k int, e *rgEntry) ([]RowGroupRef, error) {
	cont := func(a, b RowGroupRef) bool {
		return a.File == b.File && a.Index == b.Index && !b.whole() && b.Start == a.End
	}
	if k > 0 && cont(refs[k-1], refs[k]) {
		return refs, nil
	}
	m := k + 1
	for m < len(refs) && cont(refs[m-1], refs[m]) {
		m++
	}
	if m == k+1 {
		return refs, nil
	}
	cur := refs[k]
	breaks, err := r.ds.pageBreaks(r.ctx, cur, piece{start: cur.Start, end: cur.End, stats: &r.stats, e: e, share: r.share, held: r.held})
	if err != nil || len(breaks) == 0 {
		return refs, err
	}
	lo, hi := refs[k].Start, refs[m-1].End
	// The run's own start and end count as breaks too (the row group's
	// first row and its end are no page's break): an end moved to one
	// joins its piece to its neighbour, as a short piece at either end of
	// the run (a stream's rows up to a step's end) would otherwise leave a
	// page cut between it and the next.
	bs := append(make([]int64, 0, len(breaks)+2), lo)
	for _, b := range breaks {
		if b > lo && b < hi {
			bs = append(bs, b)
		}
	}
	bs = append(bs, hi)
	ends := make([]int64, 0, m-k)
	for j := k; j < m-1; j++ {
		c := refs[j].End
		reach := min(c-refs[j].Start, refs[j+1].End-c)
		i := sort.Search(len(bs), func(i int) bool { return bs[i] >= c })
		b, found := c, false
		if i < len(bs) && bs[i]-c <= reach {
			b, found = bs[i], true
		}
		if i > 0 && c-bs[i-1] <= reach && (!found || c-bs[i-1] < b-c) {
			b = bs[i-1]
		}
		if b > lo && b < hi && (len(ends) == 0 || b > ends[len(ends)-1]) {
			ends = append(ends, b)
		}
	}
	ends = append(ends, hi)
	joined := (m - k) - len(ends)
	at := lo
	for j, end := range ends {
		refs[k+j].Start, refs[k+j].End = at, end
		at = end
	}
	refs = slices.Delete(refs, k+len(ends), m)
	if joined > 0 {
		e.mu.Lock()
		e.left -= joined
		e.mu.Unlock()
	}
	return refs, nil
}
