package tokenize

import (
	"hash/maphash"
	"strings"
	"unicode/utf8"
)

// bpe is the BPE model. In byte-level files (a ByteLevel pre-tokenizer) the
// vocabulary is kept in bytes, each token's characters mapped back through
// the GPT-2 byte table, so words are merged as bytes and never converted.
type bpe struct {
	vocab map[string]int32
	// merges maps a pair of ids (left<<32 | right) to rank<<32 | merged id.
	merges       *pairTable
	byteLevel    bool
	byteIDs      [256]int32 // byte-level: the id of each single byte, -1 if none
	fallback     [256]int32 // byte_fallback: the id of <0xNN>, -1 if none
	hasFallback  bool       // byte_fallback and at least one <0xNN> token (each byte is checked at use)
	unk          int32      // -1: no unk_token
	fuseUnk      bool
	ignoreMerges bool
	vocabSize    int // entries of the file's vocabulary
	// boundary, when set, is "▁" in a vocabulary where no token has it after
	// another character: no merge can join the text before such a "▁" with
	// what follows, so a long word is encoded in parts split there (exactly
	// as a whole, and through the word cache). See splitsAtMetaspace.
	boundary string
	// cache holds the ids of words already merged, for every goroutine
	// (wordcache.go).
	cache *wordCache
}

// splitsAtMetaspace reports whether a SentencePiece-style vocabulary lets
// words be split before each "▁" that follows another character: "▁" is a
// token, and every token is a run of "▁" followed by no further "▁".
func splitsAtMetaspace(vocab map[string]int32) bool {
	if _, ok := vocab["▁"]; !ok {
		return false
	}
	for tok := range vocab {
		if strings.Contains(strings.TrimLeft(tok, "▁"), "▁") {
			return false
		}
	}
	return true
}

// symbol is one part of a word while merging: a linked list over the word.
type symbol struct {
	id         int32
	prev, next int32
	gone       bool
}

type bpeScratch struct {
	syms   []symbol
	heap   []mergeEntry
	ranks  []uint64
	arena  cacheArena // this goroutine's claim on the word cache (wordcache.go)
	merged int        // words merged (not in the word cache, or too long for it)
}

type mergeEntry struct {
	rank  uint32
	pos   int32
	newID int32
}

func (m *bpe) rank(a, b int32) (uint32, int32, bool) {
	v, ok := m.merges.get(uint64(uint32(a))<<32 | uint64(uint32(b)))
	return uint32(v >> 32), int32(uint32(v)), ok
}

// encodeWord appends the ids of one pre-token to dst.
func (m *bpe) encodeWord(sc *scratch, w string, dst []int32) []int32 {
	if w == "" {
		return dst
	}
	if m.boundary != "" && len(w) > 2*len(m.boundary) && !m.ignoreMerges {
		// Split before each "▁" that follows another character.
		start := 0
		for i := len(m.boundary); i < len(w); {
			k := strings.Index(w[i:], m.boundary)
			if k < 0 {
				break
			}
			k += i
			if !strings.HasSuffix(w[:k], m.boundary) {
				dst = m.encodePart(sc, w[start:k], dst)
				start = k
			}
			i = k + len(m.boundary)
		}
		return m.encodePart(sc, w[start:], dst)
	}
	return m.encodePart(sc, w, dst)
}

// encodePart encodes a word, or a part of one that merges cannot cross.
// With ignore_merges a word in the vocabulary is its own token; that is
// looked up after the word cache and the answer cached like a merge's (a
// Go map lookup before the cache took 12% of Llama 3's CPU).
func (m *bpe) encodePart(sc *scratch, w string, dst []int32) []int32 {
	bs := &sc.bpe
	if len(w) > wordCacheMaxWord {
		if m.ignoreMerges {
			if id, ok := m.vocab[w]; ok {
				return append(dst, id)
			}
		}
		bs.merged++
		return m.merge(bs, w, dst)
	}
	h := maphash.String(m.cache.seed, w)
	if out, ok := m.cache.get(w, h, dst); ok {
		return out
	}
	mark := len(dst)
	if id, ok := m.vocab[w]; ok && m.ignoreMerges {
		dst = append(dst, id)
	} else {
		bs.merged++
		dst = m.merge(bs, w, dst)
	}
	m.cache.put(&bs.arena, w, h, dst[mark:])
	return dst
}

// initial fills syms with the word's characters (bytes, in byte-level files)
// as the reference's merge_word does: unknown characters become byte-fallback
// tokens or the (fused) unk token, or are dropped when there is no unk_token.
func (m *bpe) initial(bs *bpeScratch, w string) {
	syms := bs.syms[:0]
	add := func(id int32) {
		syms = append(syms, symbol{id: id, prev: int32(len(syms)) - 1, next: int32(len(syms)) + 1})
	}
	if m.byteLevel {
		unkPending := false
		for i := 0; i < len(w); i++ {
			if id := m.byteIDs[w[i]]; id >= 0 {
				if unkPending {
					add(m.unk)
					unkPending = false
				}
				add(id)
			} else if m.unk >= 0 {
				if unkPending && !m.fuseUnk {
					add(m.unk)
				}
				unkPending = true
			}
		}
		if unkPending {
			add(m.unk)
		}
		bs.syms = syms
		return
	}
	unkPending := false
	for i := 0; i < len(w); {
		_, n := utf8.DecodeRuneInString(w[i:])
		c := w[i : i+n]
		i += n
		if id, ok := m.vocab[c]; ok {
			if unkPending {
				add(m.unk)
				unkPending = false
			}
			add(id)
			continue
		}
		if m.hasFallback {
			ok := true
			for k := 0; k < len(c); k++ {
				if m.fallback[c[k]] < 0 {
					ok = false
					break
				}
			}
			if ok {
				// As the reference: a pending unk is not flushed first.
				for k := 0; k < len(c); k++ {
					add(m.fallback[c[k]])
				}
				continue
			}
		}
		if m.unk >= 0 {
			if unkPending && !m.fuseUnk {
				add(m.unk)
			}
			unkPending = true
		}
	}
	if unkPending {
		add(m.unk)
	}
	bs.syms = syms
}

// merge applies the merges to w and appends the resulting ids.
func (m *bpe) merge(bs *bpeScratch, w string, dst []int32) []int32 {
	m.initial(bs, w)
	syms := bs.syms
	if len(syms) == 0 {
		return dst
	}
	syms[len(syms)-1].next = -1
	if len(syms) <= 48 {
		m.mergeSmall(bs, syms)
	} else {
		m.mergeHeap(bs, syms)
	}
	for i := int32(0); i >= 0; i = syms[i].next {
		dst = append(dst, syms[i].id)
	}
	return dst
}

// mergeSmall merges a short word by scanning for the lowest-ranked pair
// (leftmost on ties) until none is left: the same order as the reference's
// queue, without the queue. ranks[i] is the rank of the pair starting at
// symbol i (noRank if none), updated only around each merge.
func (m *bpe) mergeSmall(bs *bpeScratch, syms []symbol) {
	const noRank = ^uint64(0)
	ranks := bs.ranks[:0]
	for i := range syms {
		r := noRank
		if i+1 < len(syms) {
			if v, ok := m.merges.get(uint64(uint32(syms[i].id))<<32 | uint64(uint32(syms[i+1].id))); ok {
				r = v
			}
		}
		ranks = append(ranks, r)
	}
	bs.ranks = ranks
	pairAt := func(i int32) uint64 {
		nx := syms[i].next
		if nx < 0 {
			return noRank
		}
		if v, ok := m.merges.get(uint64(uint32(syms[i].id))<<32 | uint64(uint32(syms[nx].id))); ok {
			return v
		}
		return noRank
	}
	for {
		best, bestRank := int32(-1), noRank
		for i := int32(0); i >= 0; i = syms[i].next {
			// rank<<32|id compares by rank first; ties keep the leftmost.
			if ranks[i]>>32 < bestRank>>32 {
				best, bestRank = i, ranks[i]
			}
		}
		if best < 0 {
			return
		}
		nx := syms[best].next
		syms[best].id = int32(uint32(bestRank))
		syms[best].next = syms[nx].next
		if syms[nx].next >= 0 {
			syms[syms[nx].next].prev = best
		}
		syms[nx].gone = true
		ranks[best] = pairAt(best)
		if p := syms[best].prev; p >= 0 {
			ranks[p] = pairAt(p)
		}
	}
}

// mergeHeap is the reference's Word::merge_all: a priority queue of pairs by
// (rank, position), stale entries skipped.
func (m *bpe) mergeHeap(bs *bpeScratch, syms []symbol) {
	h := bs.heap[:0]
	less := func(a, b mergeEntry) bool { return a.rank < b.rank || a.rank == b.rank && a.pos < b.pos }
	push := func(e mergeEntry) {
		h = append(h, e)
		for i := len(h) - 1; i > 0; {
			p := (i - 1) / 2
			if !less(h[i], h[p]) {
				break
			}
			h[i], h[p] = h[p], h[i]
			i = p
		}
	}
	pop := func() mergeEntry {
		top := h[0]
		last := len(h) - 1
		h[0] = h[last]
		h = h[:last]
		for i := 0; ; {
			l, r, s := 2*i+1, 2*i+2, i
			if l < len(h) && less(h[l], h[s]) {
				s = l
			}
			if r < len(h) && less(h[r], h[s]) {
				s = r
			}
			if s == i {
				break
			}
			h[i], h[s] = h[s], h[i]
			i = s
		}
		return top
	}
	for i := 0; i+1 < len(syms); i++ {
		if r, id, ok := m.rank(syms[i].id, syms[i+1].id); ok {
			push(mergeEntry{r, int32(i), id})
		}
	}
	for len(h) > 0 {
		top := pop()
		s := &syms[top.pos]
		if s.gone || s.next < 0 {
			continue
		}
		nx := s.next
		if _, id, ok := m.rank(s.id, syms[nx].id); !ok || id != top.newID {
			continue
		}
		s.id = top.newID
		s.next = syms[nx].next
		syms[nx].gone = true
		if s.next >= 0 {
			syms[s.next].prev = top.pos
		}
		if s.prev >= 0 {
			if r, id, ok := m.rank(syms[s.prev].id, s.id); ok {
				push(mergeEntry{r, s.prev, id})
			}
		}
		if s.next >= 0 {
			if r, id, ok := m.rank(s.id, syms[s.next].id); ok {
				push(mergeEntry{r, top.pos, id})
			}
		}
	}
	bs.heap = h
}
