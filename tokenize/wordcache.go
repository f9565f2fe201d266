package tokenize

import (
	"encoding/binary"
	"hash/maphash"
	"sync/atomic"
	"unsafe"
)

// The BPE word cache: the ids of each word (pre-token) already merged, one
// per model, shared by every goroutine that encodes with it, so that a word
// is merged once however many workers meet it.
//
// It is laid out for the processor's caches, since that is what two workers
// contend for: on the shared 2-core machine two goroutines encoding at once
// each spent 11 to 24% more CPU than one alone even with nothing shared (a
// Tokenizer each), and a pointer chase over 4 MiB ran at about half speed
// on both cores at once while one over 1.5 MiB did not (BENCHMARKS.md,
// Tokenization). A word's entry is one record in a byte array (a uint32 of
// its length and id count, its ids, its bytes: one cache line for most
// words), found from an 8-byte slot holding 32 bits of the word's hash and
// the record's offset, so a hit reads about two cache lines and the cache
// holds nothing the garbage collector scans. The layout before it, an entry
// of pointers per word (its key and ids allocated apart) behind each
// goroutine's own Go map of the same words, gave each worker its own copy
// of the words it met.
//
// It is an insert-only open-addressing table: a lookup takes no lock and
// writes nothing; an insert writes its record in space its goroutine
// claimed, then claims an empty slot by compare-and-swap (publishing the
// record), and a record is never changed once published. When it holds
// wordCacheMax words or its record space is used up, the next insert
// replaces the whole table with an empty one; goroutines still reading the
// old one finish with it.
const (
	wordCacheMax     = 1 << 16 // words per table
	wordCacheMaxWord = 256     // longer words are not cached
	wordCacheSlots   = 2 * wordCacheMax
	wordCacheProbes  = 32                // slots looked at before giving up (an insert then caches nothing)
	wordCacheBytes   = 64 * wordCacheMax // record space per table
	// A goroutine claims record space cacheBlock bytes, and words
	// cacheQuota, at a time, so that inserts rarely touch a shared counter.
	cacheBlock = 4096
	cacheQuota = 64
)

// A slot is 0 (empty) or the high 32 bits of the word's hash, the record's
// offset (a multiple of 4) and 1 (in use).
const slotTag = uint64(0xffffffff) << 32

type wordTable struct {
	slots [wordCacheSlots]atomic.Uint64
	words atomic.Int64 // words claimed (by quotas)
	used  atomic.Int64 // bytes of data claimed (by blocks)
	// data holds the records: a uint32 (the word's length | ids<<16), the
	// ids, the word's bytes, padded to 4 bytes.
	data []byte
}

type wordCache struct {
	table atomic.Pointer[wordTable]
	seed  maphash.Seed
}

func newWordTable() *wordTable { return &wordTable{data: make([]byte, wordCacheBytes)} }

func newWordCache() *wordCache {
	c := &wordCache{seed: maphash.MakeSeed()}
	c.table.Store(newWordTable())
	return c
}

// record returns the ids of the record at off if it is w's.
func (t *wordTable) record(off int, w string) ([]int32, bool) {
	hdr := binary.LittleEndian.Uint32(t.data[off:])
	n, k := int(hdr>>16), off+4+4*int(hdr>>16)
	if int(hdr&0xffff) != len(w) || string(t.data[k:k+len(w)]) != w {
		return nil, false
	}
	if n == 0 {
		return nil, true
	}
	return unsafe.Slice((*int32)(unsafe.Pointer(&t.data[off+4])), n), true
}

// get appends the ids of w (h is its hash) to dst; false if w is not cached.
func (c *wordCache) get(w string, h uint64, dst []int32) ([]int32, bool) {
	t := c.table.Load()
	for i, p := h, 0; p < wordCacheProbes; i, p = i+1, p+1 {
		v := t.slots[i&(wordCacheSlots-1)].Load()
		if v == 0 {
			return dst, false
		}
		if v&slotTag == h&slotTag {
			if ids, ok := t.record(int(uint32(v)&^1), w); ok {
				return append(dst, ids...), true
			}
		}
	}
	return dst, false
}

// put publishes the ids of w; another goroutine may have published w first
// (the same ids: the cache is a function of the word). false: not cached
// (the word's slots are taken, or the table filled up twice meanwhile).
func (c *wordCache) put(a *cacheArena, w string, h uint64, ids []int32) bool {
	size := (4 + 4*len(ids) + len(w) + 3) &^ 3
	if size > cacheBlock || len(ids) > 0xffff {
		return false
	}
	for range 2 {
		t := c.table.Load()
		if ok, full := c.putIn(t, a, w, h, ids, size); !full {
			return ok
		}
		c.table.CompareAndSwap(t, newWordTable()) // full: the next words go to a fresh one
	}
	return false
}

// putIn is put on table t; full: t had no room for w.
func (c *wordCache) putIn(t *wordTable, a *cacheArena, w string, h uint64, ids []int32, size int) (ok, full bool) {
	off := -1
	for i, p := h, 0; p < wordCacheProbes; i, p = i+1, p+1 {
		slot := &t.slots[i&(wordCacheSlots-1)]
		cur := slot.Load()
		if cur == 0 {
			if off < 0 {
				if off = a.claim(t, size); off < 0 {
					return false, true
				}
				d := t.data[off : off+size]
				binary.LittleEndian.PutUint32(d, uint32(len(w))|uint32(len(ids))<<16)
				if len(ids) > 0 {
					copy(unsafe.Slice((*int32)(unsafe.Pointer(&d[4])), len(ids)), ids)
				}
				copy(d[4+4*len(ids):], w)
			}
			if slot.CompareAndSwap(0, h&slotTag|uint64(off)|1) {
				return true, false
			}
			cur = slot.Load()
		}
		if cur&slotTag == h&slotTag {
			if _, ok := t.record(int(uint32(cur)&^1), w); ok {
				return true, false
			}
		}
	}
	return false, false
}

// cacheArena is one goroutine's claim on a table: record space and a word
// quota (a record written but not published is left unused).
type cacheArena struct {
	t         *wordTable
	next, end int // record space left: data[next:end]
	quota     int // words left
}

// claim returns the offset of size bytes of t's record space for one more
// word, -1 if t is full.
func (a *cacheArena) claim(t *wordTable, size int) int {
	if a.t != t {
		a.t, a.next, a.end, a.quota = t, 0, 0, 0
	}
	if a.quota == 0 {
		if t.words.Add(cacheQuota) > wordCacheMax {
			return -1
		}
		a.quota = cacheQuota
	}
	if a.end-a.next < size {
		start := int(t.used.Add(cacheBlock)) - cacheBlock
		if start+cacheBlock > len(t.data) {
			return -1
		}
		a.next, a.end = start, start+cacheBlock
	}
	off := a.next
	a.next += size
	a.quota--
	return off
}

// words is the number of words in the current table (for tests).
func (c *wordCache) words() int {
	t, n := c.table.Load(), 0
	for i := range t.slots {
		if t.slots[i].Load() != 0 {
			n++
		}
	}
	return n
}
