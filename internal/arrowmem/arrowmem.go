package arrowmem

import (
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// UninitializedAllocator is a memory.Allocator that can also hand out memory
// without clearing it. The loader's decoders and batching's gather allocate
// the values buffers they overwrite whole (fixed-width columns and
// fixed_size_list values, not booleans) with AllocateUninitialized, through
// [NewOverwriteBuffer], when the allocator they are given implements this
// interface, which saves writing every byte twice; every other buffer comes
// from Allocate. [PoolAllocator] and the server's shared-memory arena
// implement it. An allocator that wraps another (accounting, limits)
// implements it by forwarding.
type UninitializedAllocator interface {
	memory.Allocator
	// AllocateUninitialized returns size bytes, 64-byte aligned, whose
	// contents are unspecified; Free and Reallocate take it like the
	// result of Allocate.
	AllocateUninitialized(size int) []byte
}

// NewOverwriteBuffer returns a buffer of n bytes that the caller overwrites
// whole before exposing it: uninitialized when mem is an
// [UninitializedAllocator], else cleared by mem as usual.
func NewOverwriteBuffer(mem memory.Allocator, n int) *memory.Buffer {
	if u, ok := mem.(UninitializedAllocator); ok && n > 0 {
		return memory.NewBufferWithAllocator(u.AllocateUninitialized(n), mem)
	}
	b := memory.NewResizableBuffer(mem)
	b.Resize(n)
	return b
}

// AllocateOverwrite returns n bytes from mem that the caller overwrites
// whole before reading them (Free them to mem): uninitialized where mem is
// an [UninitializedAllocator], else cleared by mem's Allocate.
func AllocateOverwrite(mem memory.Allocator, n int) []byte {
	if u, ok := mem.(UninitializedAllocator); ok {
		return u.AllocateUninitialized(n)
	}
	return mem.Allocate(n)
}

// DataBytes returns the bytes of the buffers of d, its children and its
// dictionary (of a dictionary-encoded array): what it holds in memory. A
// buffer shared by several arrays is counted in each.
func DataBytes(d arrow.ArrayData) int64 {
	var n int64
	for _, b := range d.Buffers() {
		if b != nil {
			n += int64(b.Len())
		}
	}
	for _, c := range d.Children() {
		n += DataBytes(c)
	}
	if d.DataType().ID() == arrow.DICTIONARY {
		// Data.Dictionary returns a typed nil when there is none.
		if dict, ok := d.Dictionary().(*array.Data); ok && dict != nil {
			n += DataBytes(dict)
		}
	}
	return n
}

// RecordBytes returns the bytes of the buffers of rec's columns, as
// [DataBytes] counts them.
func RecordBytes(rec arrow.RecordBatch) int64 {
	var n int64
	for _, col := range rec.Columns() {
		n += DataBytes(col.Data())
	}
	return n
}
