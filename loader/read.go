package loader

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"runtime/debug"
	"slices"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/meshfeed/meshfeed/format"
	"github.com/meshfeed/meshfeed/internal/bufpool"
	"github.com/meshfeed/meshfeed/objstore"
)

// ReadStats counts what reading row groups cost. All fields are updated
// atomically and may be read while reads run.
type ReadStats struct {
	// RowGroups decoded whole.
	RowGroups atomic.Int64
	// Pieces decoded: row ranges of row groups read by themselves
	// (RowGroupRef.Start and End, WithReaderMaxPiece).
	Pieces atomic.Int64
	// Stats: Pages, Reused and PagesReused (what pieces decoded from their
	// pages alone, or reused), Fetches and FetchedBytes (the ranged reads
	// issued after coalescing, and the bytes they read or mapped).
	format.Stats
	// MappedBytes is the part of FetchedBytes that was mapped with mmap
	// (see WithMmap) rather than read.
	MappedBytes atomic.Int64
	// HeldBytes is the bytes taken from a HeldChunks (WithReaderHeld)
	// instead of fetched: not in FetchedBytes.
	HeldBytes atomic.Int64
	// Misses counts decoder reads that fell outside the fetched ranges and
	// went to storage directly; 0 when the footer's chunk ranges are right.
	Misses atomic.Int64
}

// span is one fetched byte range of a file: n bytes at off, in data once
// fetched (a pooled buffer, or a mapping that unmap releases).
type span struct {
	off   int64
	n     int64
	data  []byte
	unmap func()
	// borrowed: data belongs to a FetchShare (not pooled, not released here)
	borrowed bool
}

// spanReader serves a decoder's reads from the fetched ranges of one row
// group. A read outside them goes to storage and counts as a miss.
type spanReader struct {
	ctx    context.Context
	store  objstore.Store
	obj    objstore.Object
	spans  []span // sorted by off, disjoint
	stats  *ReadStats
	mapped bool             // some spans are mappings of the file
	win    *objstore.Window // the window the spans are parts of (fromWindow); nil: none
}

// Drop implements format.Dropper: the pages of [off, off+n) of a window
// (fromWindow) leave the process's page tables (objstore.Window.Drop); a
// span of its own (read, or mapped alone) is released with the reader.
func (r *spanReader) Drop(off, n int64) {
	if r.win != nil {
		r.win.Drop(off, n)
	}
}

func (r *spanReader) ReadAt(p []byte, off int64) (int, error) {
	i := sort.Search(len(r.spans), func(i int) bool { return r.spans[i].off+int64(len(r.spans[i].data)) > off })
	if i < len(r.spans) {
		s := r.spans[i]
		if off >= s.off && off+int64(len(p)) <= s.off+int64(len(s.data)) {
			return copy(p, s.data[off-s.off:]), nil
		}
	}
	r.stats.Misses.Add(1)
	if off+int64(len(p)) > r.obj.Size {
		if off >= r.obj.Size {
			return 0, io.EOF
		}
		n := int(r.obj.Size - off)
		if err := r.store.ReadAt(r.ctx, r.obj, p[:n], off); err != nil {
			return 0, err
		}
		return n, io.EOF
	}
	if err := r.store.ReadAt(r.ctx, r.obj, p, off); err != nil {
		return 0, err
	}
	return len(p), nil
}

// coalesce merges chunk ranges separated by at most gap bytes, up to max bytes
// per merged range (a single larger chunk stays whole), never across a
// range of held (bytes held in memory already: reading them again would
// waste what holding them saves). The spans have no data yet.
func coalesce(chunks []Chunk, gap, max int64, held []span) []span {
	rs := make([]Chunk, len(chunks))
	copy(rs, chunks)
	slices.SortFunc(rs, func(a, b Chunk) int {
		switch {
		case a.Offset < b.Offset:
			return -1
		case a.Offset > b.Offset:
			return 1
		}
		return 0
	})
	var out []span
	var cur struct{ off, end int64 }
	have := false
	for _, c := range rs {
		if c.Length == 0 {
			continue
		}
		end := c.Offset + c.Length
		if have && c.Offset-cur.end <= gap && end-cur.off <= max && !heldBetween(held, cur.end, c.Offset) {
			if end > cur.end {
				cur.end = end
			}
			continue
		}
		if have {
			out = append(out, span{off: cur.off, n: cur.end - cur.off})
		}
		cur.off, cur.end, have = c.Offset, end, true
	}
	if have {
		out = append(out, span{off: cur.off, n: cur.end - cur.off})
	}
	return out
}

// heldBetween reports whether a span of held lies inside [lo, hi).
func heldBetween(held []span, lo, hi int64) bool {
	for _, h := range held {
		if h.off >= lo && h.off+h.n <= hi {
			return true
		}
	}
	return false
}

// BytesAt returns the fetched bytes [off, off+n) without copying, if one
// span holds them (format.Fetched).
func (r *spanReader) BytesAt(off, n int64) ([]byte, bool) {
	i := sort.Search(len(r.spans), func(i int) bool { return r.spans[i].off+int64(len(r.spans[i].data)) > off })
	if i < len(r.spans) {
		s := r.spans[i]
		if off >= s.off && off+n <= s.off+int64(len(s.data)) {
			return s.data[off-s.off : off-s.off+n], true
		}
	}
	return nil, false
}

// Mapped reports whether some spans are mappings of the file
// (format.Fetched).
func (r *spanReader) Mapped() bool { return r.mapped }

// Release returns the fetched buffers to the pool and unmaps the mapped
// spans; r must not be used after (format.Fetched).
func (r *spanReader) Release() { releaseSpans(r.spans) }

func releaseSpans(spans []span) {
	for i := range spans {
		s := &spans[i]
		switch {
		case s.borrowed:
		case s.unmap != nil:
			s.unmap()
		case s.data != nil:
			bufpool.Put(s.data)
		}
		s.data, s.unmap = nil, nil
	}
}

// fetch reads the projected chunks of one row group with coalesced ranged
// reads, concurrently. When the store is a Mapper and WithMmap allows it, each
// range is mapped instead; a range whose Map fails is read.
func (ds *Dataset) fetch(ctx context.Context, fi, rg int, stats *ReadStats, held *HeldChunks) (*spanReader, error) {
	return ds.fetchChunks(ctx, fi, rg, ds.Files[fi].RowGroups[rg].Chunks, stats, held)
}

// fetchChunks is fetch of the given byte ranges of file fi (chunks of row
// group rg, or parts of them), coalesced; those held (nil: none) holds
// are taken from it instead.
func (ds *Dataset) fetchChunks(ctx context.Context, fi, rg int, chunks []Chunk, stats *ReadStats, held *HeldChunks) (*spanReader, error) {
	rest, kept := heldSpans(held, ds.Files[fi].Object, rg, chunks, stats)
	return ds.fetchRest(ctx, fi, rg, rest, kept, stats)
}

// fetchRest is fetchChunks of the chunks not held, with the spans of
// those held (kept).
func (ds *Dataset) fetchRest(ctx context.Context, fi, rg int, chunks []Chunk, kept []span, stats *ReadStats) (*spanReader, error) {
	f := ds.Files[fi]
	spans := coalesce(chunks, ds.cfg.coalesceGap, ds.cfg.maxCoalesced, kept)
	mapper, _ := ds.store.(objstore.Mapper)
	if !ds.cfg.mmap {
		mapper = nil
	}
	errs := make([]error, len(spans))
	var wg sync.WaitGroup
	for i := range spans {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := &spans[i]
			if mapper != nil {
				if b, unmap, err := mapper.Map(ctx, f.Object, s.off, s.n); err == nil {
					s.data, s.unmap = b, unmap
					return
				}
			}
			s.data = bufpool.Get(s.n)
			errs[i] = ds.store.ReadAt(ctx, f.Object, s.data, s.off)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			releaseSpans(spans)
			return nil, fmt.Errorf("loader: %s row group %d: %w", f.Object.URI, rg, err)
		}
	}
	var n, mapped int64
	for _, s := range spans {
		n += s.n
		if s.unmap != nil {
			mapped += s.n
		}
	}
	stats.Fetches.Add(int64(len(spans)))
	stats.FetchedBytes.Add(n)
	stats.MappedBytes.Add(mapped)
	return &spanReader{ctx: ctx, store: ds.store, obj: f.Object, spans: withHeld(spans, kept), stats: stats, mapped: mapped > 0}, nil
}

// heldSpans splits chunks into those held holds (as borrowed spans,
// counted in stats.HeldBytes) and the rest, to fetch.
func heldSpans(held *HeldChunks, obj objstore.Object, rg int, chunks []Chunk, stats *ReadStats) (rest []Chunk, kept []span) {
	if held == nil {
		return chunks, nil
	}
	for _, c := range chunks {
		if b, ok := held.bytes(obj, rg, c.Offset, c.Length, true); ok {
			kept = append(kept, span{off: c.Offset, n: c.Length, data: b, borrowed: true})
			stats.HeldBytes.Add(c.Length)
			continue
		}
		rest = append(rest, c)
	}
	return rest, kept
}

// withHeld returns the fetched spans and the held ones, sorted by offset:
// a held span inside a fetched one (a chunk between two that were
// coalesced across it) is left out, so that they stay disjoint.
func withHeld(spans, kept []span) []span {
	if len(kept) == 0 {
		return spans
	}
	for _, k := range kept {
		inside := false
		for _, s := range spans {
			if k.off < s.off+s.n && s.off < k.off+k.n {
				inside = true
				break
			}
		}
		if !inside {
			spans = append(spans, k)
		}
	}
	slices.SortFunc(spans, func(a, b span) int { return cmp.Compare(a.off, b.off) })
	return spans
}

// ReadRowGroup fetches and decodes one row group into a record of the
// projected columns, allocated from mem. The caller releases the record.
func (ds *Dataset) ReadRowGroup(ctx context.Context, file, rowGroup int, mem memory.Allocator) (arrow.RecordBatch, error) {
	return ds.readRowGroup(ctx, file, rowGroup, mem, &ReadStats{}, nil)
}

// readRowGroup is ReadRowGroup counting in stats; it decodes holding a slot
// of gate (none while it fetches; nil: no gate).
func (ds *Dataset) readRowGroup(ctx context.Context, file, rowGroup int, mem memory.Allocator, stats *ReadStats, gate decodeGate) (arrow.RecordBatch, error) {
	return ds.readRowGroupVia(ctx, file, rowGroup, mem, readVia{stats: stats, gate: gate})
}

// readVia is how a reader reads a whole row group: the counters it counts
// in, the decode gate it decodes under (nil: none), the held bytes it takes
// from (nil: none) and what it keeps for the readers after it (nil:
// nothing).
type readVia struct {
	stats *ReadStats
	gate  decodeGate
	held  *HeldChunks
	keep  *Keeper
}

// readRowGroupVia is readRowGroup counting in via.stats, decoding under
// via.gate, taking held bytes from via.held and keeping the chunks via.keep
// names.
func (ds *Dataset) readRowGroupVia(ctx context.Context, file, rowGroup int, mem memory.Allocator, via readVia) (arrow.RecordBatch, error) {
	stats, gate := via.stats, via.gate
	if file < 0 || file >= len(ds.Files) || rowGroup < 0 || rowGroup >= len(ds.Files[file].RowGroups) {
		return nil, fmt.Errorf("loader: row group (file %d, index %d) out of range", file, rowGroup)
	}
	// A file planned from a manifest is checked before its bytes are
	// fetched (lazyDecoder).
	if p, ok := ds.decoders[file].(interface{ prepare(context.Context) error }); ok {
		if err := p.prepare(ctx); err != nil {
			return nil, err
		}
	}
	ra, err := ds.fetch(ctx, file, rowGroup, stats, via.held)
	if err != nil {
		return nil, err
	}
	if via.keep != nil {
		ds.keepChunks(ra, file, rowGroup, via.keep)
	}
	if ra.mapped {
		// A file truncated while mapped faults (SIGBUS) when the decoder
		// touches a lost page: make that a panic, which decode recovers
		// into an error, instead of a crash.
		defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	}
	if testHookFetched != nil {
		testHookFetched(ds.Files[file].Object)
	}
	gate.enter()
	rec, err := ds.decoders[file].DecodeRowGroup(ctx, rowGroup, ra, mem)
	gate.leave()
	ra.Release()
	if err != nil {
		return nil, err
	}
	stats.RowGroups.Add(1)
	return rec, nil
}

// keepChunks keeps in k.h the fetched bytes of row group rg's chunks of
// the columns k names (a copy: ra is released after decoding). A mapping
// that faults while copied is not kept; decoding then reports the file.
func (ds *Dataset) keepChunks(ra *spanReader, fi, rg int, k *Keeper) {
	obj := ds.Files[fi].Object
	for _, c := range ds.Files[fi].RowGroups[rg].Chunks {
		if !k.cols[c.Column] {
			continue
		}
		if b, ok := ra.BytesAt(c.Offset, c.Length); ok && !k.h.keep(k, obj, rg, c.Offset, b) {
			return
		}
	}
}

// fromWindow serves chunks of row group rg, with the held spans kept,
// from the window the reader's entry maps for the row group
// (Dataset.mappedWindow): false when there is none or a chunk lies
// outside it.
func (f chunkFetcher) fromWindow(ctx context.Context, rg int, chunks []format.Chunk, kept []span) (*spanReader, bool, error) {
	w := f.ds.mappedWindow(ctx, f.ent, f.fi, rg)
	if w == nil {
		return nil, false, nil
	}
	obj := f.ds.Files[f.fi].Object
	spans := make([]span, 0, len(chunks))
	var n int64
	for _, c := range chunks {
		if c.Length == 0 {
			continue
		}
		b, ok, err := w.Bytes(c.Offset, c.Length)
		if err != nil {
			return nil, false, fmt.Errorf("loader: %s row group %d column %q: %w", obj.URI, rg, c.Column, err)
		}
		if !ok {
			return nil, false, nil
		}
		spans = append(spans, span{off: c.Offset, n: c.Length, data: b, borrowed: true})
		n += c.Length
	}
	slices.SortFunc(spans, func(a, b span) int { return cmp.Compare(a.off, b.off) })
	f.stats.Fetches.Add(int64(len(spans)))
	f.stats.FetchedBytes.Add(n)
	f.stats.MappedBytes.Add(n)
	return &spanReader{ctx: ctx, store: f.ds.store, obj: obj, spans: withHeld(spans, kept), stats: f.stats, mapped: true, win: w}, true, nil
}

// decodeGate bounds how many row groups or pieces a reader decodes at once
// (WithDecodeWorkers). A whole row group holds a slot while decoding, not
// while fetching, so that more reads than decodes can be in flight
// (WithReadsInFlight). A piece holds one from before it starts, taken in
// order by the producer, until it is decoded: format fetches a piece's pages
// from inside its decode, holding locks that later pieces of its row group
// wait for, so a piece that gave its slot up while fetching could wait for
// one held by those pieces. A nil gate bounds nothing.
type decodeGate chan struct{}

func (g decodeGate) enter() {
	if g != nil {
		g <- struct{}{}
	}
}

func (g decodeGate) leave() {
	if g != nil {
		<-g
	}
}

// testHookFetched, when set by a test, runs between fetching a row group and
// decoding it.
var testHookFetched func(obj objstore.Object)

// objSource is one object of a store as format reads it (format.Source).
type objSource struct {
	store objstore.Store
	obj   objstore.Object
}

func (s objSource) URI() string { return s.obj.URI }
func (s objSource) Size() int64 { return s.obj.Size }
func (s objSource) ReadAt(ctx context.Context, p []byte, off int64) error {
	return s.store.ReadAt(ctx, s.obj, p, off)
}

// chunkFetcher fetches parts of the row groups of file fi for format's
// decoding of pieces (format.Fetcher), counting in stats.
type chunkFetcher struct {
	ds    *Dataset
	fi    int
	stats *ReadStats
	share *FetchShare // nil: none
	held  *HeldChunks // nil: none
	ent   *rgEntry    // the reader's entry of the row group, whose window serves the pieces (nil: none)
}

// HeldBytes implements format.HeldFetcher: the bytes [off, off+n) of row
// group rg that f's HeldChunks holds (for a page walk: not counted).
func (f chunkFetcher) HeldBytes(rg int, off, n int64) ([]byte, bool) {
	return f.held.bytes(f.ds.Files[f.fi].Object, rg, off, n, false)
}

// Sparse implements format.SparseFetcher: pages are left out in part only
// where they are read, not mapped (a store that is no objstore.Mapper, or
// WithMmap(false)). On a mapped local file the pieces' pages are parts of
// their row group's mapping (fromWindow), whose pages no piece touches are
// never populated: reading a piece's pages into a buffer to leave out a
// part of its edge pages cost the single dataset of BenchmarkMixture (feed)
// about a quarter more CPU per step than mapping them.
func (f chunkFetcher) Sparse() bool {
	_, maps := f.ds.store.(objstore.Mapper)
	return !(maps && f.ds.cfg.mmap)
}

// FetchSparse implements format.SparseFetcher: the parts of c read into
// one pooled buffer of c's size, each a ranged read of its own (never
// mapped); c whole from the held bytes when f's HeldChunks holds it. Where
// f's FetchShare shares row group rg (other slices read pieces of it, and
// may want the bytes this piece leaves out), each part goes through the
// share, which reads only what it does not hold, and is copied into the
// buffer: one copy of at most the two edge pages' parts, for not reading
// a neighbour's part of a page twice.
func (f chunkFetcher) FetchSparse(ctx context.Context, rg int, c format.Chunk, parts [][2]int64) (format.Fetched, error) {
	obj := f.ds.Files[f.fi].Object
	if rest, kept := heldSpans(f.held, obj, rg, []Chunk{c}, f.stats); len(rest) == 0 {
		return &spanReader{ctx: ctx, store: f.ds.store, obj: obj, spans: kept, stats: f.stats}, nil
	}
	for _, p := range parts {
		if p[0] < c.Offset || p[1] > c.Offset+c.Length || p[0] >= p[1] {
			return nil, fmt.Errorf("loader: %s row group %d column %q: part [%d, %d) outside [%d, +%d)", obj.URI, rg, c.Column, p[0], p[1], c.Offset, c.Length)
		}
	}
	buf := bufpool.Get(c.Length)
	errs := make([]error, len(parts))
	var wg sync.WaitGroup
	for i, p := range parts {
		dst := buf[p[0]-c.Offset : p[1]-c.Offset]
		if f.share.shares(f.fi, rg) {
			sp, ok, err := f.share.fetch(ctx, f.ds, f.fi, rg, Chunk{Column: c.Column, Offset: p[0], Length: p[1] - p[0]}, f.stats)
			if err != nil {
				errs[i] = err
				break
			}
			if ok {
				copy(dst, sp.data)
				continue
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = f.ds.store.ReadAt(ctx, obj, dst, p[0])
			if errs[i] == nil {
				f.stats.Fetches.Add(1)
				f.stats.FetchedBytes.Add(p[1] - p[0])
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			bufpool.Put(buf)
			return nil, fmt.Errorf("loader: %s row group %d column %q: %w", obj.URI, rg, c.Column, err)
		}
	}
	return &spanReader{ctx: ctx, store: f.ds.store, obj: obj, spans: []span{{off: c.Offset, n: c.Length, data: buf}}, stats: f.stats}, nil
}

func (f chunkFetcher) Fetch(ctx context.Context, rg int, chunks []format.Chunk) (format.Fetched, error) {
	obj := f.ds.Files[f.fi].Object
	chunks, kept := heldSpans(f.held, obj, rg, chunks, f.stats)
	if len(chunks) == 0 {
		return &spanReader{ctx: ctx, store: f.ds.store, obj: obj, spans: withHeld(nil, kept), stats: f.stats}, nil
	}
	if r, ok, err := f.fromWindow(ctx, rg, chunks, kept); ok || err != nil {
		if err != nil {
			return nil, err
		}
		return r, nil
	}
	if len(chunks) == 1 && len(kept) == 0 && f.share.shares(f.fi, rg) {
		sp, ok, err := f.share.fetch(ctx, f.ds, f.fi, rg, chunks[0], f.stats)
		if err != nil {
			return nil, err
		}
		if ok {
			return &spanReader{ctx: ctx, store: f.ds.store, obj: obj, spans: []span{sp}, stats: f.stats}, nil
		}
	}
	r, err := f.ds.fetchRest(ctx, f.fi, rg, chunks, kept, f.stats)
	if err != nil {
		return nil, err // not a nil *spanReader in an interface
	}
	return r, nil
}
