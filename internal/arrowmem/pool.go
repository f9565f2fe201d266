package arrowmem

import (
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/meshfeed/meshfeed/internal/sizeclass"
)

// poolMin is the smallest buffer pooled (smaller ones are rounded up to
// it); poolMaxClass bounds the pooled classes (sizeclass), about 1 TiB.
const (
	poolMin      = 64
	poolMaxClass = 113
	poolAlign    = 64
)

// PoolAllocator is a memory.Allocator that recycles freed memory: sizes are
// rounded up to their size class (package sizeclass: powers of two from 64
// bytes to 64 KiB, then quarter steps), and each size class keeps
// the buffers freed in it in a sync.Pool, so a loop that decodes and releases
// row groups of similar sizes reuses the same memory instead of having the
// runtime allocate and clear it each time. Buffers not yet reused are
// dropped at garbage collection like any sync.Pool content.
//
// Allocate and Reallocate clear the bytes they return, as arrow-go's own
// allocators do (arrow-go's builders and readers rely on it), so the
// allocator is safe for any Arrow code. AllocateUninitialized does not: the
// decoders and the gather use it for the buffers they overwrite whole (see
// [UninitializedAllocator], [NewOverwriteBuffer]).
//
// # Caveats
//
// Memory is reused after Free: a slice of a released buffer kept past its
// Release sees another record's bytes, where memory.GoAllocator would have
// kept the old bytes alive. Release a record only when nothing uses its
// buffers any more (including, in a server, writes still in flight).
//
// A PoolAllocator is safe for concurrent use.
type PoolAllocator struct {
	pools  [poolMaxClass]sync.Pool // of *[]byte, len 0, cap the class's size
	live   atomic.Int64            // bytes allocated and not freed (requested sizes)
	reused atomic.Int64
	poison func([]byte) // test hook: called on each freed buffer before it is pooled
}

var (
	_ UninitializedAllocator = (*PoolAllocator)(nil)
)

// NewPoolAllocator returns an empty pool.
func NewPoolAllocator() *PoolAllocator { return &PoolAllocator{} }

// Allocated returns the bytes allocated and not yet freed (the sizes asked
// for, not the rounded-up classes), like memory.CheckedAllocator.CurrentAlloc.
func (p *PoolAllocator) Allocated() int64 { return p.live.Load() }

// Reused returns how many allocations were served from freed memory.
func (p *PoolAllocator) Reused() int64 { return p.reused.Load() }

// get returns size bytes of class memory, dirty when reused.
func (p *PoolAllocator) get(size int) (b []byte, dirty bool) {
	if size < 0 {
		panic("arrowmem: PoolAllocator: negative size") // as memory.GoAllocator (make) does
	}
	p.live.Add(int64(size))
	c, capacity := sizeclass.Of(int64(max(size, poolMin)))
	if c >= poolMaxClass {
		return alignedBytes(size, size), false
	}
	if bp, ok := p.pools[c].Get().(*[]byte); ok {
		p.reused.Add(1)
		b = (*bp)[:size]
		*bp = nil
		holders.Put(bp)
		return b, true
	}
	return alignedBytes(size, int(capacity)), false
}

// alignedBytes returns a fresh, zeroed slice of len n and cap c starting at a
// 64-byte boundary.
func alignedBytes(n, c int) []byte {
	buf := make([]byte, c+poolAlign)
	shift := 0
	if r := int(uintptr(unsafe.Pointer(unsafe.SliceData(buf))) % poolAlign); r != 0 {
		shift = poolAlign - r
	}
	return buf[shift : shift+n : shift+c]
}

// Allocate implements memory.Allocator: size bytes, 64-byte aligned, zeroed.
func (p *PoolAllocator) Allocate(size int) []byte {
	b, dirty := p.get(size)
	if dirty {
		clear(b)
	}
	return b
}

// AllocateUninitialized implements UninitializedAllocator: like Allocate,
// but the bytes of reused memory are left as they are.
func (p *PoolAllocator) AllocateUninitialized(size int) []byte {
	b, _ := p.get(size)
	return b
}

// Reallocate implements memory.Allocator: b resized to size, its first
// min(len(b), size) bytes kept and the rest zeroed. b must come from p.
func (p *PoolAllocator) Reallocate(size int, b []byte) []byte {
	if size < 0 {
		panic("arrowmem: PoolAllocator: negative size")
	}
	if size <= cap(b) {
		p.live.Add(int64(size - len(b)))
		if size > len(b) {
			clear(b[len(b):size])
		}
		return b[:size]
	}
	nb := p.AllocateUninitialized(size)
	n := copy(nb, b)
	clear(nb[n:])
	p.Free(b)
	return nb
}

// Free implements memory.Allocator. b must come from p (Allocate,
// AllocateUninitialized or Reallocate) and not be used afterwards.
func (p *PoolAllocator) Free(b []byte) {
	p.live.Add(-int64(len(b)))
	c, ok := sizeclass.Exact(int64(cap(b)))
	if !ok || cap(b) < poolMin || c >= poolMaxClass {
		return // not pooled (too large), or not from p
	}
	if p.poison != nil {
		p.poison(b[:cap(b)])
	}
	h := holders.Get().(*[]byte)
	*h = b[:0]
	p.pools[c].Put(h)
}

// holders recycles the *[]byte that carry freed buffers in the pools, so
// that Free allocates nothing: a slice put in a sync.Pool as &b escapes, one
// allocation a Free (a mixture frees about 70,000 buffers a run of
// BenchmarkMixturePaired's 2,000,000-row shape).
var holders = sync.Pool{New: func() any { return new([]byte) }}
