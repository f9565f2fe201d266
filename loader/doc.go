// Package loader answers one question: where are the rows, and how do they get
// into Arrow memory fast?
//
// It owns datasets over the objects of an objstore.Store (Open matches the
// patterns there), footer and schema reading for planning, column projection,
// coalesced ranged reads with bounded read-ahead, and decoding Parquet and
// Arrow IPC column chunks into Arrow arrays allocated from a caller-supplied
// memory.Allocator. Where the bytes are, and how they are listed, fetched or
// mapped, is package objstore's question.
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
// files mapped between reads (objstore.WithMapCache). A file truncated while
// mapped raises SIGBUS when a lost page is touched: during decoding the
// loader turns it into an error wrapping ErrNotFound (objstore's caveats
// say why files must be renamed into place instead).
//
// A [RowGroupReader] reads a ref with a row range ([RowGroupRef] Start and
// End, or any ref under [WithReaderMaxPiece]) as a piece: a record of those
// rows alone. Columns the fast path decodes (fixed-width values and lists
// of them, 8- and 16-bit integers stored as INT32 included; PLAIN pages, no
// dictionary, no nulls; codec none, snappy, zstd or gzip) are streamed: only
// the pages holding the piece's rows are fetched (mapped, for local files:
// the mapping covers those pages and is released after decoding) and
// decoded, located by the column chunk's offset index when the file has one,
// else by walking the page headers in 64 KiB windows; a list column's v1
// pages (pyarrow's default, without an offset index) are placed by reading
// their repetition levels, one page at a time, once per row group and
// reader (of a SNAPPY page only its start is decompressed, of a ZSTD or
// GZIP page all of it). A piece of a fixed-size list column copies its own
// rows' values alone out of the pages at its edges; a compressed page it
// shares with the next piece of its row group is decompressed once, and
// handed over (ReadStats.PagesReused). Of a primitive column, a piece
// decodes its pages whole and the next pieces inside them slice them
// (ReadStats.Reused): they fetch nothing. A piece fetches, and is charged
// for, at most one page more per streamed column at each end (for a list
// whose v1 pages are cut inside rows, as arrow-go writes them, also the
// pages ending its last row); a list piece keeps its own rows' values alone
// (but of ZSTD and GZIP v1 pages, whose pages it keeps whole). Every other column
// (dictionary-encoded, nullable, booleans, strings, the types arrow-go
// decodes, Arrow IPC batches) is decoded whole once per row group and
// reader; its pieces are slices of it, and its whole size (compressed plus
// decoded) stays charged to the read-ahead budget from the row group's first
// piece until its last is decoded ([RowGroupReader.PeakInFlight] counts
// it). Planning still reads no data page; the pages are located when a
// piece is first read.
//
// Column types are those pyarrow reads (docs/TYPES.md): a file's Arrow schema
// is its stored ARROW:schema or, without one, the one arrow-go derives from
// the Parquet schema (parquet_arrowgo.go), with pyarrow's corrections (a
// legacy two-level list of lists, as parquet-avro writes it, is a list of
// lists, not of structs). Each column chunk takes one route (route.go):
//
//	route                  columns
//	fast values            fixed-width primitives (not bool); 8- and 16-bit
//	                       integers stored as INT32, narrowed and checked
//	fast fixed_size_list   fixed_size_list of those
//	fast list              list of those
//	parquet-go engine      dictionary-encoded and nullable columns (fill
//	                       values, validity), PLAIN booleans, strings and
//	                       binary, codecs other than none, snappy, zstd and
//	                       gzip; and fast-route chunks whose pages do not
//	                       qualify (a dictionary page, an encoding other than
//	                       PLAIN, a null or empty list)
//	arrow-go               decimals, INT96, times, structs, maps, nested lists;
//	                       LZ4 and LZ4_RAW, RLE booleans; a chunk holding a
//	                       v2 page of no value; nulls inside lists kept as
//	                       validity (WithNullsAsValidity)
//
// The fast routes need PLAIN pages without nulls, codec none, snappy, zstd
// or gzip. Every route decodes from the same fetched bytes. Page headers are
// walked by one iterator (pageIter) that refuses sizes past the chunk, value
// counts past the footer's and decoded sizes past the limit; definition
// levels above the max, or fewer levels than a page's num_values, are
// ErrCorrupt on every route, as pyarrow refuses them. Nulls in columns
// without a fill are ErrNull, at Open where
// the footers record them (statistics; for lists, definition level
// histograms, which tell null elements and null lists from empty lists), or
// Arrow nulls with [WithNullsAsValidity]. A fill stands in for null values
// and null list elements; a null list becomes empty.
//
// With an arrowmem.PoolAllocator (or any arrowmem.UninitializedAllocator) the
// values of fixed-width columns are decoded into memory that is not cleared
// first; the loader writes every byte of those buffers that an array
// exposes. A PoolAllocator reuses a record's memory as soon as it is
// released.
package loader
