// Package arrowmem answers one question: where does Arrow memory come from,
// and how much of it does a record hold?
//
// It owns the one [UninitializedAllocator] interface (an allocator that can
// hand out memory without clearing it), [PoolAllocator] (recycled buffers),
// [NewOverwriteBuffer] (a values buffer its caller writes whole, uncleared
// where the allocator allows), and the one size count of arrays and records
// ([DataBytes], [RecordBytes]: buffers, children and dictionaries). The
// loader, batching, transport, feed and the binary share them; it imports no
// meshfeed package.
//
// # Caveats
//
// Memory from AllocateUninitialized, and from a PoolAllocator after a Free,
// holds another buffer's bytes: a buffer from NewOverwriteBuffer must be
// written whole before any array exposes it, and a record released to a pool
// must not be read afterwards (its bytes are another record's).
package arrowmem
