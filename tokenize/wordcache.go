package tokenize

import (
	"hash/maphash"
	"strings"
	"sync/atomic"
)

// The shared BPE word cache: the ids of each word (pre-token) already merged,
// shared by the goroutines that encode a batch together (EncodeBatch with
// several workers; scratch.share), so that a word is merged once however many
// workers meet it. Before it was shared, each worker warmed
// its own cache, and two workers spent up to 1.4 times one worker's CPU on a
// short run (BENCHMARKS.md, Tokenization). Each goroutine still looks a word
// up in its own map first (bpeScratch.cache, filled from this one): a Go map
// of its own words is faster to hit than this table of a million bytes.
//
// It is an insert-only open-addressing table of atomic pointers: a lookup
// takes no lock and writes nothing (a hash, loads and a string comparison);
// an insert claims an empty slot by compare-and-swap, and an entry is never
// changed once published. When it holds wordCacheMax words, the next insert
// replaces the whole table with an empty one (as each worker's cache was
// emptied when full); goroutines still reading the old one finish with it.
const (
	wordCacheMax     = 1 << 16 // words per table
	wordCacheMaxWord = 256     // longer words are not cached
	wordCacheSlots   = 2 * wordCacheMax
	wordCacheProbes  = 32 // slots looked at before giving up (an insert then caches nothing)
)

type cacheEntry struct {
	hash uint64
	key  string
	ids  []int32
}

type wordTable struct {
	slots [wordCacheSlots]atomic.Pointer[cacheEntry]
	n     atomic.Int32 // entries published
}

type wordCache struct {
	table atomic.Pointer[wordTable]
	seed  maphash.Seed
}

func newWordCache() *wordCache {
	c := &wordCache{seed: maphash.MakeSeed()}
	c.table.Store(new(wordTable))
	return c
}

// get returns the entry of w (h is its hash), nil if w is not cached.
func (c *wordCache) get(w string, h uint64) *cacheEntry {
	t := c.table.Load()
	for i, p := h, 0; p < wordCacheProbes; i, p = i+1, p+1 {
		e := t.slots[i&(wordCacheSlots-1)].Load()
		if e == nil {
			return nil
		}
		if e.hash == h && e.key == w {
			return e
		}
	}
	return nil
}

// put publishes the ids of w and returns its entry; another goroutine may
// have published w first (the same ids: the cache is a function of the
// word), and then that entry is returned. nil: not cached (the table was
// replaced meanwhile, or the word's slots are taken).
func (c *wordCache) put(arena *cacheArena, w string, h uint64, ids []int32) *cacheEntry {
	t := c.table.Load()
	if t.n.Load() >= wordCacheMax {
		fresh := new(wordTable)
		if !c.table.CompareAndSwap(t, fresh) {
			return nil // another goroutine replaced it: this word is cached next time
		}
		t = fresh
	}
	var e *cacheEntry
	for i, p := h, 0; p < wordCacheProbes; i, p = i+1, p+1 {
		slot := &t.slots[i&(wordCacheSlots-1)]
		cur := slot.Load()
		if cur == nil {
			if e == nil {
				e = arena.entry(w, h, ids)
			}
			if slot.CompareAndSwap(nil, e) {
				t.n.Add(1)
				return e
			}
			cur = slot.Load()
		}
		if cur.hash == h && cur.key == w {
			return cur
		}
	}
	return nil
}

// cacheArena is one goroutine's memory for the entries it publishes: entries
// and ids are cut from blocks (one allocation per block, not per word).
type cacheArena struct {
	entries []cacheEntry
	ids     []int32
}

func (a *cacheArena) entry(w string, h uint64, ids []int32) *cacheEntry {
	if len(a.entries) == cap(a.entries) {
		a.entries = make([]cacheEntry, 0, 256)
	}
	if cap(a.ids)-len(a.ids) < len(ids) {
		a.ids = make([]int32, 0, max(4096, len(ids)))
	}
	start := len(a.ids)
	a.ids = append(a.ids, ids...)
	a.entries = append(a.entries, cacheEntry{hash: h, key: strings.Clone(w), ids: a.ids[start:len(a.ids):len(a.ids)]})
	return &a.entries[len(a.entries)-1]
}

// words is the number of words in the current table (for tests).
func (c *wordCache) words() int { return int(c.table.Load().n.Load()) }
