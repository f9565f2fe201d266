package shape

// Decimals to floats: the float nearest to each decimal's value (its
// unscaled integer times 10^-scale), correctly rounded. Small values take one
// exact IEEE division or multiplication; the others are formatted and parsed
// by strconv, which rounds correctly.

import (
	"math"
	"strconv"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/decimal256"
)

// decimalDigits is the precision and scale of a decimal type.
func decimalDigits(t arrow.DataType) (precision, scale int32, ok bool) {
	switch tt := t.(type) {
	case *arrow.Decimal128Type:
		return tt.Precision, tt.Scale, true
	case *arrow.Decimal256Type:
		return tt.Precision, tt.Scale, true
	}
	return 0, 0, false
}

// Powers of ten that float64 and float32 hold exactly.
var (
	exact64 = [...]float64{1, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22}
	exact32 = [...]float32{1, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10}
)

func decimal128Int64(v decimal128.Num) (int64, bool) {
	lo, hi := v.LowBits(), v.HighBits()
	return int64(lo), (hi == 0 && lo < 1<<63) || (hi == -1 && lo >= 1<<63)
}

func decimal256Int64(v decimal256.Num) (int64, bool) {
	a := v.Array()
	ext := uint64(0)
	if int64(a[0]) < 0 {
		ext = math.MaxUint64
	}
	return int64(a[0]), a[1] == ext && a[2] == ext && a[3] == ext
}

func decimal128String(dst []byte, v decimal128.Num) []byte { return v.BigInt().Append(dst, 10) }
func decimal256String(dst []byte, v decimal256.Num) []byte { return v.BigInt().Append(dst, 10) }

// decimalKernel converts the decimals in (of the given scale) into out, as
// float64 or float32 (to). small gives a value's unscaled integer when it
// fits int64; digits appends its unscaled integer in decimal.
func decimalKernel[N any](in []N, scale int32, to castTarget, out []byte, small func(N) (int64, bool), digits func([]byte, N) []byte) func(int) int {
	var buf []byte
	slow := func(v N, bits int) float64 {
		buf = digits(buf[:0], v)
		buf = append(buf, 'e')
		buf = strconv.AppendInt(buf, int64(-scale), 10)
		f, _ := strconv.ParseFloat(unsafe.String(unsafe.SliceData(buf), len(buf)), bits) // ±Inf past the range
		return f
	}
	if to.dt.ID() == arrow.FLOAT64 {
		o := arrow.GetData[float64](out)
		return func(int) int {
			for i, v := range in {
				if x, ok := small(v); ok && x > -1<<53 && x < 1<<53 {
					switch {
					case scale >= 0 && int(scale) < len(exact64):
						o[i] = float64(x) / exact64[scale]
						continue
					case scale < 0 && int(-scale) < len(exact64):
						o[i] = float64(x) * exact64[-scale]
						continue
					}
				}
				o[i] = slow(v, 64)
			}
			return -1
		}
	}
	o := arrow.GetData[float32](out)
	return func(int) int {
		for i, v := range in {
			if x, ok := small(v); ok && x > -1<<24 && x < 1<<24 {
				switch {
				case scale >= 0 && int(scale) < len(exact32):
					o[i] = float32(x) / exact32[scale]
					continue
				case scale < 0 && int(-scale) < len(exact32):
					o[i] = float32(x) * exact32[-scale]
					continue
				}
			}
			o[i] = float32(slow(v, 32))
		}
		return -1
	}
}
