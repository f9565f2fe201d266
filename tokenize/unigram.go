package tokenize

import (
	"unicode/utf8"
)

// unigram is the Unigram model: the most likely segmentation of each word
// under the pieces' log-probabilities (the reference's encode_optimized, a
// Viterbi pass over the prefixes a trie finds), unknown characters scored
// min_score - 10 and fused into one unk token.
type unigram struct {
	pieces   []string
	scores   []float64
	vocab    map[string]int32
	unk      int32 // -1 when unk_id is null
	minScore float64
	byteFB   bool
	fallback [256]int32
	trie     trie
}

// trie finds the vocabulary pieces that are prefixes of a string.
type trie struct {
	children map[uint64]int32 // node<<8 | byte -> child node
	value    []int32          // node -> piece id, or -1
}

func newTrie(pieces []string) trie {
	t := trie{children: make(map[uint64]int32, len(pieces)*4), value: []int32{-1}}
	for id, p := range pieces {
		node := int32(0)
		for i := 0; i < len(p); i++ {
			k := uint64(node)<<8 | uint64(p[i])
			c, ok := t.children[k]
			if !ok {
				c = int32(len(t.value))
				t.value = append(t.value, -1)
				t.children[k] = c
			}
			node = c
		}
		t.value[node] = int32(id) // the last of repeated pieces, as the reference's map
	}
	return t
}

type bestNode struct {
	score float64
	start int32 // -1: not reached
	id    int32
}

const unkPenalty = 10.0

func (m *unigram) encodeWord(sc *scratch, w string, dst []int32) []int32 {
	if w == "" {
		return dst
	}
	best := sc.best[:0]
	for i := 0; i <= len(w); i++ {
		best = append(best, bestNode{start: -1})
	}
	sc.best = best
	unkScore := m.minScore - unkPenalty
	for start := 0; start < len(w); {
		till := best[start].score
		_, mblen := utf8.DecodeRuneInString(w[start:])
		single := false
		node := int32(0)
		for k := start; k < len(w); k++ {
			c, ok := m.trie.children[uint64(node)<<8|uint64(w[k])]
			if !ok {
				break
			}
			node = c
			id := m.trie.value[node]
			if id < 0 {
				continue
			}
			end := k + 1
			cand := m.scores[id] + till
			if t := &best[end]; t.start < 0 || cand > t.score {
				t.score, t.start, t.id = cand, int32(start), id
			}
			if end-start == mblen {
				single = true
			}
		}
		if !single {
			t := &best[start+mblen]
			cand := unkScore + till
			if t.start < 0 || cand > t.score {
				t.score, t.start, t.id = cand, int32(start), m.unk
			}
		}
		start += mblen
	}
	// Walk back; consecutive unk pieces fuse into one string.
	mark := len(dst)
	unkEnd := -1
	for end := len(w); end > 0; {
		n := best[end]
		st := int(n.start)
		if n.id == m.unk && m.unk >= 0 {
			if unkEnd < 0 {
				unkEnd = end
			}
		} else {
			if unkEnd >= 0 {
				dst = m.emitUnk(w[end:unkEnd], dst)
				unkEnd = -1
			}
			dst = append(dst, n.id)
		}
		end = st
	}
	if unkEnd >= 0 {
		dst = m.emitUnk(w[:unkEnd], dst)
	}
	// reverse what was appended; byte-fallback runs were appended reversed too
	for i, j := mark, len(dst)-1; i < j; i, j = i+1, j-1 {
		dst[i], dst[j] = dst[j], dst[i]
	}
	return dst
}

// emitUnk appends (in reverse order) the ids of a fused unknown string s: its
// own id if s is a piece, its <0xNN> bytes with byte fallback, else unk.
func (m *unigram) emitUnk(s string, dst []int32) []int32 {
	if id, ok := m.vocab[s]; ok {
		return append(dst, id)
	}
	if m.byteFB {
		ok := true
		for i := 0; i < len(s); i++ {
			if m.fallback[s[i]] < 0 {
				ok = false
			}
		}
		if ok {
			for i := len(s) - 1; i >= 0; i-- {
				dst = append(dst, m.fallback[s[i]])
			}
			return dst
		}
	}
	return append(dst, m.unk)
}
