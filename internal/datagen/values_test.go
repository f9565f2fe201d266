package datagen

import (
	"math"
	"testing"
)

// SplitMix64 seeded with 0 yields 0xE220A8397B1DCDAF first: its state advances
// by the golden gamma before mixing. This pins mix64 to the published algorithm,
// which the Python side may port.
func TestMix64MatchesSplitMix64(t *testing.T) {
	for _, tc := range []struct {
		state uint64
		want  uint64
	}{
		{golden, 0xE220A8397B1DCDAF},
		{0x3C6EF372FE94F82A, 0x6E789E6AA1B965F4},
		{0xDAA66D2C7DDF743F, 0x06C45D188009454F},
	} {
		if got := mix64(tc.state); got != tc.want {
			t.Errorf("mix64(%#x) = %#x, want %#x", tc.state, got, tc.want)
		}
	}
}

func TestFeatureRangeAndExactness(t *testing.T) {
	const rows, f = 2000, 64
	var sum float64
	for id := int64(0); id < rows; id++ {
		for j := 0; j < f; j++ {
			v := Feature(7, id, j)
			if v < -1 || v >= 1 {
				t.Fatalf("Feature(7, %d, %d) = %v, want in [-1, 1)", id, j, v)
			}
			if scaled := float64(v) * (1 << 23); scaled != math.Trunc(scaled) {
				t.Fatalf("Feature(7, %d, %d) = %v, not a multiple of 2^-23", id, j, v)
			}
			sum += float64(v)
		}
	}
	// Uniform on [-1, 1): mean 0, standard error sqrt(1/3)/sqrt(n) ~ 0.0016.
	if mean := sum / (rows * f); math.Abs(mean) > 0.01 {
		t.Errorf("mean feature = %v, want about 0", mean)
	}
}

func TestVectorFormsMatchScalarForms(t *testing.T) {
	for _, seed := range []uint64{0, 1, math.MaxUint64} {
		for _, id := range []int64{0, 1, 12345, 1 << 40} {
			feats := make([]float32, 37)
			Features(seed, id, feats)
			for j, v := range feats {
				if w := Feature(seed, id, j); v != w {
					t.Errorf("Features(%d, %d)[%d] = %v, Feature = %v", seed, id, j, v, w)
				}
			}
			pix := make([]uint8, 3*5*3) // not a multiple of 8
			Pixels(seed, id, pix)
			for i, v := range pix {
				if w := Pixel(seed, id, i); v != w {
					t.Errorf("Pixels(%d, %d)[%d] = %v, Pixel = %v", seed, id, i, v, w)
				}
			}
			toks := Tokens(seed, id, 0, 50)
			if len(toks) != TokenLen(seed, id, 0, 50) {
				t.Errorf("len(Tokens(%d, %d, 0, 50)) = %d, TokenLen = %d", seed, id, len(toks), TokenLen(seed, id, 0, 50))
			}
			for k, v := range toks {
				if w := Token(seed, id, k); v != w {
					t.Errorf("Tokens(%d, %d)[%d] = %v, Token = %v", seed, id, k, v, w)
				}
			}
		}
	}
}

func TestRanges(t *testing.T) {
	seenLen := map[int]bool{}
	labels := map[int32]bool{}
	for id := int64(0); id < 20000; id++ {
		if l := Label(3, id); l < 0 || l >= LabelClasses {
			t.Fatalf("Label(3, %d) = %d, want [0, %d)", id, l, LabelClasses)
		} else {
			labels[l] = true
		}
		n := TokenLen(3, id, 2, 5)
		if n < 2 || n > 5 {
			t.Fatalf("TokenLen(3, %d, 2, 5) = %d, want [2, 5]", id, n)
		}
		seenLen[n] = true
		if tok := Token(3, id, int(id%7)); tok < 0 || tok >= TokenVocab {
			t.Fatalf("Token(3, %d, %d) = %d, want [0, %d)", id, id%7, tok, TokenVocab)
		}
	}
	if len(seenLen) != 4 {
		t.Errorf("TokenLen(3, id, 2, 5) over 20000 ids took %d distinct values, want 4", len(seenLen))
	}
	if len(labels) != LabelClasses {
		t.Errorf("Label over 20000 ids took %d distinct values, want %d", len(labels), LabelClasses)
	}
	if got := TokenLen(3, 9, 4, 4); got != 4 {
		t.Errorf("TokenLen(3, 9, 4, 4) = %d, want 4", got)
	}
	if got := TokenLen(3, 9, 4, 1); got != 4 {
		t.Errorf("TokenLen(3, 9, 4, 1) = %d, want 4 (max < min)", got)
	}
}

// Different seeds, rows and columns must give independent values.
func TestSeedAndRowSensitivity(t *testing.T) {
	same := 0
	for id := int64(0); id < 1000; id++ {
		if Feature(1, id, 0) == Feature(2, id, 0) {
			same++
		}
		if Feature(1, id, 0) == Feature(1, id+1, 0) {
			same++
		}
		if Feature(1, id, 0) == Feature(1, id, 1) {
			same++
		}
	}
	if same > 3 {
		t.Errorf("%d of 3000 feature pairs with different seed, row or column were equal", same)
	}
}
