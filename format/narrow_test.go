package format

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/parquet-go/parquet-go"
)

// narrowRef is the plain per-value loop narrow replaced.
func narrowRef[T int8 | uint8 | int16 | uint16](o []T, src []int32, lo, hi int64) int {
	for i, v := range src {
		if int64(v) < lo || int64(v) > hi {
			return i
		}
		o[i] = T(v)
	}
	return -1
}

func testNarrow[T int8 | uint8 | int16 | uint16](t *testing.T, r *rand.Rand, name string, bias int32, mask uint32, lo, hi int64) {
	edges := []int32{int32(lo), int32(hi), int32(lo) - 1, int32(hi) + 1, 0, math.MaxInt32, math.MinInt32, -1}
	for trial := 0; trial < 2000; trial++ {
		n := r.IntN(41)
		src := make([]int32, n)
		for i := range src {
			src[i] = int32(lo + r.Int64N(hi-lo+1))
		}
		if n > 0 && r.IntN(3) == 0 { // one or two values out of range, or on the edges
			for k := 0; k < 1+r.IntN(2); k++ {
				src[r.IntN(n)] = edges[r.IntN(len(edges))]
			}
		}
		got, want := make([]T, n), make([]T, n)
		g, w := narrow(got, src, bias, mask), narrowRef(want, src, lo, hi)
		if g != w {
			t.Fatalf("%s trial %d: narrow(%v) = %d, want %d", name, trial, src, g, w)
		}
		end := n
		if w >= 0 {
			end = w
		}
		for i := 0; i < end; i++ {
			if got[i] != want[i] {
				t.Fatalf("%s trial %d: value %d = %v, want %v", name, trial, i, got[i], want[i])
			}
		}
	}
}

// TestNarrow holds the branch-free narrowing of INT32 pages to 8- and
// 16-bit Arrow types to the plain loop: the same values, and the same first
// out-of-range index, over random lengths (blocks of 8 and tails) with
// values on and past the edges.
func TestNarrow(t *testing.T) {
	r := rand.New(rand.NewPCG(fastSeed(t), 13))
	testNarrow[int8](t, r, "int8", -math.MinInt8, math.MaxUint8, math.MinInt8, math.MaxInt8)
	testNarrow[uint8](t, r, "uint8", 0, math.MaxUint8, 0, math.MaxUint8)
	testNarrow[int16](t, r, "int16", -math.MinInt16, math.MaxUint16, math.MinInt16, math.MaxInt16)
	testNarrow[uint16](t, r, "uint16", 0, math.MaxUint16, 0, math.MaxUint16)
}

// TestConvertIntoNarrowError: a value out of range names itself, its index
// and the type, as ErrCorrupt.
func TestConvertIntoNarrowError(t *testing.T) {
	raw := make([]byte, 4*20)
	src := []int32{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 300, 0, 0}
	for i, v := range src {
		raw[4*i], raw[4*i+1], raw[4*i+2], raw[4*i+3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
	}
	err := convertInto(make([]byte, 20), arrow.UINT8, raw, parquet.Int32, 20)
	if err == nil || err.Error() != "value 300 at index 17 does not fit uint8: "+ErrCorrupt.Error() {
		t.Fatalf("err = %v", err)
	}
}

func benchNarrow(b *testing.B, f func(o []uint8, src []int32) int) {
	src := make([]int32, 1<<20)
	for i := range src {
		src[i] = int32(i % 251)
	}
	o := make([]uint8, len(src))
	b.SetBytes(int64(len(src)) * 4)
	for b.Loop() {
		if f(o, src) >= 0 {
			b.Fatal("out of range")
		}
	}
}

// BenchmarkNarrowUint8: INT32 page values (images, stored as UINT_8) into
// uint8, branch-free blocks against the plain loop; bytes are the INT32 input.
func BenchmarkNarrowUint8(b *testing.B) {
	b.Run("blocks", func(b *testing.B) {
		benchNarrow(b, func(o []uint8, src []int32) int { return narrow(o, src, 0, math.MaxUint8) })
	})
	b.Run("loop", func(b *testing.B) {
		benchNarrow(b, func(o []uint8, src []int32) int { return narrowRef(o, src, 0, math.MaxUint8) })
	})
}
