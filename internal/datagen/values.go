package datagen

// Every value in a generated dataset is a pure function of the seed and the
// global row id. The functions below define them; they are exported so that
// tests elsewhere (loader, batching, the Python client) can recompute any value
// without reading a file back. The scheme is simple enough to port:
//
//	mix(x)                = the SplitMix64 finalizer (see mix64)
//	rowBase(seed, tag, id) = mix(mix(seed ^ tag) ^ uint64(id))
//	element k of a row    = mix(rowBase + k*golden), golden = 0x9E3779B97F4A7C15
//
// with one tag per column (tagLabel, tagFeature, ...).

// Column value ranges.
const (
	// LabelClasses is the number of distinct labels: Label returns [0, LabelClasses).
	LabelClasses = 1000
	// TokenVocab is the vocabulary size: Token returns [0, TokenVocab).
	TokenVocab = 32000
)

// Per-column tags, so that columns of the same row are independent.
const (
	tagLabel    uint64 = 0x6c6162656c000001 // "label"
	tagFeature  uint64 = 0x6665617475720002 // "featur"
	tagTokenLen uint64 = 0x746f6b6c656e0003 // "toklen"
	tagToken    uint64 = 0x746f6b656e000004 // "token"
	tagPixel    uint64 = 0x706978656c000005 // "pixel"
	golden      uint64 = 0x9E3779B97F4A7C15
)

// mix64 is the SplitMix64 output function: a bijective 64-bit mixer.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xBF58476D1CE4E5B9
	x ^= x >> 27
	x *= 0x94D049BB133111EB
	x ^= x >> 31
	return x
}

// rowBase is the per-row, per-column hash that every value of that cell derives from.
func rowBase(seed, tag uint64, id int64) uint64 {
	return mix64(mix64(seed^tag) ^ uint64(id))
}

// Label is the value of column `label` in row id: in [0, LabelClasses).
func Label(seed uint64, id int64) int32 {
	return int32(rowBase(seed, tagLabel, id) % LabelClasses)
}

// featureFromBits maps a 64-bit hash to a float32 in [-1, 1) that is exactly
// representable: a multiple of 2^-23 taken from the top 24 bits.
func featureFromBits(h uint64) float32 {
	return float32(int32(h>>40)-(1<<23)) * (1.0 / (1 << 23))
}

// Feature is element j of the `features` vector of row id: in [-1, 1), a
// multiple of 2^-23, so it prints and parses exactly.
func Feature(seed uint64, id int64, j int) float32 {
	return featureFromBits(mix64(rowBase(seed, tagFeature, id) + uint64(j)*golden))
}

// Features fills dst with the `features` vector of row id (len(dst) elements);
// it is the vectorised form of Feature.
func Features(seed uint64, id int64, dst []float32) {
	base := rowBase(seed, tagFeature, id)
	for j := range dst {
		dst[j] = featureFromBits(mix64(base + uint64(j)*golden))
	}
}

// TokenLen is the length of the `tokens` list of row id when lengths are drawn
// from [minLen, maxLen] (both inclusive). maxLen < minLen is treated as maxLen == minLen.
func TokenLen(seed uint64, id int64, minLen, maxLen int) int {
	if maxLen <= minLen {
		return minLen
	}
	span := uint64(maxLen-minLen) + 1
	return minLen + int(rowBase(seed, tagTokenLen, id)%span)
}

// Token is element k of the `tokens` list of row id: in [0, TokenVocab). It does
// not depend on the list's length, so a longer list extends a shorter one.
func Token(seed uint64, id int64, k int) int32 {
	return int32(mix64(rowBase(seed, tagToken, id)+uint64(k)*golden) % TokenVocab)
}

// Tokens is the `tokens` list of row id when lengths are drawn from [minLen, maxLen].
func Tokens(seed uint64, id int64, minLen, maxLen int) []int32 {
	out := make([]int32, TokenLen(seed, id, minLen, maxLen))
	fillTokens(out, seed, id)
	return out
}

// fillTokens writes the first len(dst) tokens of row id into dst.
func fillTokens(dst []int32, seed uint64, id int64) {
	base := rowBase(seed, tagToken, id)
	for k := range dst {
		dst[k] = int32(mix64(base+uint64(k)*golden) % TokenVocab)
	}
}

// Pixel is byte i of the row-major [H, W, C] `image` tensor of row id, where
// i = (y*W + x)*C + c. Eight consecutive pixels share one hash.
func Pixel(seed uint64, id int64, i int) uint8 {
	h := mix64(rowBase(seed, tagPixel, id) + uint64(i/8)*golden)
	return uint8(h >> (8 * uint(i%8)))
}

// Pixels fills dst with the flattened `image` tensor of row id (len(dst) = H*W*C);
// it is the vectorised form of Pixel.
func Pixels(seed uint64, id int64, dst []uint8) {
	base := rowBase(seed, tagPixel, id)
	for w := 0; w*8 < len(dst); w++ {
		h := mix64(base + uint64(w)*golden)
		for b := 0; b < 8 && w*8+b < len(dst); b++ {
			dst[w*8+b] = uint8(h >> (8 * uint(b)))
		}
	}
}
