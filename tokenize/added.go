package tokenize

import (
	"sort"
	"strings"
	"unicode/utf8"
)

// addedToken is one entry of tokenizer.json's added_tokens.
type addedToken struct {
	id                                  int32
	content                             string
	singleWord, lstrip, rstrip, special bool
}

// addedSet finds added tokens in text the way the reference's Aho-Corasick
// automaton does with MatchKind::LeftmostLongest: the match starting leftmost,
// the longest of those, then on after its end.
type addedSet struct {
	// byFirst holds, per first byte, the tokens starting with it, longest first.
	byFirst [256][]*addedToken
	n       int
}

func newAddedSet(toks []*addedToken, pattern func(*addedToken) string) *addedSet {
	if len(toks) == 0 {
		return nil
	}
	a := &addedSet{n: len(toks)}
	for _, t := range toks {
		p := pattern(t)
		if p == "" {
			continue
		}
		a.byFirst[p[0]] = append(a.byFirst[p[0]], &addedToken{id: t.id, content: p, singleWord: t.singleWord, lstrip: t.lstrip, rstrip: t.rstrip, special: t.special})
	}
	for i := range a.byFirst {
		l := a.byFirst[i]
		sort.SliceStable(l, func(x, y int) bool { return len(l[x].content) > len(l[y].content) })
	}
	return a
}

// match returns the longest token starting at s[i], or nil.
func (a *addedSet) match(s string, i int) *addedToken {
	for _, t := range a.byFirst[s[i]] {
		if strings.HasPrefix(s[i:], t.content) {
			return t
		}
	}
	return nil
}

// split calls piece(start, end, id) for each part of s in order: id is the
// added token's id, or -1 for text between tokens. It follows the reference's
// find_matches, single_word, lstrip and rstrip included.
func (a *addedSet) split(s string, piece func(start, end int, id int32)) {
	if a == nil || s == "" {
		if s != "" {
			piece(0, len(s), -1)
		}
		return
	}
	startOffset := 0
	for i := 0; i < len(s); {
		t := a.match(s, i)
		if t == nil {
			i++
			continue
		}
		start, stop := i, i+len(t.content)
		i = stop
		if t.singleWord {
			startSpace := start == 0 || !endsWithWord(s[:start])
			stopSpace := stop == len(s) || !startsWithWord(s[stop:])
			if !startSpace || !stopSpace {
				// The automaton moves on after the discarded match.
				continue
			}
		}
		if t.lstrip {
			start = max(len(strings.TrimRightFunc(s[:start], isWhitespace)), startOffset)
		}
		if t.rstrip {
			stop = len(s) - len(strings.TrimLeftFunc(s[stop:], isWhitespace))
		}
		if startOffset < start {
			piece(startOffset, start, -1)
		}
		piece(start, stop, t.id)
		startOffset = stop
	}
	if startOffset < len(s) {
		piece(startOffset, len(s), -1)
	}
}

func isWordChar(r rune) bool { return class(r)&clsWord != 0 }

func endsWithWord(s string) bool {
	r, _ := utf8.DecodeLastRuneInString(s)
	return s != "" && isWordChar(r)
}

func startsWithWord(s string) bool {
	r, _ := utf8.DecodeRuneInString(s)
	return s != "" && isWordChar(r)
}
