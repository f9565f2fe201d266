package loader

import (
	"context"
	"fmt"
	"sync"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/meshfeed/meshfeed/format"
	"github.com/meshfeed/meshfeed/objstore"
)

// Pieces: a row range of a row group read and decoded by itself, so that a
// reader never holds more than a bounded part of a large row group. Which
// rows a piece reads, and when its row group's shared state is released,
// is decided here; how a Parquet piece's pages are located, fetched and
// decoded is package format's (format.Ranged, format/pieces.go).
//
// Every column format does not stream (and Arrow IPC batches) is decoded
// whole, once per row group and reader, and the reader's pieces of that row
// group are slices of it; its whole size is charged to the read-ahead
// budget with the first piece of its row group (cost), and it stays in
// memory until the last piece of the row group has been decoded and every
// piece record released.

// rgEntry is what one reader keeps of a row group while it reads pieces of
// it: what format's decoding of its pieces shares (pages), or a whole
// record of a format that does not stream, released after the last piece.
type rgEntry struct {
	mu      sync.Mutex
	left    int               // pieces not decoded yet
	until   int64             // the end of the reader's last piece of the row group (format.Piece.Until)
	rec     arrow.RecordBatch // a whole record (formats without streaming)
	charged bool              // rec's whole size was charged (pieceCharge)
	pin     int64             // bytes this entry holds pinned in the reader's budget
	pages   format.Shared     // what the pieces share: page locations, decoded columns and pages
	shares  *pageShares       // whose share pages.Pages is (row group key); nil: none
	key     [2]int

	winMu sync.Mutex
	win   *objstore.Window // the row group's projected chunks mapped once (mappedWindow); nil: none yet
	noWin bool             // the store cannot map one: pieces fetch as without
}

func (e *rgEntry) release() {
	e.pages.Release()
	if e.shares != nil {
		e.shares.release(e.key)
		e.shares, e.pages.Pages = nil, nil
	}
	e.winMu.Lock()
	if e.win != nil {
		e.win.Release()
		e.win = nil
	}
	e.noWin = true // a late fetch (none is expected) maps its own ranges
	e.winMu.Unlock()
	if e.rec != nil {
		e.rec.Release()
		e.rec = nil
	}
}

// span returns the rows [start, end) that ref names: its Start and End, or
// the whole row group when End is 0.
func (ref RowGroupRef) span() (start, end int64) {
	if ref.End == 0 && ref.Start == 0 {
		return 0, ref.Rows
	}
	return ref.Start, ref.End
}

// whole reports whether ref names all rows of its row group.
func (ref RowGroupRef) whole() bool {
	s, e := ref.span()
	return s == 0 && e == ref.Rows
}

// streamedCost returns, for row group rg of file fi, the bytes (compressed
// plus decoded, from the footer) of the columns a piece streams and of
// those it decodes whole.
func (ds *Dataset) streamedCost(fi, rg int) (streamed, whole int64) {
	meta := ds.Files[fi].RowGroups[rg]
	d, ok := ds.decoders[fi].(format.Ranged)
	if !ok {
		return 0, meta.Bytes + meta.DecodedBytes
	}
	return d.StreamedCost(rg)
}

// PieceCost returns what reading rows [start, end) of row group ref costs
// the read-ahead budget on its own (compressed plus decoded bytes, from the
// footer): the rows' share of the columns streamed plus the whole size of
// the columns decoded whole (see the package's caveats).
func (ds *Dataset) PieceCost(ref RowGroupRef, start, end int64) int64 {
	streamed, whole := ds.streamedCost(ref.File, ref.Index)
	if ref.Rows <= 0 {
		return streamed + whole
	}
	return ceilDiv(streamed*(end-start), ref.Rows) + whole
}

// StreamedRowBytes returns the most bytes per row (compressed plus decoded)
// of the streamed columns over the dataset's row groups, and the most bytes
// of any row group's columns decoded whole: a piece of n rows costs at most
// n times the first plus the second.
func (ds *Dataset) StreamedRowBytes() (perRow float64, whole int64) {
	for fi, f := range ds.Files {
		for rg, m := range f.RowGroups {
			if m.Rows == 0 {
				continue
			}
			s, w := ds.streamedCost(fi, rg)
			perRow = max(perRow, float64(s)/float64(m.Rows))
			whole = max(whole, w)
		}
	}
	return perRow, whole
}

// ArrowRowBytes returns the most bytes per row that the dataset's decoded
// records hold in Arrow memory (what a consumer that keeps rows, such as a
// shuffle window, holds per row): exact for fixed-width columns, the
// chunks' uncompressed size per row for the others.
func (ds *Dataset) ArrowRowBytes() float64 {
	var most float64
	for fi, f := range ds.Files {
		d, ok := ds.decoders[fi].(format.Ranged)
		for rg, m := range f.RowGroups {
			if m.Rows == 0 {
				continue
			}
			if !ok {
				most = max(most, float64(m.DecodedBytes)/float64(m.Rows))
				continue
			}
			most = max(most, d.RowBytes(rg))
		}
	}
	return most
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// formatPiece is rows [start, end) of row group ref as format decodes it.
func (ds *Dataset) formatPiece(ref RowGroupRef, p piece) format.Piece {
	var f format.Fetcher = chunkFetcher{ds: ds, fi: ref.File, stats: p.stats, share: p.share, held: p.held, ent: p.e}
	if testWholePages {
		f = wholePages{f}
	}
	return format.Piece{RG: ref.Index, Lo: p.start, Hi: p.end, Mem: p.mem, Stats: &p.stats.Stats, Shared: &p.e.pages, Fetch: f, Into: p.into, Until: p.e.until}
}

// pageBreaks returns the rows of row group ref where a page of its widest
// compressed streamed column begins (format.Ranged.PageBreaks); nil for a
// format that reads no pieces.
func (ds *Dataset) pageBreaks(ctx context.Context, ref RowGroupRef, p piece) ([]int64, error) {
	d, ok := ds.decoders[ref.File].(format.Ranged)
	if !ok {
		return nil, nil
	}
	return d.PageBreaks(ctx, ds.formatPiece(ref, p))
}

// testWholePages, when set by a test, makes pieces fetch whole pages (no
// format.SparseFetcher), to compare with.
var testWholePages bool

// wholePages is a Fetcher and nothing more.
type wholePages struct{ format.Fetcher }

// pieceCharge returns what reading rows [start, end) of row group ref
// charges the read-ahead budget (see RowGroupReader.pieceCost): cost for
// the pages of the streamed columns, pin for the columns decoded whole not
// yet charged for this entry. It locates the streamed columns' pages (once
// per entry).
func (ds *Dataset) pieceCharge(ctx context.Context, ref RowGroupRef, p piece) (cost, pin int64, err error) {
	meta := ds.Files[ref.File].RowGroups[ref.Index]
	e := p.e
	d, ok := ds.decoders[ref.File].(format.Ranged)
	if !ok {
		e.mu.Lock()
		defer e.mu.Unlock()
		if !e.charged {
			e.charged = true
			pin = meta.Bytes + meta.DecodedBytes
			e.pin += pin
		}
		return 0, pin, nil
	}
	cost, pin, err = d.Charge(ctx, ds.formatPiece(ref, p))
	if err != nil {
		return 0, 0, err
	}
	e.mu.Lock()
	e.pin += pin
	e.mu.Unlock()
	return cost, pin, nil
}

// piece is rows [start, end) of a row group that a reader decodes by
// themselves, and with what.
type piece struct {
	start, end int64
	mem        memory.Allocator
	stats      *ReadStats
	e          *rgEntry     // the reader's entry of the row group: what its pieces share
	share      *FetchShare  // nil, or the pages shared with other readers
	held       *HeldChunks  // nil, or bytes held for the reader (WithReaderHeld)
	into       *format.Into // nil, or where some columns' values go (WithReaderInto)
}

// readPiece reads rows [start, end) of row group ref into a record.
func (ds *Dataset) readPiece(ctx context.Context, ref RowGroupRef, p piece) (arrow.RecordBatch, error) {
	start, end, mem, stats, e := p.start, p.end, p.mem, p.stats, p.e
	d, ok := ds.decoders[ref.File].(format.Ranged)
	if !ok {
		e.mu.Lock()
		defer e.mu.Unlock()
		if e.rec == nil {
			rec, err := ds.readRowGroupVia(ctx, ref.File, ref.Index, mem, readVia{stats: stats, held: p.held})
			if err != nil {
				return nil, err
			}
			e.rec = rec
		}
		return slicePiece(e.rec, start, end, ds.Files[ref.File].Object.URI, ref.Index)
	}
	return d.DecodeRange(ctx, ds.formatPiece(ref, p))
}

// slicePiece returns rows [start, end) of rec, a whole batch decoded for
// its pieces, or ErrCorrupt naming the file and batch when the batch does not
// hold them or its buffers do not (arrow-go checks offsets when slicing, by
// panicking).
func slicePiece(rec arrow.RecordBatch, start, end int64, uri string, batch int) (out arrow.RecordBatch, err error) {
	if start < 0 || end < start || end > rec.NumRows() {
		return nil, fmt.Errorf("loader: %s batch %d: rows [%d, %d) asked of a batch of %d rows: %w", uri, batch, start, end, rec.NumRows(), ErrCorrupt)
	}
	defer func() {
		if r := recover(); r != nil {
			out, err = nil, fmt.Errorf("loader: %s batch %d: slicing rows [%d, %d): %v: %w", uri, batch, start, end, r, ErrCorrupt)
		}
	}()
	return rec.NewSlice(start, end), nil
}

// mappedWindow returns the window of row group rg of file fi that e maps
// for its pieces: the byte range of the row group's projected column
// chunks, mapped once on the first piece's first fetch (not populated:
// each fetch populates the pages it hands out) and unmapped with e, after
// the reader's last piece of the row group is decoded. A piece's pages
// then cost no mmap and munmap of their own, and the pages two pieces
// share at their edge are mapped once: a reader of pieces smaller than a
// page (a mixture's cursor) mapped each edge page again for every piece
// cutting it. nil where mmap is off, the store maps no windows, or mapping
// failed (the pieces then fetch as without).
func (ds *Dataset) mappedWindow(ctx context.Context, e *rgEntry, fi, rg int) *objstore.Window {
	if e == nil || !ds.cfg.mmap {
		return nil
	}
	wm, ok := ds.store.(objstore.WindowMapper)
	if !ok {
		return nil
	}
	e.winMu.Lock()
	defer e.winMu.Unlock()
	if e.win != nil || e.noWin {
		return e.win
	}
	lo, hi := int64(-1), int64(0)
	for _, c := range ds.Files[fi].RowGroups[rg].Chunks {
		if c.Length == 0 {
			continue
		}
		if lo < 0 || c.Offset < lo {
			lo = c.Offset
		}
		hi = max(hi, c.Offset+c.Length)
	}
	if lo < 0 {
		e.noWin = true
		return nil
	}
	w, err := wm.MapWindow(ctx, ds.Files[fi].Object, lo, hi-lo)
	if err != nil {
		e.noWin = true
		return nil
	}
	e.win = w
	return w
}
