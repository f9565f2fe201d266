// Package sizeclass answers one question: what capacity does a pool round
// a buffer of n bytes up to? Powers of two up to 64 KiB, then four classes
// per doubling (2^k, 1.25, 1.5 and 1.75 times 2^k), so that a buffer holds
// at most a quarter more than it was asked for. Whole powers of two wasted
// up to half of it: a Parquet page of a power of two of values plus its
// levels, or a piece of a few thousand rows, landed just past one and held
// nearly twice its bytes (BENCHMARKS.md, "Mixtures").
//
// It imports nothing of meshfeed; bufpool and arrowmem pool by its classes.
package sizeclass

import "math/bits"

// quarterFrom is the log2 of the size from which classes step by quarters.
const quarterFrom = 16

// Count bounds the classes of sizes up to 2^47 bytes: a pool keeps an array
// of this many.
const Count = quarterFrom + 1 + (47-quarterFrom)*4

// Of returns the class of an n-byte buffer and its capacity, the smallest
// class size of at least n (n >= 1; 0 is class 0, of size 1). Classes
// grow with their sizes.
func Of(n int64) (class int, size int64) {
	if n <= 1<<quarterFrom {
		k := bits.Len64(uint64(max(n, 1) - 1))
		return k, 1 << k
	}
	k := bits.Len64(uint64(n-1)) - 1 // 2^k < n <= 2^(k+1)
	step := int64(1) << (k - 2)
	j := (n - 1<<k + step - 1) / step // 1..4
	return quarterFrom + 1 + (k-quarterFrom)*4 + int(j) - 1, 1<<k + j*step
}

// Exact reports whether c is a class size, and its class: a pool keeps
// only buffers of exactly a class's capacity.
func Exact(c int64) (class int, ok bool) {
	if c <= 0 {
		return 0, false
	}
	class, size := Of(c)
	return class, size == c
}
