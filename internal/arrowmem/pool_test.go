package arrowmem

import (
	"bytes"
	"runtime/debug"
	"testing"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow/memory"
)

// poisoned returns a pool whose freed buffers are filled with 0xAB before
// they can be handed out again.
func poisoned() *PoolAllocator {
	p := NewPoolAllocator()
	p.poison = func(b []byte) {
		for i := range b {
			b[i] = 0xAB
		}
	}
	return p
}

func aligned(b []byte) bool { return uintptr(unsafe.Pointer(unsafe.SliceData(b)))%64 == 0 }

// TestPoolAllocatorSizes: sizes round up to their class (package sizeclass:
// powers of two to 64 KiB, quarter steps past it), 64-byte aligned.
func TestPoolAllocatorSizes(t *testing.T) {
	p := NewPoolAllocator()
	for _, tc := range []struct{ size, cap int }{
		{0, 64}, {1, 64}, {64, 64}, {65, 128}, {1000, 1024}, {1 << 20, 1 << 20}, {1<<20 + 1, 5 << 18}, {3<<20 + 1, 7 << 19}, {100 << 10, 112 << 10},
	} {
		b := p.Allocate(tc.size)
		if len(b) != tc.size || cap(b) != tc.cap || !aligned(b) {
			t.Errorf("Allocate(%d) = len %d cap %d aligned %v, want len %d cap %d aligned", tc.size, len(b), cap(b), aligned(b), tc.size, tc.cap)
		}
		p.Free(b)
	}
	if n := p.Allocated(); n != 0 {
		t.Errorf("Allocated() = %d after freeing everything, want 0", n)
	}
}

func TestPoolAllocatorReuse(t *testing.T) {
	p := poisoned()
	// sync.Pool may drop an item at a garbage collection: try a few times.
	reusedSame := false
	for i := 0; i < 20 && !reusedSame; i++ {
		a := p.Allocate(3000)
		for j := range a {
			a[j] = 1
		}
		p.Free(a)
		b := p.AllocateUninitialized(2500) // same class (4096)
		reusedSame = unsafe.SliceData(a) == unsafe.SliceData(b)
		if reusedSame && b[0] != 0xAB {
			t.Errorf("reused uninitialized memory starts with %#x, want the poison 0xAB", b[0])
		}
		p.Free(b)
		c := p.Allocate(4000)
		if i := bytes.IndexFunc(c, func(r rune) bool { return r != 0 }); i >= 0 {
			t.Fatalf("Allocate(4000) after reuse has byte %d = %#x, want zeroed memory", i, c[i])
		}
		p.Free(c)
	}
	if !reusedSame || p.Reused() == 0 {
		t.Errorf("freed memory was never reused (Reused() = %d)", p.Reused())
	}
	if n := p.Allocated(); n != 0 {
		t.Errorf("Allocated() = %d, want 0", n)
	}
}

// A buffer freed and allocated again costs no Go allocation: the pools
// carry freed buffers in recycled holders (a mixture frees tens of
// thousands a run). The garbage collector is off meanwhile: a collection
// empties the pools, and the next Allocate then makes a fresh buffer.
func TestPoolAllocatorReuseAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector drops sync.Pool items at random (and allocates)")
	}
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	p := NewPoolAllocator()
	p.Free(p.AllocateUninitialized(64 << 10))
	if n := testing.AllocsPerRun(100, func() {
		p.Free(p.AllocateUninitialized(64 << 10))
	}); n != 0 {
		t.Errorf("%v Go allocations a Free and AllocateUninitialized of a pooled size, want 0", n)
	}
	if p.Reused() < 100 {
		t.Errorf("Reused() = %d after 101 rounds, want every round reused", p.Reused())
	}
}

func TestPoolAllocatorReallocate(t *testing.T) {
	p := poisoned()
	mem := memory.NewCheckedAllocator(p) // accounting through a wrapper
	defer mem.AssertSize(t, 0)
	b := mem.Allocate(100)
	for i := range b {
		b[i] = byte(i + 1)
	}
	check := func(b []byte, size, kept int) {
		t.Helper()
		if len(b) != size || !aligned(b) {
			t.Fatalf("Reallocate(%d) = len %d aligned %v", size, len(b), aligned(b))
		}
		for i := 0; i < kept; i++ {
			if b[i] != byte(i+1) {
				t.Fatalf("Reallocate(%d): byte %d = %d, want %d", size, i, b[i], byte(i+1))
			}
		}
		for i := kept; i < size; i++ {
			if b[i] != 0 {
				t.Fatalf("Reallocate(%d): new byte %d = %#x, want 0", size, i, b[i])
			}
		}
	}
	b = mem.Reallocate(50, b) // shrink within the class
	check(b, 50, 50)
	b = mem.Reallocate(120, b) // grow within the class: bytes 50.. were 51.. before; must be zeroed
	check(b, 120, 50)
	b = mem.Reallocate(5000, b) // another class: copied
	check(b, 5000, 50)
	if got, want := p.Allocated(), int64(5000); got != want {
		t.Errorf("Allocated() = %d, want %d", got, want)
	}
	mem.Free(b)
	if n := p.Allocated(); n != 0 {
		t.Errorf("Allocated() = %d after Free, want 0", n)
	}
}
