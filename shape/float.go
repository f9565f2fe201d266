package shape

// Rounding float32 and float64 to the narrow float formats, bit by bit.

import (
	"math"
)

// bfloat16FromBits rounds the float32 with bits b to bfloat16 (round to nearest,
// ties to even; overflow gives infinity). A NaN stays a NaN of the same sign,
// made quiet, keeping the top of its payload.
func bfloat16FromBits(b uint32) uint16 {
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x0040
	}
	return uint16((b + 0x7fff + (b>>16)&1) >> 16)
}

// float16FromBits rounds the float32 with bits x to IEEE half precision (round
// to nearest, ties to even, subnormals kept, overflow gives infinity; a NaN
// stays a quiet NaN of the same sign).
func float16FromBits(x uint32) uint16 {
	sign := uint16(x>>16) & 0x8000
	a := x & 0x7fffffff
	switch {
	case a > 0x7f800000: // NaN
		return sign | 0x7e00 | uint16(a>>13)&0x1ff
	case a >= 0x477ff000: // >= 65520: rounds past the largest half, 65504
		return sign | 0x7c00
	case a >= 0x38800000: // >= 2^-14: normal half
		a -= (127 - 15) << 23
		return sign | uint16((a+0xfff+(a>>13)&1)>>13)
	case a < 0x33000000: // < 2^-25: rounds to zero
		return sign
	default: // subnormal half: units of 2^-24
		e := a >> 23
		m := a&0x7fffff | 0x800000
		shift := 126 - e // 14..24
		q := m >> shift
		rem := m & (1<<shift - 1)
		half := uint32(1) << (shift - 1)
		if rem > half || rem == half && q&1 == 1 {
			q++
		}
		return sign | uint16(q)
	}
}

// float32RoundOdd converts x to float32 rounding to odd (truncate, then set the
// last bit if inexact). Rounding that result to a format with at most 22
// significant bits (bfloat16, float16) is then correctly rounded: no double
// rounding error.
func float32RoundOdd(x float64) uint32 {
	if x != x {
		b := math.Float64bits(x)
		return uint32(b>>32)&0x80000000 | 0x7fc00000 | uint32(b>>29)&0x3fffff
	}
	f := float32(x)
	b := math.Float32bits(f)
	if float64(f) != x {
		if math.Abs(float64(f)) > math.Abs(x) {
			b-- // one step toward zero: truncation
		}
		b |= 1
	}
	return b
}
