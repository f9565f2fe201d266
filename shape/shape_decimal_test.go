package shape

import (
	"math/big"
	mrand "math/rand"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/decimal256"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// TestDecimalToFloat32: a decimal column cast to float32 gets its scale
// applied (1.00 stored as 100 is 1.0, never 100), nulls kept.
func TestDecimalToFloat32(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	d128 := &arrow.Decimal128Type{Precision: 9, Scale: 2}
	b := array.NewDecimal128Builder(mem, d128)
	b.AppendValues([]decimal128.Num{decimal128.FromI64(100), decimal128.FromI64(-250), decimal128.FromI64(0), decimal128.FromI64(314)},
		[]bool{true, true, false, true})
	a128 := b.NewArray()
	b.Release()
	d256 := &arrow.Decimal256Type{Precision: 40, Scale: 3}
	b2 := array.NewDecimal256Builder(mem, d256)
	b2.AppendValues([]decimal256.Num{decimal256.FromI64(1500), decimal256.FromI64(-1), decimal256.FromI64(0), decimal256.FromI64(7)}, nil)
	a256 := b2.NewArray()
	b2.Release()
	for _, c := range []struct {
		arr  arrow.Array
		want []float32
	}{{a128, []float32{1, -2.5, 0, 3.14}}, {a256, []float32{1.5, -0.001, 0, 0.007}}} {
		to, conv, err := castTargetFor(c.arr.DataType(), Float32)
		if err != nil || !conv {
			t.Fatalf("castTargetFor(%s, float32) = %v, %v", c.arr.DataType(), conv, err)
		}
		got, err := castArray("price", c.arr, to, mem)
		if err != nil {
			t.Fatal(err)
		}
		f := got.(*array.Float32)
		for i, w := range c.want {
			if c.arr.IsNull(i) != f.IsNull(i) || (!f.IsNull(i) && f.Value(i) != w) {
				t.Errorf("%s row %d = %v (null %v), want %v (null %v)", c.arr.DataType(), i, f.Value(i), f.IsNull(i), w, c.arr.IsNull(i))
			}
		}
		got.Release()
		c.arr.Release()
	}
}

// nearest is the float64 and float32 nearest to unscaled × 10^-scale,
// computed exactly with math/big.
func nearest(unscaled *big.Int, scale int32) (float64, float32) {
	r := new(big.Rat).SetInt(unscaled)
	p := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(abs32(scale))), nil)
	if scale >= 0 {
		r.Quo(r, new(big.Rat).SetInt(p))
	} else {
		r.Mul(r, new(big.Rat).SetInt(p))
	}
	f64, _ := r.Float64()
	f32, _ := r.Float32()
	return f64, f32
}

func abs32(v int32) int32 {
	if v < 0 {
		return -v
	}
	return v
}

// TestDecimalToFloatNearest: a decimal cast to float64 (or float32) is the
// float nearest to its value (the scale applied), for random decimals of
// every magnitude a decimal128/decimal256 holds, fast path (small unscaled
// values, small scales) and general path alike; 0.3 is 0.3, not
// 0.30000000000000004.
func TestDecimalToFloatNearest(t *testing.T) {
	seed := shapeSeed(t)
	rng := rand.New(rand.NewPCG(seed, 4))
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	for _, typ := range []arrow.DataType{
		&arrow.Decimal128Type{Precision: 1, Scale: 1}, &arrow.Decimal128Type{Precision: 9, Scale: 2},
		&arrow.Decimal128Type{Precision: 18, Scale: 4}, &arrow.Decimal128Type{Precision: 38, Scale: 10},
		&arrow.Decimal128Type{Precision: 38, Scale: 37}, &arrow.Decimal128Type{Precision: 20, Scale: -3},
		&arrow.Decimal256Type{Precision: 38, Scale: 5}, &arrow.Decimal256Type{Precision: 76, Scale: 40},
	} {
		prec, scale := decimalPrecisionScale(typ)
		var want64 []float64
		var want32 []float32
		var vals []*big.Int
		limit := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(prec)), nil)
		for i := 0; i < 400; i++ {
			// Magnitudes spread over the whole precision: a random number
			// of digits, then random digits.
			digits := 1 + rng.IntN(int(prec))
			v := new(big.Int).Rand(rand2big(rng), new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(digits)), nil))
			if i == 0 {
				v.SetInt64(3) // 0.3 at scale 1
			}
			if v.Cmp(limit) >= 0 {
				v.Sub(limit, big.NewInt(1))
			}
			if rng.IntN(2) == 0 {
				v.Neg(v)
			}
			vals = append(vals, v)
			f64, f32 := nearest(v, scale)
			want64, want32 = append(want64, f64), append(want32, f32)
		}
		var arr arrow.Array
		switch tt := typ.(type) {
		case *arrow.Decimal128Type:
			b := array.NewDecimal128Builder(mem, tt)
			for _, v := range vals {
				b.Append(decimal128.FromBigInt(v))
			}
			arr = b.NewArray()
			b.Release()
		case *arrow.Decimal256Type:
			b := array.NewDecimal256Builder(mem, tt)
			for _, v := range vals {
				b.Append(decimal256.FromBigInt(v))
			}
			arr = b.NewArray()
			b.Release()
		}
		for _, d := range []DType{Float64, Float32} {
			to, conv, err := castTargetFor(typ, d)
			if err != nil || !conv {
				t.Fatalf("castTargetFor(%s, %s) = %v, %v", typ, d, conv, err)
			}
			got, err := castArray("price", arr, to, mem)
			if err != nil {
				t.Fatal(err)
			}
			for i, v := range vals {
				var g, w any
				if d == Float64 {
					g, w = got.(*array.Float64).Value(i), want64[i]
				} else {
					g, w = got.(*array.Float32).Value(i), want32[i]
				}
				if g != w {
					t.Errorf("seed %d: %s %s of %s (scale %d): %v, the nearest is %v", seed, typ, d, v, scale, g, w)
				}
			}
			got.Release()
		}
		arr.Release()
	}
}

func rand2big(rng *rand.Rand) *mrand.Rand { return mrand.New(mrand.NewSource(int64(rng.Uint64()))) }

func decimalPrecisionScale(t arrow.DataType) (int32, int32) {
	switch tt := t.(type) {
	case *arrow.Decimal128Type:
		return tt.Precision, tt.Scale
	case *arrow.Decimal256Type:
		return tt.Precision, tt.Scale
	}
	return 0, 0
}

// TestDecimalToFloat32Range: a decimal whose values may exceed float32's
// range (more than 38 digits before the point) is refused when the column is
// planned, not turned into infinities; float64 holds every decimal256.
func TestDecimalToFloat32Range(t *testing.T) {
	if _, _, err := castTargetFor(&arrow.Decimal256Type{Precision: 60, Scale: 10}, Float32); err == nil || !strings.Contains(err.Error(), "float64") {
		t.Errorf("decimal256(60, 10) to float32: %v, want a refusal that names float64", err)
	}
	if _, _, err := castTargetFor(&arrow.Decimal256Type{Precision: 76, Scale: 0}, Float64); err != nil {
		t.Errorf("decimal256(76, 0) to float64: %v", err)
	}
	if _, _, err := castTargetFor(arrow.BinaryTypes.String, Float64); err == nil {
		t.Errorf("string to float64: no error")
	}
}
