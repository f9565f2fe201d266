package format

import (
	"context"
	"io"
	"sync/atomic"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// Source is ranged reads of one object: what reading a footer, locating
// pages and arrow-go's fallback need of the caller's storage.
type Source interface {
	// URI names the object in errors.
	URI() string
	// Size is the object's length in bytes.
	Size() int64
	// ReadAt fills p with the bytes at off, all of them or an error.
	ReadAt(ctx context.Context, p []byte, off int64) error
}

// Fetched is byte ranges of one object fetched for decoding (loader's
// coalesced, possibly mapped, reads of a row group's chunks). Reads outside
// them may go to storage.
type Fetched interface {
	io.ReaderAt
	// BytesAt returns the fetched bytes [off, off+n) without copying, when
	// one fetched range holds them.
	BytesAt(off, n int64) ([]byte, bool)
	// Mapped reports whether some ranges are mappings of a file (a lost
	// page faults: see the package's caveats).
	Mapped() bool
	// Release returns the ranges' memory; the Fetched is not used after.
	Release()
}

// Dropper is a Fetched that can give back the memory of ranges its
// caller is done with before Release: the pages of a mapping that a
// reader's later pieces will not read (the decoder drops a piece's pages
// but the last, which the next piece may start in). The bytes stay valid:
// touched again, they are read back.
type Dropper interface {
	Drop(off, n int64)
}

// Fetcher fetches byte ranges of row group rg of the file (parts of its
// column chunks), for the decoding of a row range.
type Fetcher interface {
	Fetch(ctx context.Context, rg int, chunks []Chunk) (Fetched, error)
}

// HeldFetcher is a Fetcher that may hold bytes of the file in memory
// already (loader's HeldChunks: read by a filter's plan). Locating a
// column chunk's pages by their headers reads them from there when it
// holds the whole chunk.
type HeldFetcher interface {
	Fetcher
	// HeldBytes returns the bytes [off, off+n) of row group rg's file
	// without copying, when they are held.
	HeldBytes(rg int, off, n int64) ([]byte, bool)
}

// SparseFetcher is a Fetcher that can fetch parts of a byte range alone
// into one buffer of the range's size (the pages at a piece's edges: their
// headers and levels, and the values of the piece's rows, not the others).
type SparseFetcher interface {
	Fetcher
	// Sparse reports whether leaving bytes out saves anything: false where
	// the fetcher maps ranges of a local file rather than reading them
	// (mapping a page's unread values costs no read, and reading the rest
	// into a buffer would copy what a mapping does not), so that the pages
	// are fetched whole.
	Sparse() bool
	// FetchSparse fetches the ranges parts (sorted, disjoint, inside c) of
	// chunk c of row group rg: the Fetched's BytesAt(c.Offset, c.Length)
	// holds them in place; its other bytes are undefined and must not be
	// read.
	FetchSparse(ctx context.Context, rg int, c Chunk, parts [][2]int64) (Fetched, error)
}

// Chunk is the byte range of one projected column chunk of a row group.
type Chunk struct {
	Column string
	Offset int64
	Length int64
}

// RowGroupMeta describes one row group from the footer alone.
type RowGroupMeta struct {
	// Rows in the row group (may be 0).
	Rows int64
	// Chunks are the projected column chunks, in projection order.
	Chunks []Chunk
	// Bytes is the sum of the projected chunks' lengths: what reading this row
	// group costs in storage bytes.
	Bytes int64
	// DecodedBytes estimates the decoded size (the chunks' uncompressed
	// sizes); read-ahead budgets charge Bytes + DecodedBytes.
	DecodedBytes int64
}

// Options are the settings of footer reading and decoding.
type Options struct {
	// Fill maps a column to the value that replaces its nulls.
	Fill map[string]float64
	// NullsAsValidity keeps nulls of columns without a fill as Arrow
	// validity instead of refusing them (ErrNull).
	NullsAsValidity bool
	// MaxBytes bounds what one column chunk decodes to (bytes and values).
	MaxBytes int64
	// FooterReadLength is the bytes read at the end of a file at first.
	FooterReadLength int
	// Missing is the caller's "not found" sentinel: a memory fault under a
	// mapping (the file changed while it was decoded) wraps it.
	Missing error
	// Kept are the caller's storage sentinels (unavailable, not found): a
	// footer read error wrapping one is passed on as it is, not as ErrCorrupt.
	Kept []error
}

// Footer is the parsed footer of one file, safe for concurrent use and
// shared by every dataset that opens the file (footer caches).
type Footer interface {
	// Schema is the file's full Arrow schema.
	Schema() *arrow.Schema
	// RowGroups returns the row groups with the chunk ranges of the
	// projected columns (indexes into Schema).
	RowGroups(proj []int) ([]RowGroupMeta, error)
	// OutputField is the Arrow field column j decodes to.
	OutputField(j int) (arrow.Field, error)
	// MayHoldNulls reports whether the column named may hold a null, by the
	// footer: the nulls it records, and whether they are known.
	MayHoldNulls(name string) (may bool, n int64, known bool)
	// Decoder prepares the decoding of the projected columns of src, the
	// object the footer was read from, as the fields out.
	Decoder(src Source, proj []int, out []arrow.Field, o Options) (Decoder, error)
}

// Decoder decodes the projected columns of one file's row groups.
type Decoder interface {
	// DecodeRowGroup decodes row group rg from ra, which holds its fetched
	// chunks, into a record allocated from mem; the caller releases it.
	DecodeRowGroup(ctx context.Context, rg int, ra Fetched, mem memory.Allocator) (arrow.RecordBatch, error)
}

// Stats counts the pages and bytes that decoding row ranges cost. Fields
// are updated atomically and may be read while decoding runs.
type Stats struct {
	// Pages decoded by pieces from the pages of their rows alone (the
	// streamed columns).
	Pages atomic.Int64
	// Reused counts a piece's columns served from the pages an earlier
	// piece of its row group decoded (its rows lay inside them): no page
	// decoded again.
	Reused atomic.Int64
	// PagesReused counts compressed pages (of lists and fixed-size lists) a
	// piece took decompressed from the piece of its row group before it
	// (the page both pieces' rows are in).
	PagesReused atomic.Int64
	// PagesShared counts compressed pages a piece took decompressed from
	// another reader of its row group, which keeps it for its own pieces
	// (PageShare): not decompressed again.
	PagesShared atomic.Int64
	// Fetches is the number of ranged reads issued (after coalescing).
	Fetches atomic.Int64
	// FetchedBytes is the bytes those reads made available: read into
	// buffers, or mapped.
	FetchedBytes atomic.Int64
	// SparseSkipped is the bytes of edge pages a piece did not fetch: the
	// values of rows outside it in uncompressed pages (pieces_sparse.go).
	SparseSkipped atomic.Int64
	// PagesChecked counts the pages whose headers pieces checked against
	// the column chunk's limits before decoding them: once per page and
	// row group entry (a page that later pieces cut too is not checked
	// again: Shared).
	PagesChecked atomic.Int64
	// ChunksLocated counts the column chunks whose pages pieces located
	// (their headers walked, or their offset index read): once per row
	// group and column among every reader of a Dataset's file, while the
	// row group is among the last few the file's decoder located.
	ChunksLocated atomic.Int64
	// PagesPlaced counts the pages whose values pieces wrote into the
	// caller's memory (Piece.Into), of those Pages counts.
	PagesPlaced atomic.Int64
}
