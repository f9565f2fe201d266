package transport

// The shared-memory wire's arena: a memfd region that a stream's backend
// allocates its large buffers from (decoded columns, gathered and padded
// slices), so that a step whose buffers already lie there, 64-byte aligned,
// is sent by reference instead of copied into a slot (see shm.go).

import (
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"golang.org/x/sys/unix"

	"github.com/meshfeed/meshfeed/internal/arrowmem"
)

// Arena defaults.
const (
	// DefaultShmArena is the arena of each shared-memory stream (512 MiB of
	// address space; only the bytes in use are ever touched).
	DefaultShmArena = 512 << 20
	// shmArenaMin is the smallest allocation the arena serves: smaller ones
	// (offsets, bitmaps, short columns) come from the fallback allocator and
	// are copied into the step's slot, which costs less than their
	// bookkeeping here.
	shmArenaMin = 16 << 10
)

// shmArena is a memory.Allocator over one memfd mapping: first fit over a
// list of free spans kept sorted and coalesced, each allocation 64-byte
// aligned. An allocation smaller than shmArenaMin, or one that finds no
// room, comes from fallback instead (the server's allocator), so a full arena
// costs copies, never a failure. Free and Reallocate take buffers of either.
//
// The mapping is unmapped once the arena is closed and its last allocation
// freed: a record that outlives its stream keeps the bytes it views.
type shmArena struct {
	fd       int
	mem      []byte // unmapped once closed and empty; base and size stay
	base     uintptr
	size     uintptr
	fallback memory.Allocator

	mu     sync.Mutex
	free   []arenaSpan     // sorted by offset, coalesced
	live   map[int64]int64 // offset -> span bytes
	closed bool

	spills *atomic.Int64 // counts allocations sent to the fallback for want of room (the server's metric)
}

type arenaSpan struct{ off, n int64 }

// newShmArena maps an arena of size bytes (rounded up to pages); spills
// counts the allocations it sends to fallback for want of room.
func newShmArena(size int64, fallback memory.Allocator, spills *atomic.Int64) (*shmArena, error) {
	m, err := newShmMapping(1, size)
	if err != nil {
		return nil, err
	}
	return &shmArena{
		fd: m.fd, mem: m.mem, base: uintptr(unsafe.Pointer(unsafe.SliceData(m.mem))), size: uintptr(len(m.mem)), fallback: fallback, spills: spills,
		free: []arenaSpan{{0, int64(len(m.mem))}}, live: map[int64]int64{},
	}, nil
}

// offset returns where b starts in the arena, and false when it does not lie
// in it.
func (a *shmArena) offset(b []byte) (int64, bool) {
	if cap(b) == 0 {
		return 0, false
	}
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	if p < a.base || p >= a.base+a.size {
		return 0, false
	}
	return int64(p - a.base), true
}

// take carves size bytes (rounded up to shmAlign) out of the smallest free
// span that holds them (the first of those). Best fit, not first fit: the
// arena's touched pages are its resident memory, and a mixture's readers
// allocate pieces and pages of several sizes, whose holes first fit left
// unused (the mixture benchmark's arena reached 83 MiB for 72 MiB live
// first fit, 80-81 best fit).
func (a *shmArena) take(size int) ([]byte, bool) {
	n := alignUp(int64(size), shmAlign)
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil, false
	}
	best := -1
	for i, s := range a.free {
		if s.n >= n && (best < 0 || s.n < a.free[best].n) {
			best = i
			if s.n == n {
				break
			}
		}
	}
	if best < 0 {
		return nil, false
	}
	s := a.free[best]
	if s.n == n {
		a.free = append(a.free[:best], a.free[best+1:]...)
	} else {
		a.free[best] = arenaSpan{s.off + n, s.n - n}
	}
	a.live[s.off] = n
	return a.mem[s.off : s.off+int64(size) : s.off+int64(size)], true
}

var _ arrowmem.UninitializedAllocator = (*shmArena)(nil)

// AllocateUninitialized implements arrowmem.UninitializedAllocator: size
// bytes whose contents are unspecified (the caller overwrites them whole).
func (a *shmArena) AllocateUninitialized(size int) []byte {
	if size >= shmArenaMin {
		if b, ok := a.take(size); ok {
			return b
		}
		a.spills.Add(1)
	}
	return arrowmem.AllocateOverwrite(a.fallback, size)
}

// Allocate implements memory.Allocator: size bytes, cleared.
func (a *shmArena) Allocate(size int) []byte {
	if size >= shmArenaMin {
		if b, ok := a.take(size); ok {
			clear(b)
			return b
		}
		a.spills.Add(1)
	}
	return a.fallback.Allocate(size) // cleared by the fallback, as Allocate must be
}

// Reallocate implements memory.Allocator.
func (a *shmArena) Reallocate(size int, b []byte) []byte {
	if _, ok := a.offset(b); !ok {
		// A builder's buffer that grows past the arena's minimum moves here.
		if size >= shmArenaMin && size > len(b) {
			if nb, ok := a.take(size); ok {
				copy(nb, b)
				clear(nb[len(b):])
				if cap(b) > 0 {
					a.fallback.Free(b)
				}
				return nb
			}
		}
		return a.fallback.Reallocate(size, b)
	}
	if size <= cap(b) {
		old := len(b)
		b = b[:size]
		if size > old {
			clear(b[old:])
		}
		return b
	}
	nb := a.Allocate(size)
	copy(nb, b)
	a.Free(b)
	return nb
}

// Free implements memory.Allocator.
func (a *shmArena) Free(b []byte) {
	off, ok := a.offset(b)
	if !ok {
		a.fallback.Free(b)
		return
	}
	a.mu.Lock()
	n, ok := a.live[off]
	if !ok {
		a.mu.Unlock()
		panic(fmt.Sprintf("transport: shm arena: free of %d bytes at offset %d, which is not an allocation", len(b), off))
	}
	delete(a.live, off)
	// Insert [off, off+n) and merge it with its neighbours.
	i := sort.Search(len(a.free), func(i int) bool { return a.free[i].off > off })
	s := arenaSpan{off, n}
	if i > 0 && a.free[i-1].off+a.free[i-1].n == off {
		i--
		s = arenaSpan{a.free[i].off, a.free[i].n + n}
		a.free = append(a.free[:i], a.free[i+1:]...)
	}
	if i < len(a.free) && s.off+s.n == a.free[i].off {
		s.n += a.free[i].n
		a.free[i] = s
	} else {
		a.free = append(a.free, arenaSpan{})
		copy(a.free[i+1:], a.free[i:])
		a.free[i] = s
	}
	unmap := a.closed && len(a.live) == 0
	a.mu.Unlock()
	if unmap {
		a.unmap()
	}
}

// liveBytes returns the bytes allocated here and not yet freed.
func (a *shmArena) liveBytes() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	var n int64
	for _, s := range a.live {
		n += s
	}
	return n
}

// close stops serving allocations and closes the descriptor; the mapping
// goes when the last live allocation is freed (at once when none is).
func (a *shmArena) close() {
	if a == nil {
		return
	}
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return
	}
	a.closed = true
	unmap := len(a.live) == 0
	a.mu.Unlock()
	_ = unix.Close(a.fd)
	if unmap {
		a.unmap()
	}
}

func (a *shmArena) unmap() {
	a.mu.Lock()
	mem := a.mem
	a.mem = nil
	a.mu.Unlock()
	if mem != nil {
		_ = unix.Munmap(mem)
	}
}

// mapped reports whether the arena's mapping is still in place (tests).
func (a *shmArena) mapped() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.mem != nil
}
