// Package format answers one question: what do a Parquet or Arrow IPC
// file's footers say (schema, row groups, column chunk byte ranges, null
// counts, decoded-size estimates), and how do its column chunks become
// Arrow memory?
//
// It knows nothing of datasets, stores or budgets. What it needs of the
// caller's storage it states as interfaces of its own: a [Source] (ranged
// reads of one object) to read footers, locate pages and serve arrow-go's
// fallback, a [Fetched] (the fetched byte ranges of a row group, readable
// without a copy) to decode from, and a [Fetcher] for the pages of a row
// range. Package loader implements them over objstore, and decides which
// row groups and rows are read, when, and with what memory.
//
// [ReadParquetFooter] and [ReadIPCFooter] read and check a footer; a
// [Footer] tells the schema, the row groups and their projected chunks, and
// makes the [Decoder] of a projection. A Decoder decodes a whole row group;
// the Parquet one is also [Ranged]: it decodes rows [lo, hi) of a row group
// from the pages holding them (a [Piece]), sharing what it located and
// decoded with the row group's other pieces ([Shared]); given an [Into], a
// piece writes its fixed-width columns' values into the caller's memory,
// cut at row bounds, instead of a record's (place.go: a mixture's
// slices), its snappy pages of values that barely compress decoded
// straight there (snappy_scatter.go), those a reader's stream starts or
// ends inside too where the piece says no later one reads them
// (Piece.Until).
//
// Column types are those pyarrow reads (docs/TYPES.md): a file's Arrow
// schema is its stored ARROW:schema or, without one, the one arrow-go
// derives from the Parquet schema (parquet_arrowgo.go), with pyarrow's
// corrections (a legacy two-level list of lists, as parquet-avro writes it,
// is a list of lists, not of structs). Each column chunk takes one route
// (route.go):
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
//	                       validity (Options.NullsAsValidity)
//
// The fast routes need PLAIN pages without nulls, codec none, snappy, zstd
// or gzip. Every route decodes from the same fetched bytes. The parquet-go
// engine stays beside arrow-go because it is faster on the columns it
// serves (BenchmarkPageEngine, route.go). The fast routes also decode row
// ranges alone (pieces.go): their pages are located by the chunk's offset
// index, or by walking the page headers (64 KiB windows, 4 KiB at each
// page once they are larger than that, read ahead at once where pages are
// of one size; a list's v1
// pages by their repetition levels), and only the pages of a range are
// fetched and decoded; every other column of a piece is decoded whole once
// per Shared and sliced.
//
// # Caveats
//
// A record a Decoder returns belongs to the caller, who must Release it; its
// buffers come from the allocator passed in and stay valid until then. No
// decoded array points into the fetched bytes: they may be a mapping of a
// file (loader maps local files), which the caller unmaps after decoding.
// A Shared holds decoded columns and pooled pages until its Release; the
// pages it keeps decompressed for its next piece it shares with the other
// readers of the row group through its PageShare, where one is set.
//
// A mapped file truncated while it is decoded raises SIGBUS when a lost
// page is touched. Where a Fetched is Mapped, the decoders run under
// debug.SetPanicOnFault (the caller sets it around DecodeRowGroup; the
// pieces' own fetches set it themselves) and recover the fault into an
// error wrapping Options.Missing.
//
// Page headers are walked by one iterator (pageIter) that refuses sizes
// past the chunk, value counts past the footer's and decoded sizes past
// Options.MaxBytes; definition levels above the max, or fewer levels than
// a page's num_values, are ErrCorrupt on every route, as pyarrow refuses
// them. Nulls in columns without a fill are ErrNull, when the Decoder is
// made where the footers record them (statistics; for lists, definition
// level histograms, which tell null elements and null lists from empty
// lists), else when decoding, or Arrow nulls with NullsAsValidity. A fill
// stands in for null values and null list elements; a null list becomes
// empty.
//
// With an arrowmem.UninitializedAllocator (arrowmem.PoolAllocator) the
// values of fixed-width columns are decoded into memory that is not cleared
// first; the decoders write every byte of those buffers that an array
// exposes.
package format
