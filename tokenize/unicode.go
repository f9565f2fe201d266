package tokenize

import (
	"sync"
	"unicode"
	"unicode/utf8"
)

// Character classes as the reference defines them: \p{L}, \p{N} and \s of
// its regex engines (White_Space), Rust's char::is_whitespace (White_Space),
// char::is_alphanumeric (Alphabetic or Numeric), char::is_numeric (N) and
// char::is_punctuation (P). ASCII is answered from a table.

const (
	clsL     = 1 << iota // \p{L}
	clsN                 // \p{N}
	clsSpace             // \s, White_Space
	clsPunct             // ASCII punctuation or \p{P}
	clsWord              // \w of Rust's regex crate
)

var asciiClass [128]uint8

// bmpClass holds the class of every character of the Basic Multilingual
// Plane, built once by the first Parse (about 64 KiB; a few milliseconds):
// text in other scripts is classified by one load instead of a walk over
// Go's range tables.
var (
	bmpClass     []uint8
	bmpClassOnce sync.Once
)

func init() {
	for r := rune(0); r < 128; r++ {
		asciiClass[r] = slowClass(r)
	}
}

func buildBMPClass() {
	bmpClassOnce.Do(func() {
		t := make([]uint8, 0x10000)
		for r := range t {
			t[r] = slowClass(rune(r))
		}
		bmpClass = t
	})
}

func slowClass(r rune) uint8 {
	var c uint8
	if unicode.IsLetter(r) {
		c |= clsL
	}
	if unicode.IsNumber(r) {
		c |= clsN
	}
	if unicode.Is(unicode.White_Space, r) {
		c |= clsSpace
	}
	if (r < 128 && (r >= '!' && r <= '/' || r >= ':' && r <= '@' || r >= '[' && r <= '`' || r >= '{' && r <= '~')) || unicode.IsPunct(r) {
		c |= clsPunct
	}
	if unicode.IsLetter(r) || unicode.IsMark(r) || unicode.Is(unicode.Nd, r) || unicode.Is(unicode.Pc, r) ||
		unicode.Is(unicode.Other_Alphabetic, r) || unicode.Is(unicode.Nl, r) || unicode.Is(unicode.Join_Control, r) {
		c |= clsWord
	}
	return c
}

// class returns the class bits of r.
func class(r rune) uint8 {
	if r < 128 && r >= 0 {
		return asciiClass[r]
	}
	if r < 0x10000 && bmpClass != nil {
		return bmpClass[r]
	}
	return slowClass(r)
}

// decode returns the rune at s[i] and its width. Invalid bytes never reach
// here (Encode refuses invalid UTF-8), but a width of 1 keeps scanning total.
func decode(s string, i int) (rune, int) {
	if c := s[i]; c < utf8.RuneSelf {
		return rune(c), 1
	}
	return utf8.DecodeRuneInString(s[i:])
}

// classAt returns the class of the rune at s[i] and its width.
func classAt(s string, i int) (uint8, int) {
	if c := s[i]; c < utf8.RuneSelf {
		return asciiClass[c], 1
	}
	r, w := utf8.DecodeRuneInString(s[i:])
	return class(r), w
}

func isWhitespace(r rune) bool { return class(r)&clsSpace != 0 }

// isAlphanumeric is Rust's char::is_alphanumeric: Alphabetic or Numeric.
func isAlphanumeric(r rune) bool {
	return unicode.IsLetter(r) || unicode.IsNumber(r) || unicode.Is(unicode.Other_Alphabetic, r)
}
