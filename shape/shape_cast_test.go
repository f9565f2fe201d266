package shape

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// bf16Reference rounds f to bfloat16 the slow, obvious way: of the two
// bfloat16 neighbours of f (its bits truncated, and one bfloat16 step further
// from zero), take the nearer; on a tie, the one with an even last bit. A
// neighbour past the largest finite value stands for 2^128, as IEEE 754
// overflow rounding says. NaN is not handled here.
func bf16Reference(f float32) uint16 {
	b := math.Float32bits(f)
	if math.IsInf(float64(f), 0) {
		return uint16(b >> 16)
	}
	lo := b &^ 0xffff
	hi := lo + 0x10000
	x := math.Abs(float64(f))
	vlo := math.Abs(float64(math.Float32frombits(lo)))
	vhi := math.Ldexp(1, 128)
	if hi&0x7fffffff != 0x7f800000 {
		vhi = math.Abs(float64(math.Float32frombits(hi)))
	}
	dlo, dhi := x-vlo, vhi-x // exact: Sterbenz
	switch {
	case dlo < dhi:
		return uint16(lo >> 16)
	case dhi < dlo:
		return uint16(hi >> 16)
	case (lo>>16)&1 == 0:
		return uint16(lo >> 16)
	}
	return uint16(hi >> 16)
}

// roundReference rounds x to a binary format with `mant` fraction bits, least
// normal exponent minExp and largest finite value maxFinite, round to nearest
// even, overflow to infinity: scale by the quantum of x's binade and round the
// integer with math.RoundToEven.
func roundReference(x float64, mant, minExp int, maxFinite float64) float64 {
	if x == 0 || math.IsInf(x, 0) || math.IsNaN(x) {
		return x
	}
	_, e := math.Frexp(x)
	e-- // |x| in [2^e, 2^(e+1))
	e = max(e, minExp)
	q := math.Ldexp(1, e-mant)
	r := math.RoundToEven(x/q) * q
	if math.Abs(r) > maxFinite {
		return math.Copysign(math.Inf(1), x)
	}
	if r == 0 {
		return math.Copysign(0, x)
	}
	return r
}

var (
	bf16Max = math.Ldexp(2-1.0/128, 127)
	f16Max  = 65504.0
)

func bf16Value(h uint16) float64 { return float64(math.Float32frombits(uint32(h) << 16)) }

// f16Value decodes IEEE half bits independently of the code under test.
func f16Value(h uint16) float64 {
	s := 1.0
	if h&0x8000 != 0 {
		s = -1
	}
	e, m := int(h>>10)&0x1f, float64(h&0x3ff)
	switch e {
	case 0:
		return s * math.Ldexp(m, -24)
	case 0x1f:
		if m != 0 {
			return math.NaN()
		}
		return s * math.Inf(1)
	}
	return s * math.Ldexp(1024+m, e-25)
}

func sameFloat(a, b float64) bool {
	if math.IsNaN(a) || math.IsNaN(b) {
		return math.IsNaN(a) && math.IsNaN(b)
	}
	return a == b && math.Signbit(a) == math.Signbit(b)
}

func TestBFloat16Vectors(t *testing.T) {
	tests := []struct {
		in   float32
		want uint16
	}{
		{1.0, 0x3F80},
		{float32(math.Pi), 0x4049},
		{1 + 1.0/256, 0x3F80},               // tie, even stays
		{1 + 3.0/256, 0x3F82},               // tie, odd rounds up
		{1 + 1.0/256 + 1.0/(1<<20), 0x3F81}, // just above the tie
		{float32(math.Inf(1)), 0x7F80},
		{float32(math.Inf(-1)), 0xFF80},
		{float32(math.Copysign(0, -1)), 0x8000},
		{0, 0x0000},
		{math.MaxFloat32, 0x7F80}, // rounds past the largest bfloat16
		{-2, 0xC000},
		{math.SmallestNonzeroFloat32, 0x0000},
	}
	for _, tt := range tests {
		if got := bfloat16FromBits(math.Float32bits(tt.in)); got != tt.want {
			t.Errorf("bfloat16FromBits(%v) = %#04x, want %#04x", tt.in, got, tt.want)
		}
		if got := bf16Reference(tt.in); got != tt.want {
			t.Errorf("bf16Reference(%v) = %#04x, want %#04x (the reference disagrees with the hand-checked vector)", tt.in, got, tt.want)
		}
	}
	for _, nan := range []uint32{0x7FC00000, 0x7F800001, 0xFF800001, 0x7FBFFFFF, 0xFFC12345} {
		got := bfloat16FromBits(nan)
		if got&0x7F80 != 0x7F80 || got&0x7F == 0 || got&0x40 == 0 || got&0x8000 != uint16(nan>>16)&0x8000 {
			t.Errorf("bfloat16FromBits(NaN %#08x) = %#04x, want a quiet NaN of the same sign", nan, got)
		}
	}
}

func TestBFloat16MatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(shapeSeed(t), 1))
	check := func(b uint32) {
		f := math.Float32frombits(b)
		if f != f {
			return
		}
		if got, want := bfloat16FromBits(b), bf16Reference(f); got != want {
			t.Fatalf("bfloat16FromBits(%#08x = %v) = %#04x, want %#04x", b, f, got, want)
		}
	}
	for i := 0; i < 1<<20; i++ {
		b := rng.Uint32()
		check(b)
		hi := b &^ 0xffff
		for _, low := range []uint32{0x7fff, 0x8000, 0x8001, 0xffff, 0} { // around ties
			check(hi | low)
		}
	}
}

func TestFloat16Vectors(t *testing.T) {
	tests := []struct {
		in   float32
		want uint16
	}{
		{1, 0x3C00},
		{0.1, 0x2E66},
		{-2, 0xC000},
		{65504, 0x7BFF},
		{65519, 0x7BFF},
		{65520, 0x7C00},
		{float32(math.Ldexp(1, -24)), 0x0001},
		{float32(math.Ldexp(1, -25)), 0x0000},   // tie to even zero
		{float32(math.Ldexp(1.5, -25)), 0x0001}, // above the tie
		{float32(math.Ldexp(3, -25)), 0x0002},   // tie 1.5 units -> 2
		{float32(math.Ldexp(1, -14)), 0x0400},   // least normal
		{float32(math.Ldexp(1023, -24)), 0x03FF},
		{float32(math.Inf(-1)), 0xFC00},
		{float32(math.Copysign(0, -1)), 0x8000},
	}
	for _, tt := range tests {
		if got := float16FromBits(math.Float32bits(tt.in)); got != tt.want {
			t.Errorf("float16FromBits(%v) = %#04x, want %#04x", tt.in, got, tt.want)
		}
	}
	if got := float16FromBits(0x7FC00000); got&0x7C00 != 0x7C00 || got&0x3FF == 0 {
		t.Errorf("float16FromBits(NaN) = %#04x, want a NaN", got)
	}
}

func TestFloat16AndFromFloat64MatchReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(shapeSeed(t), 2))
	for i := 0; i < 1<<19; i++ {
		// float32 -> float16 over the interesting binades.
		f := float32(math.Ldexp(rng.Float64()+0.5, rng.IntN(48)-30))
		if rng.IntN(2) == 0 {
			f = -f
		}
		if i%4 == 0 {
			f = math.Float32frombits(rng.Uint32())
		}
		if f == f {
			got, want := f16Value(float16FromBits(math.Float32bits(f))), roundReference(float64(f), 10, -14, f16Max)
			if !sameFloat(got, want) {
				t.Fatalf("float16FromBits(%v) = %v, want %v", f, got, want)
			}
		}

		// float64 -> bfloat16 and float16 directly: no double rounding.
		x := math.Ldexp(rng.Float64()+0.5, rng.IntN(290)-150)
		if rng.IntN(2) == 0 {
			x = -x
		}
		if i%8 == 0 { // a bfloat16 tie point nudged by less than float32 can see
			x = float64(math.Float32frombits(rng.Uint32()&^0xffff|0x8000)) * (1 + math.Ldexp(float64(rng.IntN(3)-1), -40))
		}
		if math.IsNaN(x) || math.IsInf(x, 0) {
			continue
		}
		if got, want := bf16Value(bfloat16FromBits(float32RoundOdd(x))), roundReference(x, 7, -126, bf16Max); !sameFloat(got, want) {
			t.Fatalf("bfloat16(float64 %v) = %v, want %v", x, got, want)
		}
		if got, want := f16Value(float16FromBits(float32RoundOdd(x))), roundReference(x, 10, -14, f16Max); !sameFloat(got, want) {
			t.Fatalf("float16(float64 %v) = %v, want %v", x, got, want)
		}
	}
	// The double rounding trap by hand: 1 + 2^-8 + 2^-30 rounds to float32
	// 1 + 2^-8 (a bfloat16 tie, which would go down to 1.0), but is above the
	// tie: bfloat16 0x3F81.
	if got := bfloat16FromBits(float32RoundOdd(1 + math.Ldexp(1, -8) + math.Ldexp(1, -30))); got != 0x3F81 {
		t.Errorf("bfloat16(1+2^-8+2^-30) = %#04x, want 0x3f81", got)
	}
}

func TestCastArray(t *testing.T) {
	i64, i32, u64, f32, f64 := arrow.PrimitiveTypes.Int64, arrow.PrimitiveTypes.Int32, arrow.PrimitiveTypes.Uint64, arrow.PrimitiveTypes.Float32, arrow.PrimitiveTypes.Float64
	tests := []struct {
		name string
		in   arrow.Array
		to   DType
		want string // fmt of the output values; "" for errors
		err  []string
	}{
		{"i64->i32", shapePrim(i64, []int64{0, math.MaxInt32, math.MinInt32, -5}), Int32, "[0 2147483647 -2147483648 -5]", nil},
		{"i64->i32 over", shapePrim(i64, []int64{0, 1, 2, math.MaxInt32 + 1}), Int32, "", []string{`"i64->i32 over"`, "row 3", "2147483648", "int32"}},
		{"i64->i32 under", shapePrim(i64, []int64{math.MinInt32 - 1}), Int32, "", []string{"row 0", "-2147483649"}},
		{"i32->i16", shapePrim(i32, []int32{-32768, 32767}), Int16, "[-32768 32767]", nil},
		{"i32->i8 over", shapePrim(i32, []int32{1, 128}), Int8, "", []string{"row 1", "128"}},
		{"i32->u16 neg", shapePrim(i32, []int32{5, -1}), Uint16, "", []string{"row 1", "-1", "uint16"}},
		{"u64->u8", shapePrim(u64, []uint64{0, 255}), Uint8, "[0 255]", nil},
		{"u64->u8 over", shapePrim(u64, []uint64{256}), Uint8, "", []string{"row 0", "256"}},
		{"u64->i32 huge", shapePrim(u64, []uint64{1 << 63}), Int32, "", []string{"9223372036854775808"}},
		{"i64->i8 null garbage", shapePrim(i64, []int64{1, 1000, -3}, 1), Int8, "[1 0 -3]", nil},
		{"i64->f32", shapePrim(i64, []int64{-1, 1 << 40, 3}), Float32, "[-1 1.0995116e+12 3]", nil},
		{"f64->f32", shapePrim(f64, []float64{0.1, -1e300, 1.5}), Float32, "[0.1 -Inf 1.5]", nil},
		{"f32->bf16", shapePrim(f32, []float32{1, float32(math.Pi)}), BFloat16, "[16256 16457]", nil},
		{"f32->f16", shapePrim(f32, []float32{1, 0.1, 70000}), Float16, "[1 0.0999755859375 +Inf]", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
			defer mem.AssertSize(t, 0)
			defer tt.in.Release()
			to, cast, err := castTargetFor(tt.in.DataType(), tt.to)
			if err != nil || !cast {
				t.Fatalf("castTargetFor(%s, %s) = %v, %v", tt.in.DataType(), tt.to, cast, err)
			}
			out, err := castArray(tt.name, tt.in, to, mem)
			if tt.err != nil {
				wantErr(t, fmt.Sprintf("castArray(%s)", tt.name), err, ErrOverflow, tt.err...)
				return
			}
			if err != nil {
				t.Fatalf("castArray(%s) = %v", tt.name, err)
			}
			defer out.Release()
			var got string
			switch a := out.(type) {
			case *array.Float16:
				vals := make([]float64, a.Len())
				for i, v := range a.Values() {
					vals[i] = f16Value(v.Uint16())
				}
				got = fmt.Sprint(vals)
			case *array.Int8:
				got = fmt.Sprint(a.Int8Values())
			case *array.Int16:
				got = fmt.Sprint(a.Int16Values())
			case *array.Int32:
				got = fmt.Sprint(a.Int32Values())
			case *array.Uint8:
				got = fmt.Sprint(a.Uint8Values())
			case *array.Uint16:
				got = fmt.Sprint(a.Uint16Values())
			case *array.Float32:
				got = fmt.Sprint(a.Float32Values())
			default:
				t.Fatalf("unexpected output %T", out)
			}
			if got != tt.want {
				t.Errorf("castArray(%s) = %s, want %s", tt.name, got, tt.want)
			}
			if out.NullN() != tt.in.NullN() {
				t.Errorf("castArray(%s) has %d nulls, want %d", tt.name, out.NullN(), tt.in.NullN())
			}
		})
	}
}

func TestCastSlicedWithNulls(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	full := shapePrim(arrow.PrimitiveTypes.Int64, []int64{100, 1, 2, 300, 4, 5, 6, 7, 8, 9, 10}, 3, 9)
	defer full.Release()
	sl := array.NewSlice(full, 2, 11) // offset 2: 2, null(300), 4, ..., null(9), 10
	defer sl.Release()
	to, _, _ := castTargetFor(sl.DataType(), Int8)
	out, err := castArray("s", sl, to, mem)
	if err != nil {
		t.Fatalf("castArray(sliced) = %v", err)
	}
	defer out.Release()
	a := out.(*array.Int8)
	for i := 0; i < a.Len(); i++ {
		if a.IsNull(i) != sl.IsNull(i) {
			t.Errorf("row %d null = %v, want %v", i, a.IsNull(i), sl.IsNull(i))
		}
		if !a.IsNull(i) && int64(a.Value(i)) != sl.(*array.Int64).Value(i) {
			t.Errorf("row %d = %d, want %d", i, a.Value(i), sl.(*array.Int64).Value(i))
		}
	}
}

func TestFillBytes(t *testing.T) {
	tests := []struct {
		dt   DType
		src  arrow.DataType
		fill Fill
		ok   bool
	}{
		{Keep, arrow.PrimitiveTypes.Int8, FillInt(-128), true},
		{Keep, arrow.PrimitiveTypes.Int8, FillInt(128), false},
		{Keep, arrow.PrimitiveTypes.Uint8, FillInt(-1), false},
		{Keep, arrow.PrimitiveTypes.Int32, FillFloat(2), true},
		{Keep, arrow.PrimitiveTypes.Int32, FillFloat(2.5), false},
		{Keep, arrow.PrimitiveTypes.Uint64, FillUint(math.MaxUint64), true},
		{Float16, arrow.PrimitiveTypes.Float32, FillFloat(1e6), false},
		{Float16, arrow.PrimitiveTypes.Float32, FillFloat(math.Inf(-1)), true},
		{BFloat16, arrow.PrimitiveTypes.Float32, FillFloat(math.NaN()), true},
		{BFloat16, arrow.PrimitiveTypes.Float64, FillFloat(1e300), false},
		{Keep, arrow.PrimitiveTypes.Float32, FillFloat(1e300), false},
	}
	for _, tt := range tests {
		to, _, err := castTargetFor(tt.src, tt.dt)
		if err != nil {
			t.Fatal(err)
		}
		_, err = to.fillBytes(tt.fill)
		if (err == nil) != tt.ok {
			t.Errorf("fillBytes(%s, %s) = %v, want ok=%v", to, tt.fill, err, tt.ok)
		}
	}
}
