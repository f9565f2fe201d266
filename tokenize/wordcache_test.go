package tokenize

import (
	"flag"
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/meshfeed/meshfeed/internal/testseed"
)

var wordCacheSeed = flag.Uint64("wordcache.seed", 0, "seed of TestWordCacheConcurrent (0: $MESHFEED_SEED or the clock)")

// A word merged on one goroutine's scratch is a cache hit on another's: the
// cache belongs to the model, not to a scratch area.
func TestWordCacheShared(t *testing.T) {
	tk := mustParse(t, tiny(tinyBPE, ""))
	m := tk.model.(*bpe)
	a, b := &scratch{}, &scratch{}
	const text = "abcab"
	want := tk.encode(a, nil, text, false)
	n := m.cache.words()
	if n == 0 {
		t.Fatalf("encoding %q cached no word", text)
	}
	got := tk.encode(b, nil, text, false)
	if !slices.Equal(got, want) {
		t.Errorf("second scratch: %v, want %v", got, want)
	}
	if m.cache.words() != n || b.bpe.merged != 0 {
		t.Errorf("the second scratch merged %d words again: %d words cached, want %d", b.bpe.merged, m.cache.words(), n)
	}
}

// Words whose hashes collide take the next slots; each keeps its own ids.
func TestWordCacheCollisions(t *testing.T) {
	c := newWordCache()
	var ar cacheArena
	for i := range 5 {
		c.put(&ar, fmt.Sprint("w", i), 7, []int32{int32(i), 100})
	}
	c.put(&ar, "w2", 7, []int32{99}) // already there: kept as it was
	for i := range 5 {
		ids, ok := c.get(fmt.Sprint("w", i), 7, nil)
		if !ok || !slices.Equal(ids, []int32{int32(i), 100}) {
			t.Errorf("get(w%d) = %v, %v; want ids [%d 100]", i, ids, ok, i)
		}
	}
	if _, ok := c.get("w5", 7, nil); ok {
		t.Error("get(w5) hit a word never put")
	}
	if c.words() != 5 {
		t.Errorf("%d words, want 5", c.words())
	}
}

// A full table is replaced by an empty one on the next insert. (A word
// whose 32 slots are all taken is not cached and does not count: the hash
// seed is random, so the number of such words varies.)
func TestWordCacheFull(t *testing.T) {
	c := newWordCache()
	var ar cacheArena
	cached, last := 0, -1
	for i := range wordCacheMax + 10 {
		w := fmt.Sprint(i)
		if c.put(&ar, w, hashOf(c, w), []int32{int32(i)}) {
			cached, last = cached+1, i
		}
	}
	if cached <= wordCacheMax {
		t.Fatalf("%d of %d words cached: too many slots taken to fill the table", cached, wordCacheMax+10)
	}
	if n := c.words(); n != cached-wordCacheMax {
		t.Errorf("%d words after %d cached, want %d (the table emptied at %d)", n, cached, cached-wordCacheMax, wordCacheMax)
	}
	w := fmt.Sprint(last)
	if ids, ok := c.get(w, hashOf(c, w), nil); !ok || !slices.Equal(ids, []int32{int32(last)}) {
		t.Errorf("get(%s) = %v, %v after the reset", w, ids, ok)
	}
}

// Goroutines putting and getting overlapping words at once: every hit has
// the ids put for that word (run with -race to check the publication too).
func TestWordCacheConcurrent(t *testing.T) {
	seed := testseed.Get(t, *wordCacheSeed, "wordcache.seed")
	c := newWordCache()
	idsOf := func(w string) []int32 {
		out := make([]int32, len(w))
		for i := range len(w) {
			out[i] = int32(w[i]) * int32(i+1)
		}
		return out
	}
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(g)))
			var ar cacheArena
			for range 20000 {
				w := fmt.Sprint(rng.IntN(3000)) // words shared between goroutines
				h := hashOf(c, w)
				if ids, ok := c.get(w, h, nil); ok {
					if !slices.Equal(ids, idsOf(w)) {
						errs <- fmt.Sprintf("get(%q) = %v, want %v", w, ids, idsOf(w))
						return
					}
					continue
				}
				if c.put(&ar, w, h, idsOf(w)) {
					if ids, ok := c.get(w, h, nil); !ok || !slices.Equal(ids, idsOf(w)) {
						errs <- fmt.Sprintf("get(%q) after put = %v, %v, want %v", w, ids, ok, idsOf(w))
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	if n := c.words(); n > 3000 {
		t.Errorf("%d words cached for 3000 distinct words: a word was published twice", n)
	}
}

func hashOf(c *wordCache, w string) uint64 { return maphash.String(c.seed, w) }

// Records of every size round-trip: no ids (a word of characters the model
// drops), and the longest word cached with an id per byte.
func TestWordCacheRecords(t *testing.T) {
	c := newWordCache()
	var ar cacheArena
	long := strings.Repeat("é", wordCacheMaxWord/2)
	longIDs := make([]int32, len(long))
	for i := range longIDs {
		longIDs[i] = int32(i) - 3
	}
	cases := []struct {
		w   string
		ids []int32
	}{{"x", nil}, {"ab", []int32{7}}, {"abc", []int32{1, 2, 3}}, {long, longIDs}, {long[:len(long)-2], longIDs[:1]}}
	for _, tc := range cases {
		if !c.put(&ar, tc.w, hashOf(c, tc.w), tc.ids) {
			t.Fatalf("put(%q) cached nothing", tc.w)
		}
	}
	for _, tc := range cases {
		got, ok := c.get(tc.w, hashOf(c, tc.w), []int32{-9})
		if !ok || !slices.Equal(got, append([]int32{-9}, tc.ids...)) {
			t.Errorf("get(%q) = %v, %v; want [-9] + %v", tc.w, got, ok, tc.ids)
		}
	}
	if _, ok := c.get(long+"x", hashOf(c, long+"x"), nil); ok {
		t.Error("a word never put hit")
	}
}
