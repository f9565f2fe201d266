// Package objstore answers one question: where are a dataset's bytes, and how
// are byte ranges of them listed, fetched or mapped?
//
// It owns the [Store] interface (List, Stat, ReadAt) and its stores: local
// disk ([LocalStore]: roots, mmap, a map cache), Google Cloud Storage
// ([GCSStore]), S3 and S3-compatible services ([S3Store]), Azure Blob Storage
// ([AzureStore]: az://, abfs://, abfss://) and web servers ([HTTPSStore]: no
// listing, see [CanList]), the remote ones with ranged reads pinned to the
// version listed (generation, ETag or Last-Modified), a retry budget, a stall
// timeout and resumption at the first missing byte; the [Mux] that routes a
// URI to one of them by its scheme, globbing ([Match]), and a value-agnostic
// [FooterCache] keyed by object version. It knows nothing of file formats: package loader
// reads Parquet and Arrow IPC through it.
//
// A new store is one file beside local.go, gcs.go, s3.go, azure.go and https.go, plus
// its tests: its type implements Store (and Creator, StatsReporter where it
// can), its init registers its scheme with the Mux (registerScheme) and its
// WithXOptions MuxOption passes it options (addSchemeOptions). An HTTP-based
// store reuses retry.go: a retryConfig in its config (set by its retry
// options), a trackingTransport under its HTTP client, and ReadAt as
// readTracker.read over one ranged request plus a classifier of the errors
// retrying cannot help. Its test runs objstoretest.Conformance, the suite
// every store passes.
//
// [DiskCache] keeps the bytes of remote objects on local disk in aligned
// blocks keyed by [Object.CacheKey], bounded by size (least recently used
// first out), checked on every read; [WithDiskCache] puts it in front of
// every remote store of a [Mux], [DiskCache.Wrap] in front of any Store.
//
// # Caveats
//
// Versions. An S3 object's version is its ETag, an HTTPS file's its ETag or
// else its Last-Modified time. Two uploads of the same bytes share an S3
// ETag (reading either is reading the same bytes); a file served with
// Last-Modified alone and replaced within the same second by one of the same
// size is not told apart (HTTP dates have one-second resolution). A read
// resumed after a break asks for the version of its first response, so it
// never mixes two versions even for an Object that carries none.
//
// Roots. A [LocalStore] given [WithRoots] serves only files inside those
// directories, resolving every path, glob match and directory entry through
// [os.Root]: a symlink or ".." leading out of a root is an error wrapping
// ErrOutsideRoot, also when the symlink is swapped in between the listing and
// the open (the open goes through the root). Hard links and bind mounts are
// not guarded against (docs/PROTOCOL.md).
//
// Mappings. [Mapper.Map] hands out the file's pages in the page cache, shared
// with every other process. A file truncated while mapped raises SIGBUS when a
// lost page is touched: the caller must touch mapped bytes only where it turns
// such a fault into an error (loader decodes under debug.SetPanicOnFault and
// reports ErrNotFound); anywhere else the fault kills the process. Replace
// files by renaming new ones into place ([LocalStore.Create] does), never by
// truncating and rewriting them while they are read. Every Map result must be
// released exactly once (Stats.LiveMaps counts those that are not).
//
// Globs. Match lists a pattern's literal prefix once and matches every
// listed name in one pass (no backtracking, however many "**" the pattern
// has), stops with ctx's error when ctx is done, and refuses patterns that
// match more than DefaultMaxMatches objects or whose "**" reaches more than
// DefaultMaxGlobDepth segments below the prefix (ErrGlobLimit, naming the
// pattern and the limit; see WithMaxMatches, WithMaxGlobDepth). Listing
// itself is linear in the objects under the prefix: a pattern whose literal
// prefix is short lists much.
//
// Map cache. With [WithMapCache] a LocalStore keeps whole files mapped between
// Map calls, up to a byte bound (least recently used unmapped first), so
// repeated passes over page-cache-warm files pay the page-table work once per
// file, not per pass. Pages touched through a cached mapping stay in the
// process's RSS (file-backed, reclaimable) until the file is evicted or the
// store is closed, and a truncated file can fault for as long as it stays
// cached.
//
// Windows. [WindowMapper.MapWindow] maps a range of a local file once,
// unpopulated, for many reads of its parts ([Window.Bytes] populates each
// page the first time it is handed out); the loader maps a row group's column
// chunks as one window for the pieces a reader reads of it. Its pages stay in
// the process's RSS (file-backed, reclaimable) until [Window.Drop] gives back
// those a reader is done with, or [Window.Release]. A [LocalStore] gives
// dropped pages back together, once [WithDropBatch] bytes of them are
// pending over its windows: one process_madvise(2) call, one flush of the
// CPUs' TLBs, where each Drop was a madvise(2) call and a flush of its own.
//
// Disk cache. Entries are checked (size, header, CRC-32C) on every read and
// replaced atomically, so a crash or a damaged disk costs a fetch, never a
// wrong byte. Several processes may share a cache directory, but each keeps
// only its own entries (and those present when it started) within its size.
// A miss fetches whole blocks: up to one block more than asked at each end
// of a read.
package objstore
