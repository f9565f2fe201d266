package bufpool

import (
	"testing"

	"github.com/meshfeed/meshfeed/internal/sizeclass"
)

// TestGetPut: a buffer has the length asked for and a class's capacity
// (sizeclass) of at least 64 KiB, at most a quarter over what was asked; a buffer put back is handed out again for its size
// class, and one whose capacity is no size class is dropped.
func TestGetPut(t *testing.T) {
	for _, n := range []int64{0, 1, 64 << 10, 64<<10 + 1, 3 << 20} {
		b := Get(n)
		if int64(len(b)) != n {
			t.Fatalf("Get(%d): len %d", n, len(b))
		}
		if c := cap(b); c < 64<<10 || int64(c) < n || (n > 64<<10 && float64(c) > 1.25*float64(n)) {
			t.Fatalf("Get(%d): cap %d, want a class size of at least max(n, 64 KiB), at most a quarter over n", n, c)
		}
		if _, ok := sizeclass.Exact(int64(cap(b))); !ok {
			t.Fatalf("Get(%d): cap %d is no class size", n, cap(b))
		}
		Put(b)
	}
	b := Get(1 << 20)
	b[0] = 0xAB
	Put(b)
	// sync.Pool may drop what it holds (a GC); without one in between it
	// hands the buffer back on this goroutine's P.
	if c := Get(1 << 20); &c[:1][0] != &b[:1][0] {
		t.Logf("the pool did not hand the buffer back (a GC ran): not checked")
	} else if c[0] != 0xAB {
		t.Fatalf("a pooled buffer was cleared")
	}
	odd := make([]byte, 100, 100_000)
	Put(odd) // no size class: dropped, not handed out as 128 KiB
	if c := Get(100_000); cap(c) == 100_000 {
		t.Fatalf("a buffer of capacity 100000 was pooled")
	}
}
