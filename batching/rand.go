package batching

import "math/bits"

// The random numbers of the plan are produced by the algorithms below, never by
// math/rand, so that the order of rows depends only on the seed, not on the Go
// version, and a port to another language reproduces it bit for bit. All
// arithmetic is on unsigned 64-bit integers, modulo 2^64.
//
// SplitMix64 (Steele, Lea, Flood 2014), one step from state x:
//
//	x += 0x9e3779b97f4a7c15
//	z := x
//	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
//	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
//	return z ^ (z >> 31)
//
// Seed derivation, deriveSeed(seed, w1, ..., wn): h := seed; for each word w in
// order, h = splitmix64First(h ^ w), where splitmix64First(v) is the first output
// of SplitMix64 started from state v. The words are:
//
//	row group order of epoch e:     deriveSeed(seed, 1, e)
//	window k of stream d, epoch e:  deriveSeed(seed, 2, e, d, k)
//
// (epoch, stream and window numbers are converted to uint64 first).
//
// Generator: xoshiro256** (Blackman, Vigna 2018). Its four state words s0..s3 are
// the first four outputs of SplitMix64 started from the derived seed. One step:
//
//	result := rotl(s1*5, 7) * 9
//	t := s1 << 17
//	s2 ^= s0; s3 ^= s1; s1 ^= s2; s0 ^= s3
//	s2 ^= t
//	s3 = rotl(s3, 45)
//	return result
//
// Bounded integers in [0, n): Lemire's multiply-shift with rejection ("Fast
// random integer generation in an interval", 2019), which is unbiased:
//
//	x := next(); (hi, lo) := 128-bit product x*n
//	if lo < n {
//	    t := (-n) % n        // (2^64 - n) mod n
//	    while lo < t { x := next(); (hi, lo) := x*n }
//	}
//	return hi
//
// Permutation of n items: start from the identity p = [0, 1, ..., n-1]; for i
// from n-1 down to 1: j := bounded(i+1); swap p[i], p[j] (Fisher-Yates, Durstenfeld
// form). n of 0 or 1 draws nothing.

const (
	splitmixGamma = 0x9e3779b97f4a7c15

	domainRowGroups = 1
	domainWindow    = 2
	domainMixture   = 3
	domainSource    = 4
)

// splitMix64 is the SplitMix64 generator.
type splitMix64 struct{ x uint64 }

func (s *splitMix64) next() uint64 {
	s.x += splitmixGamma
	z := s.x
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// deriveSeed folds words into seed with SplitMix64, as documented above.
func deriveSeed(seed uint64, words ...uint64) uint64 {
	h := seed
	for _, w := range words {
		s := splitMix64{x: h ^ w}
		h = s.next()
	}
	return h
}

// xoshiro256ss is the xoshiro256** generator.
type xoshiro256ss struct{ s [4]uint64 }

// newXoshiro seeds xoshiro256** with the first four SplitMix64 outputs from seed.
func newXoshiro(seed uint64) *xoshiro256ss {
	sm := splitMix64{x: seed}
	var g xoshiro256ss
	for i := range g.s {
		g.s[i] = sm.next()
	}
	return &g
}

func (g *xoshiro256ss) next() uint64 {
	s := &g.s
	result := bits.RotateLeft64(s[1]*5, 7) * 9
	t := s[1] << 17
	s[2] ^= s[0]
	s[3] ^= s[1]
	s[1] ^= s[2]
	s[0] ^= s[3]
	s[2] ^= t
	s[3] = bits.RotateLeft64(s[3], 45)
	return result
}

// bounded returns an unbiased integer in [0, n) by Lemire's method; n > 0.
func (g *xoshiro256ss) bounded(n uint64) uint64 {
	hi, lo := bits.Mul64(g.next(), n)
	if lo < n {
		t := -n % n
		for lo < t {
			hi, lo = bits.Mul64(g.next(), n)
		}
	}
	return hi
}

// permutation returns a Fisher-Yates permutation of [0, n) drawn from a
// xoshiro256** generator seeded with seed.
func permutation(seed uint64, n int) []int32 {
	p := make([]int32, n)
	for i := range p {
		p[i] = int32(i)
	}
	if n < 2 {
		return p
	}
	g := newXoshiro(seed)
	for i := n - 1; i > 0; i-- {
		j := g.bounded(uint64(i + 1))
		p[i], p[j] = p[j], p[i]
	}
	return p
}
