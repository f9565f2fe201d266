// Package loader answers one question: which rows of a dataset are read,
// when, and with how much memory in flight?
//
// It owns datasets over the objects of an objstore.Store (Open matches the
// patterns there): the files sorted by URI, their footers read (concurrently,
// bounded, cached), column projection and the schemas' agreement, and the
// plan-time facts (rows, byte ranges, decoded-size estimates, PieceCost);
// then coalesced ranged reads (mapped where the store maps) and a
// RowGroupReader with bounded read-ahead that reads row groups, or row
// ranges of them as pieces, in order. What a Parquet or Arrow IPC file's
// footers say and how its column chunks become Arrow memory is package
// format's question (its doc lists the decoding routes); where the bytes are,
// and how they are listed, fetched or mapped, is package objstore's. loader
// adapts the one to the other (format.Source, format.Fetched and
// format.Fetcher over objstore).
//
// With [WithManifest], Open plans from the dataset's manifest (package
// manifest; [BuildManifest] writes its facts from the footers) instead of
// every footer: at most two store requests, and each file's identity is
// checked, and its footer read, when it is first decoded ([ErrStale] when
// it changed). [Dataset.PlanInfo] says which way planning went.
//
// It knows nothing of batches, steps, streams or meshes: package batching decides
// which row groups are read in which order, and package shard which process
// needs which slice.
//
// # Caveats
//
// A record returned by the loader belongs to the caller, who must Release it.
// Its buffers come from the allocator passed to the loader and stay valid until
// that Release. Planning never reads a data page: row counts and column chunk
// byte ranges come from the footers alone.
//
// Local files are mapped with mmap for decoding (see [WithMmap] and
// objstore.Mapper); no decoded array points into a mapping, and every mapping
// is released once its row group is decoded, unless the store keeps whole
// files mapped between reads (objstore.WithMapCache). A reader's pieces of a
// row group share one mapping of its projected column chunks
// (objstore.WindowMapper), made by its first piece of the row group and
// released after its last: each page is populated once, when a piece first
// decodes it, and leaves the page tables once the reader's pieces are past it
// (format.Dropper, objstore.Window.Drop: a piece gives back its pages but the
// one it ended in, all of them when compressed); mapped pages are file-backed
// page-cache pages, not charged to the read-ahead beyond what each piece
// charges. A file truncated while
// mapped raises SIGBUS when a lost page is touched: during decoding it
// becomes an error wrapping ErrNotFound (objstore's caveats say why files
// must be renamed into place instead).
//
// A [RowGroupReader] reads a ref with a row range ([RowGroupRef] Start and
// End, or any ref under [WithReaderMaxPiece]) as a piece: a record of those
// rows alone. Columns format streams (fixed-width values and lists of them;
// PLAIN pages, no dictionary, no nulls; codec none, snappy, zstd or gzip)
// fetch only the pages holding the piece's rows (mapped, for local files:
// the mapping covers those pages and is released after decoding), at most
// one page more per streamed column at each end (for a list whose v1 pages
// are cut inside rows, as arrow-go writes them, also the pages ending its
// last row; of the uncompressed v1 pages of a fixed-size list at its ends,
// only their headers, levels and the piece's own values where pages are
// read rather than mapped (a remote store, or WithMmap(false):
// format.SparseFetcher; a mapping maps them whole)); pages its row group's pieces
// share are decoded or decompressed
// once (ReadStats.Reused, PagesReused), and so is a page that two readers
// of the Dataset whose rows meet in it keep (format.PageShare, one per row
// group: PagesShared); under [WithReaderSnapPieces] the
// reader moves the ends between its pieces of a row group to page breaks of
// its widest compressed column, so that no piece cuts such a page. Every other column (dictionary-encoded,
// nullable, booleans, strings, the types arrow-go decodes, Arrow IPC
// batches) is decoded whole once per row group and reader; its pieces are
// slices of it, and its whole size (compressed plus decoded) stays charged
// to the read-ahead budget from the row group's first piece until its last
// is decoded ([RowGroupReader.PeakInFlight] counts it). Planning still reads
// no data page; the pages are located when a piece is first charged.
// Readers given one [FetchShare] (a stream's slices) fetch the pages of a row
// group they all read pieces of once: the share holds them, in Go memory up
// to its bound, until every one of those readers is done with the row group.
// A [HeldChunks] carries column chunks from one reader to the next across
// requests (a filter's plan to its stream): a reader given it takes from it
// whatever byte ranges it holds, bounded in bytes, time and the caller's
// memory account.
//
// With an arrowmem.PoolAllocator (or any arrowmem.UninitializedAllocator) the
// values of fixed-width columns are decoded into memory that is not cleared
// first (format's caveats); a PoolAllocator reuses a record's memory as soon
// as it is released.
package loader
