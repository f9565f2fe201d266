package bufpool

import "sync"

var pools [48]sync.Pool

func sizeClass(n int64) int {
	c := 16 // 64 KiB minimum
	for int64(1)<<c < n {
		c++
	}
	return c
}

// Get returns a buffer of n bytes, pooled when one of its size class is
// free (its contents are then not cleared).
func Get(n int64) []byte {
	c := sizeClass(n)
	if c >= len(pools) {
		return make([]byte, n)
	}
	if b, ok := pools[c].Get().(*[]byte); ok {
		return (*b)[:n]
	}
	return make([]byte, n, int64(1)<<c)
}

// Put returns b, from Get, to the pool; a buffer whose capacity is not a
// size class is dropped.
func Put(b []byte) {
	c := sizeClass(int64(cap(b)))
	if c >= len(pools) || int64(1)<<c != int64(cap(b)) {
		return
	}
	b = b[:0]
	pools[c].Put(&b)
}
