package bufpool

import (
	"sync"

	"github.com/meshfeed/meshfeed/internal/sizeclass"
)

var pools [sizeclass.Count]sync.Pool

// minSize is the smallest buffer pooled: smaller ones are rounded up to it.
const minSize = 64 << 10

// Get returns a buffer of n bytes, pooled when one of its size class is
// free (its contents are then not cleared).
func Get(n int64) []byte {
	c, size := sizeclass.Of(max(n, minSize))
	if c >= len(pools) {
		return make([]byte, n)
	}
	if b, ok := pools[c].Get().(*[]byte); ok {
		return (*b)[:n]
	}
	return make([]byte, n, size)
}

// Put returns b, from Get, to the pool; a buffer whose capacity is not a
// size class is dropped.
func Put(b []byte) {
	c, ok := sizeclass.Exact(int64(cap(b)))
	if !ok || cap(b) < minSize || c >= len(pools) {
		return
	}
	b = b[:0]
	pools[c].Put(&b)
}
