package tokenize

import (
	"fmt"
	"math"
	"strconv"
)

// The reference reads tokenizer.json with serde_json, whose default float
// parser is not correctly rounded: it accumulates up to 19 significant digits
// in a u64 (ignoring the rest), converts that to f64 and multiplies or
// divides by a power of ten, two roundings that can land one ulp away from
// the nearest double. Unigram scores decide ties between segmentations by
// their last bits, so meshfeed parses them the same way.

var pow10 [309]float64

func init() {
	for i := range pow10 {
		pow10[i], _ = strconv.ParseFloat("1e"+strconv.Itoa(i), 64)
	}
}

// serdeFloat parses a JSON number as serde_json does without its
// float_roundtrip feature.
//
// Length: a transcription of serde_json's parse_integer, parse_decimal,
// parse_exponent and f64_from_parts, kept whole to be read against them.
func serdeFloat(b []byte) (float64, error) {
	bad := func() (float64, error) { return 0, fmt.Errorf("invalid JSON number %q", b) }
	i := 0
	positive := true
	if i < len(b) && b[i] == '-' {
		positive = false
		i++
	}
	if i >= len(b) || b[i] < '0' || b[i] > '9' {
		return bad()
	}
	var sig uint64
	exp := 0
	overflow := func(d uint64) bool {
		return sig >= math.MaxUint64/10 && (sig > math.MaxUint64/10 || d > math.MaxUint64%10)
	}
	if b[i] == '0' {
		i++
		if i < len(b) && b[i] >= '0' && b[i] <= '9' {
			return bad()
		}
	} else {
		for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
			d := uint64(b[i] - '0')
			if overflow(d) {
				// Further integer digits only scale.
				for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
					exp++
				}
				break
			}
			sig = sig*10 + d
		}
	}
	isFloat := false
	if i < len(b) && b[i] == '.' {
		isFloat = true
		i++
		start := i
		for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
			d := uint64(b[i] - '0')
			if overflow(d) {
				for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
				}
				break
			}
			sig = sig*10 + d
			exp--
		}
		if i == start {
			return bad()
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		isFloat = true
		i++
		posExp := true
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			posExp = b[i] == '+'
			i++
		}
		if i >= len(b) || b[i] < '0' || b[i] > '9' {
			return bad()
		}
		e := 0
		for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
			if e > (math.MaxInt32-9)/10 {
				if sig != 0 && posExp {
					return bad()
				}
				if positive {
					return 0, nil
				}
				return math.Copysign(0, -1), nil
			}
			e = e*10 + int(b[i]-'0')
		}
		if posExp {
			exp += e
		} else {
			exp -= e
		}
	}
	if i != len(b) {
		return bad()
	}
	if !isFloat && exp == 0 {
		if positive {
			return float64(sig), nil
		}
		if neg := -int64(sig); neg < 0 {
			return float64(neg), nil
		}
		return -float64(sig), nil
	}
	f := float64(sig)
	for {
		a := exp
		if a < 0 {
			a = -a
		}
		if a < len(pow10) {
			if exp >= 0 {
				f *= pow10[a]
				if math.IsInf(f, 0) {
					return bad()
				}
			} else {
				f /= pow10[a]
			}
			break
		}
		if f == 0 {
			break
		}
		if exp >= 0 {
			return bad()
		}
		f /= 1e308
		exp += 308
	}
	if !positive {
		f = -f
	}
	return f, nil
}
