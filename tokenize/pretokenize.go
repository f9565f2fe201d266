package tokenize

import (
	"strings"
	"unicode/utf8"
	"unsafe"
)

// word is one pre-token: its text and whether it starts at offset 0 of the
// original input (Metaspace's prepend_scheme "first" asks).
type word struct {
	s     string
	first bool
}

// arena holds text that pre-tokenizers create (a prepended space or "▁");
// strings handed out stay valid until reset, even when it grows.
type arena struct{ buf []byte }

func (a *arena) reset() { a.buf = a.buf[:0] }

// str returns the bytes appended since mark as a string.
func (a *arena) str(mark int) string {
	b := a.buf[mark:]
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

// preTokenizer splits each word of in and appends the results to out.
type preTokenizer interface {
	split(sc *scratch, in []word, out []word) []word
}

// behavior is Split's SplitDelimiterBehavior.
type behavior int

const (
	behRemoved behavior = iota
	behIsolated
	behMergedWithPrevious
	behMergedWithNext
	behContiguous
)

var behaviorNames = map[string]behavior{
	"Removed": behRemoved, "Isolated": behIsolated, "MergedWithPrevious": behMergedWithPrevious,
	"MergedWithNext": behMergedWithNext, "Contiguous": behContiguous,
}

// span is a part of a word and whether it matched the pattern.
type span struct {
	start, end int
	match      bool
}

// splitSpans turns the spans covering s (matches and gaps) into words by the
// reference's NormalizedString::split for behavior b; empty words are dropped.
func splitSpans(w word, spans []span, b behavior, out []word) []word {
	emit := func(start, end int) {
		if end > start {
			out = append(out, word{s: w.s[start:end], first: w.first && start == 0})
		}
	}
	switch b {
	case behIsolated:
		for _, sp := range spans {
			emit(sp.start, sp.end)
		}
	case behRemoved:
		for _, sp := range spans {
			if !sp.match {
				emit(sp.start, sp.end)
			}
		}
	case behContiguous, behMergedWithPrevious:
		prev, open, os, oe := false, false, 0, 0
		for _, sp := range spans {
			join := sp.match == prev
			if b == behMergedWithPrevious {
				join = sp.match && !prev
			}
			if join && open {
				oe = sp.end
			} else {
				if open {
					emit(os, oe)
				}
				os, oe, open = sp.start, sp.end, true
			}
			prev = sp.match
		}
		if open {
			emit(os, oe)
		}
	case behMergedWithNext:
		// From the right: a match joins the part after it.
		mark := len(out)
		prev, open, os, oe := false, false, 0, 0
		for k := len(spans) - 1; k >= 0; k-- {
			sp := spans[k]
			if sp.match && !prev && open {
				os = sp.start
			} else {
				if open {
					emit(os, oe)
				}
				os, oe, open = sp.start, sp.end, true
			}
			prev = sp.match
		}
		if open {
			emit(os, oe)
		}
		for i, j := mark, len(out)-1; i < j; i, j = i+1, j-1 {
			out[i], out[j] = out[j], out[i]
		}
	}
	return out
}

// charSpans covers s with a span per character pred matches and one per
// run of characters between them.
func charSpans(s string, pred func(rune) bool, spans []span) []span {
	last := 0
	for i, r := range s {
		if pred(r) {
			if last < i {
				spans = append(spans, span{last, i, false})
			}
			last = i + utf8.RuneLen(r)
			spans = append(spans, span{i, last, true})
		}
	}
	if last < len(s) {
		spans = append(spans, span{last, len(s), false})
	}
	return spans
}

// literalSpans covers s with the occurrences of lit and the gaps between them.
func literalSpans(s, lit string, spans []span) []span {
	last := 0
	for i := 0; lit != "" && i <= len(s)-len(lit); {
		k := strings.Index(s[i:], lit)
		if k < 0 {
			break
		}
		k += i
		if k > last {
			spans = append(spans, span{last, k, false})
		}
		spans = append(spans, span{k, k + len(lit), true})
		last = k + len(lit)
		i = last
	}
	if last < len(s) {
		spans = append(spans, span{last, len(s), false})
	}
	return spans
}

func invert(spans []span) {
	for i := range spans {
		spans[i].match = !spans[i].match
	}
}

// patternSplit is Split with a known regex (tiling the text) and behavior Isolated.
type patternSplit struct{ kind patternKind }

func (p patternSplit) split(sc *scratch, in []word, out []word) []word {
	for _, w := range in {
		for i := 0; i < len(w.s); {
			j := p.kind.scan(w.s, i)
			out = append(out, word{s: w.s[i:j], first: w.first && i == 0})
			i = j
		}
	}
	return out
}

// spanSplit is any split defined by spans and a behavior: Split with a
// string pattern, WhitespaceSplit, Punctuation, Digits, BertPreTokenizer's steps.
type spanSplit struct {
	spans    func(s string, spans []span) []span
	behavior behavior
	invert   bool
}

func (p spanSplit) split(sc *scratch, in []word, out []word) []word {
	spans := sc.spans
	for _, w := range in {
		spans = p.spans(w.s, spans[:0])
		if p.invert {
			invert(spans)
		}
		out = splitSpans(w, spans, p.behavior, out)
	}
	sc.spans = spans
	return out
}

// whitespaceSpans covers s with the runs of \w+ and of [^\w\s]+ (kept) and
// the whitespace between them (matched, to be removed): the Whitespace
// pre-tokenizer, which splits on the inverted regex \w+|[^\w\s]+ and removes.
func whitespaceSpans(s string, spans []span) []span {
	kind := func(r rune) int {
		c := class(r)
		switch {
		case c&clsWord != 0:
			return 1
		case c&clsSpace != 0:
			return 0
		}
		return 2
	}
	for i := 0; i < len(s); {
		r, w := decode(s, i)
		k := kind(r)
		j := i + w
		for j < len(s) {
			r2, w2 := decode(s, j)
			if kind(r2) != k {
				break
			}
			j += w2
		}
		spans = append(spans, span{i, j, k == 0})
		i = j
	}
	return spans
}

// byteLevel is the ByteLevel pre-tokenizer. Its byte-to-character mapping is
// not done: the BPE model works on bytes (see bpe.byteLevel).
type byteLevel struct {
	addPrefixSpace bool
	useRegex       bool
}

func (b byteLevel) split(sc *scratch, in []word, out []word) []word {
	for _, w := range in {
		if b.addPrefixSpace && !strings.HasPrefix(w.s, " ") {
			m := len(sc.ar.buf)
			sc.ar.buf = append(append(sc.ar.buf, ' '), w.s...)
			w.s = sc.ar.str(m)
		}
		if !b.useRegex {
			out = append(out, w)
			continue
		}
		for i := 0; i < len(w.s); {
			j := scanGPT2(w.s, i)
			out = append(out, word{s: w.s[i:j], first: w.first && i == 0})
			i = j
		}
	}
	return out
}

// prependScheme is Metaspace's prepend_scheme.
type prependScheme int

const (
	prependAlways prependScheme = iota
	prependFirst
	prependNever
)

type metaspace struct {
	replacement string
	scheme      prependScheme
	splitWords  bool
}

func (m metaspace) split(sc *scratch, in []word, out []word) []word {
	for _, w := range in {
		mark := len(sc.ar.buf)
		if !strings.HasPrefix(w.s, m.replacement) && !strings.HasPrefix(w.s, " ") &&
			(m.scheme == prependAlways || m.scheme == prependFirst && w.first) {
			sc.ar.buf = append(sc.ar.buf, m.replacement...)
		}
		for i := 0; i < len(w.s); {
			k := strings.IndexByte(w.s[i:], ' ')
			if k < 0 {
				sc.ar.buf = append(sc.ar.buf, w.s[i:]...)
				break
			}
			sc.ar.buf = append(sc.ar.buf, w.s[i:i+k]...)
			sc.ar.buf = append(sc.ar.buf, m.replacement...)
			i += k + 1
		}
		s := sc.ar.str(mark)
		if !m.splitWords {
			if s != "" {
				out = append(out, word{s: s, first: w.first})
			}
			continue
		}
		// MergedWithNext on the replacement: each word starts at one.
		start := 0
		for i := 0; i < len(s); {
			k := strings.Index(s[i:], m.replacement)
			if k < 0 {
				break
			}
			k += i
			if k > start {
				out = append(out, word{s: s[start:k], first: w.first && start == 0})
				start = k
			}
			i = k + len(m.replacement)
		}
		if start < len(s) {
			out = append(out, word{s: s[start:], first: w.first && start == 0})
		}
	}
	return out
}
