package tokenize

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// normalizer appends the normalized form of s to dst. Normalizers change text
// only; meshfeed needs ids, not offsets, so no alignment is kept.
type normalizer interface {
	normalize(dst []byte, s string) []byte
}

type unicodeForm struct{ f norm.Form }

func (u unicodeForm) normalize(dst []byte, s string) []byte { return u.f.AppendString(dst, s) }

type lowercase struct{}

func (lowercase) normalize(dst []byte, s string) []byte { return appendLower(dst, s) }

// appendLower is Rust's char::to_lowercase over each character: the simple
// mapping, except U+0130, whose lowercase is two characters.
func appendLower(dst []byte, s string) []byte {
	for _, r := range s {
		if r == 0x130 {
			dst = append(dst, "i\u0307"...)
			continue
		}
		dst = utf8.AppendRune(dst, unicode.ToLower(r))
	}
	return dst
}

type strip struct{ left, right bool }

func (st strip) normalize(dst []byte, s string) []byte {
	if st.left {
		s = strings.TrimLeftFunc(s, isWhitespace)
	}
	if st.right {
		s = strings.TrimRightFunc(s, isWhitespace)
	}
	return append(dst, s...)
}

// stripAccents removes combining marks (\p{M}).
type stripAccents struct{}

func (stripAccents) normalize(dst []byte, s string) []byte {
	for _, r := range s {
		if !unicode.IsMark(r) {
			dst = utf8.AppendRune(dst, r)
		}
	}
	return dst
}

type replace struct{ pattern, content string }

func (rp replace) normalize(dst []byte, s string) []byte {
	for {
		i := strings.Index(s, rp.pattern)
		if i < 0 {
			return append(dst, s...)
		}
		dst = append(dst, s[:i]...)
		dst = append(dst, rp.content...)
		s = s[i+len(rp.pattern):]
	}
}

type prepend struct{ prefix string }

func (p prepend) normalize(dst []byte, s string) []byte {
	if s == "" {
		return dst
	}
	return append(append(dst, p.prefix...), s...)
}

// bertNormalizer is BertNormalizer: clean text, pad CJK ideographs with
// spaces, strip accents (NFD, then drop nonspacing marks), lowercase.
type bertNormalizer struct {
	clean, chinese, stripAccents, lowercase bool
}

func (b bertNormalizer) normalize(dst []byte, s string) []byte {
	start := len(dst)
	for _, r := range s {
		if b.clean {
			if r == 0 || r == 0xFFFD || isBertControl(r) {
				continue
			}
			if r == '\t' || r == '\n' || r == '\r' || isWhitespace(r) {
				r = ' '
			}
		}
		if b.chinese && isChineseChar(r) {
			dst = append(dst, ' ')
			dst = utf8.AppendRune(dst, r)
			dst = append(dst, ' ')
			continue
		}
		dst = utf8.AppendRune(dst, r)
	}
	if !b.stripAccents && !b.lowercase {
		return dst
	}
	// The rest works on a copy of what was appended.
	tmp := string(dst[start:])
	dst = dst[:start]
	if b.stripAccents {
		nfd := norm.NFD.String(tmp)
		var sb []byte
		for _, r := range nfd {
			if !unicode.Is(unicode.Mn, r) {
				sb = utf8.AppendRune(sb, r)
			}
		}
		tmp = string(sb)
	}
	if b.lowercase {
		return appendLower(dst, tmp)
	}
	return append(dst, tmp...)
}

// isBertControl is the reference's is_control: \p{C} (unassigned included)
// but not tab, newline or carriage return.
func isBertControl(r rune) bool {
	if r == '\t' || r == '\n' || r == '\r' {
		return false
	}
	if unicode.In(r, unicode.Cc, unicode.Cf, unicode.Co, unicode.Cs) {
		return true
	}
	return !unicode.In(r, unicode.L, unicode.M, unicode.N, unicode.P, unicode.S, unicode.Z)
}

func isChineseChar(r rune) bool {
	return r >= 0x4E00 && r <= 0x9FFF || r >= 0x3400 && r <= 0x4DBF || r >= 0x20000 && r <= 0x2A6DF ||
		r >= 0x2A700 && r <= 0x2B73F || r >= 0x2B740 && r <= 0x2B81F || r >= 0x2B920 && r <= 0x2CEAF ||
		r >= 0xF900 && r <= 0xFAFF || r >= 0x2F800 && r <= 0x2FA1F
}

// sequence applies normalizers in order.
type normSequence struct{ steps []normalizer }

func (q normSequence) normalize(dst []byte, s string) []byte {
	start := len(dst)
	for i, n := range q.steps {
		if i > 0 {
			s = string(dst[start:])
			dst = dst[:start]
		}
		dst = n.normalize(dst, s)
	}
	return dst
}
