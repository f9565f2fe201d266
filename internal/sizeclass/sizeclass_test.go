package sizeclass

import (
	"math/bits"
	"testing"
)

// TestOf: every size lands in the smallest class holding it, classes grow
// with their sizes, a class holds at most a quarter more than was asked
// for past 64 KiB (and powers of two below), and every class size is
// Exact.
func TestOf(t *testing.T) {
	prevClass, prevSize := -1, int64(0)
	for n := int64(1); n <= 1<<40; n = n + n/7 + 1 {
		for _, m := range []int64{n, n + 1, n - 1} {
			if m < 1 {
				continue
			}
			c, size := Of(m)
			if size < m {
				t.Fatalf("Of(%d) = class %d, size %d: smaller than asked", m, c, size)
			}
			if c >= Count {
				t.Fatalf("Of(%d) = class %d, over Count %d", m, c, Count)
			}
			if m > 1<<quarterFrom && float64(size) > 1.25*float64(m)+1 {
				t.Fatalf("Of(%d) = %d: more than a quarter over", m, size)
			}
			if m <= 1<<quarterFrom && size != 1<<bits.Len64(uint64(m-1)) {
				t.Fatalf("Of(%d) = %d: want the next power of two", m, size)
			}
			if ec, ok := Exact(size); !ok || ec != c {
				t.Fatalf("Exact(%d) = %d, %v; want class %d", size, ec, ok, c)
			}
			if c2, s2 := Of(size); c2 != c || s2 != size {
				t.Fatalf("Of(%d) = %d, %d; want its own class %d", size, c2, s2, c)
			}
		}
		c, size := Of(n)
		if (c > prevClass) != (size > prevSize) || (c == prevClass) != (size == prevSize) {
			t.Fatalf("Of(%d) = class %d size %d after class %d size %d: not monotone", n, c, size, prevClass, prevSize)
		}
		prevClass, prevSize = c, size
	}
	for _, c := range []int64{3 << 20, 5 << 18, 7 << 17} {
		if _, ok := Exact(c); !ok {
			t.Fatalf("Exact(%d): want a class size", c)
		}
	}
	for _, c := range []int64{0, 3 << 10, 100_000, 9 << 18} {
		if _, ok := Exact(c); ok {
			t.Fatalf("Exact(%d): not a class size", c)
		}
	}
}
