package tokenize

import (
	"unicode/utf8"
)

// wordPiece is the WordPiece model: greedy longest-match-first, later pieces
// looked up with the continuing-subword prefix; a word with a piece not in
// the vocabulary, or longer than maxChars characters, is the unk token.
type wordPiece struct {
	vocab    map[string]int32
	unk      int32
	prefix   string
	maxChars int
}

func (m *wordPiece) encodeWord(sc *scratch, w string, dst []int32) []int32 {
	if w == "" {
		return dst
	}
	if utf8.RuneCountInString(w) > m.maxChars {
		return append(dst, m.unk)
	}
	mark := len(dst)
	buf := sc.buf[:0]
	for start := 0; start < len(w); {
		end := len(w)
		found := int32(-1)
		for start < end {
			buf = buf[:0]
			if start > 0 {
				buf = append(buf, m.prefix...)
			}
			buf = append(buf, w[start:end]...)
			if id, ok := m.vocab[string(buf)]; ok {
				found = id
				break
			}
			_, n := utf8.DecodeLastRuneInString(w[start:end])
			end -= n
		}
		if found < 0 {
			sc.buf = buf
			return append(dst[:mark], m.unk)
		}
		dst = append(dst, found)
		start = end
	}
	sc.buf = buf
	return dst
}
