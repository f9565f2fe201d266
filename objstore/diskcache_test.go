package objstore_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshfeed/meshfeed/internal/testseed"
	"github.com/meshfeed/meshfeed/objstore"
	"github.com/meshfeed/meshfeed/objstore/objstoretest"
)

// cacheSetup is a fake GCS holding one object of random bytes, a front that
// counts the media requests reaching it, and a cached store in front of that.
type cacheSetup struct {
	gcs   *objstoretest.FakeGCS
	front *objstoretest.FaultFront
	inner *objstore.GCSStore
	cache *objstore.DiskCache
	store *objstore.CachedStore
	obj   objstore.Object
	data  []byte
	dir   string
}

const testBlock = 4 << 10

func newCacheSetup(t *testing.T, size int, maxBytes int64, opts ...objstore.DiskCacheOption) *cacheSetup {
	t.Helper()
	s := &cacheSetup{gcs: objstoretest.NewFakeGCS(t, "b"), dir: t.TempDir()}
	s.data = make([]byte, size)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range s.data {
		s.data[i] = byte(r.Uint32())
	}
	s.obj = s.gcs.Put(t, s.gcs.Store(t), objstoretest.URI("b", "data.bin"), s.data)
	s.front = objstoretest.NewFaultFrontFor(t, s.gcs.URL, objstoretest.IsGCSMedia)
	s.inner = objstoretest.NewStore(t, s.front.URL())
	s.reopen(t, maxBytes, opts...)
	return s
}

// reopen opens the cache directory again, as a restarted server does.
func (s *cacheSetup) reopen(t *testing.T, maxBytes int64, opts ...objstore.DiskCacheOption) {
	t.Helper()
	c, err := objstore.NewDiskCache(s.dir, maxBytes, append([]objstore.DiskCacheOption{objstore.WithCacheBlockSize(testBlock)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	s.cache = c
	s.store = c.Wrap(s.inner, new(objstore.Stats))
}

// read reads [off, off+n) through the cache and checks the bytes.
func (s *cacheSetup) read(t *testing.T, off, n int64) {
	t.Helper()
	got := make([]byte, n)
	if err := s.store.ReadAt(context.Background(), s.obj, got, off); err != nil {
		t.Fatalf("ReadAt(%d, %d) = %v", off, n, err)
	}
	if !bytes.Equal(got, s.data[off:off+n]) {
		t.Fatalf("ReadAt(%d, %d): bytes differ from the object", off, n)
	}
}

func (s *cacheSetup) media() int {
	m, _ := s.front.Counts()
	return m
}

// checkStats compares the cache counters with want (hits, misses, bytes
// saved, evictions, corrupt), -1 meaning "any".
func checkStats(t *testing.T, st *objstore.Stats, want ...int64) {
	t.Helper()
	got := []int64{st.CacheHits.Load(), st.CacheMisses.Load(), st.CacheBytesSaved.Load(), st.CacheEvictions.Load(), st.CacheCorrupt.Load()}
	names := []string{"hits", "misses", "bytes saved", "evictions", "corrupt"}
	for i, w := range want {
		if w >= 0 && got[i] != w {
			t.Errorf("stats %s = %d, want %d (all: %v)", names[i], got[i], w, got)
		}
	}
}

// TestDiskCacheHitMiss: a first read fetches its blocks, later reads of any
// sub-range of them are hits with no request.
func TestDiskCacheHitMiss(t *testing.T) {
	s := newCacheSetup(t, 10*testBlock+123, 1<<20)
	s.read(t, 100, 200) // block 0
	if m := s.media(); m != 1 {
		t.Fatalf("first read made %d media requests, want 1", m)
	}
	checkStats(t, s.store.Stats(), 0, 1, 0, 0, 0)
	s.read(t, 100, 200)
	s.read(t, 0, testBlock)
	s.read(t, testBlock-1, 1)
	if m := s.media(); m != 1 {
		t.Fatalf("reads inside a cached block made %d media requests, want still 1", m)
	}
	checkStats(t, s.store.Stats(), 3, 1, 200+testBlock+1, 0, 0)

	// A range over blocks 0..3: block 0 is a hit, 1..3 one request.
	s.read(t, 10, 3*testBlock+5)
	if m := s.media(); m != 2 {
		t.Fatalf("after a read over blocks 0-3: %d media requests, want 2 (blocks 1-3 together)", m)
	}
	checkStats(t, s.store.Stats(), 4, 4, -1, 0, 0)
	// The object's short last block, and its whole.
	s.read(t, int64(len(s.data))-50, 50)
	s.read(t, 0, int64(len(s.data)))
	before := s.media()
	s.read(t, 0, int64(len(s.data)))
	if m := s.media(); m != before {
		t.Fatalf("reading the cached object again made %d media requests", m-before)
	}
	if n := s.cache.Len(); n != 11 {
		t.Errorf("cache holds %d entries, want 11 blocks", n)
	}
	if got, want := s.inner.Stats().BytesRead.Load(), int64(len(s.data)); got != want {
		t.Errorf("bytes read from the store = %d, want %d (each block once)", got, want)
	}
}

// TestDiskCacheRandomRanges reads random ranges twice: the first pass
// fetches, the second makes no request.
func TestDiskCacheRandomRanges(t *testing.T) {
	seed := testseed.Get(t, 0, "")
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	s := newCacheSetup(t, 37*testBlock+999, 1<<20, objstore.WithCacheFetch(3*testBlock, 2))
	type rng2 struct{ off, n int64 }
	var ranges []rng2
	for range 60 {
		off := rng.Int64N(int64(len(s.data)))
		ranges = append(ranges, rng2{off, 1 + rng.Int64N(int64(len(s.data))-off)})
	}
	ranges = append(ranges, rng2{0, int64(len(s.data))})
	for _, r := range ranges {
		s.read(t, r.off, r.n)
	}
	before := s.media()
	rng.Shuffle(len(ranges), func(i, j int) { ranges[i], ranges[j] = ranges[j], ranges[i] })
	for _, r := range ranges {
		s.read(t, r.off, r.n)
	}
	if m := s.media(); m != before {
		t.Fatalf("second pass made %d media requests, want 0", m-before)
	}
	if got := s.store.Stats().CacheMisses.Load(); got != 38 {
		t.Errorf("misses = %d, want 38 (each block fetched once)", got)
	}
}

// TestDiskCacheEvictionOrder: beyond its size the cache drops the least
// recently used block, where a hit counts as a use.
func TestDiskCacheEvictionOrder(t *testing.T) {
	// Room for three entries (a block plus its header each).
	s := newCacheSetup(t, 8*testBlock, 3*testBlock+3*200)
	for b := range int64(3) {
		s.read(t, b*testBlock, 10)
	}
	s.read(t, 0, 10) // block 0 used again: block 1 is now the oldest
	s.read(t, 3*testBlock, 10)
	checkStats(t, s.store.Stats(), 1, 4, -1, 1, 0)
	m := s.media()
	s.read(t, 0, 10)
	s.read(t, 2*testBlock, 10)
	s.read(t, 3*testBlock, 10)
	if got := s.media(); got != m {
		t.Fatalf("blocks 0, 2, 3 should be cached; reading them made %d requests", got-m)
	}
	s.read(t, testBlock, 10)
	if got := s.media(); got != m+1 {
		t.Fatalf("block 1 should have been evicted; reading it made %d requests, want 1", got-m)
	}
	if u := s.cache.Used(); u > 3*testBlock+3*200 {
		t.Errorf("cache uses %d bytes, more than its size", u)
	}
	if n := s.cache.Len(); n != 3 {
		t.Errorf("cache holds %d entries, want 3", n)
	}
}

// TestDiskCacheSingleFlight: concurrent readers of one missing block fetch
// it once.
func TestDiskCacheSingleFlight(t *testing.T) {
	gcs := objstoretest.NewFakeGCS(t, "b")
	data := bytes.Repeat([]byte("0123456789abcdef"), 4*testBlock/16)
	obj := gcs.Put(t, gcs.Store(t), objstoretest.URI("b", "o"), data)
	front := objstoretest.NewLatencyFront(t, gcs.URL, 200*time.Millisecond, 0)
	inner := objstoretest.NewStore(t, front.URL())
	c, err := objstore.NewDiskCache(t.TempDir(), 1<<20, objstore.WithCacheBlockSize(testBlock))
	if err != nil {
		t.Fatal(err)
	}
	store := c.Wrap(inner, nil)
	var wg sync.WaitGroup
	errs := make([]error, 16)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			off := int64(i * 100)
			got := make([]byte, 200)
			if err := store.ReadAt(context.Background(), obj, got, off); err != nil {
				errs[i] = err
			} else if !bytes.Equal(got, data[off:off+200]) {
				errs[i] = fmt.Errorf("reader %d: bytes differ", i)
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	st := store.Stats()
	if r := st.Reads.Load(); r != 1 {
		t.Errorf("16 concurrent readers of one block made %d store reads, want 1", r)
	}
	checkStats(t, st, 15, 1, -1, 0, 0)
}

// TestDiskCacheLeaderCancelled: a reader waiting for a block whose fetcher
// gave up (its context ended) fetches it itself.
func TestDiskCacheLeaderCancelled(t *testing.T) {
	gcs := objstoretest.NewFakeGCS(t, "b")
	data := bytes.Repeat([]byte{7, 8, 9}, testBlock)
	obj := gcs.Put(t, gcs.Store(t), objstoretest.URI("b", "o"), data)
	front := objstoretest.NewLatencyFront(t, gcs.URL, 300*time.Millisecond, 0)
	c, err := objstore.NewDiskCache(t.TempDir(), 1<<20, objstore.WithCacheBlockSize(testBlock))
	if err != nil {
		t.Fatal(err)
	}
	store := c.Wrap(objstoretest.NewStore(t, front.URL()), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	leaderErr := make(chan error, 1)
	go func() { leaderErr <- store.ReadAt(ctx, obj, make([]byte, 10), 0) }()
	time.Sleep(30 * time.Millisecond)
	got := make([]byte, 10)
	if err := store.ReadAt(context.Background(), obj, got, 5); err != nil {
		t.Fatalf("waiting reader: %v", err)
	}
	if !bytes.Equal(got, data[5:15]) {
		t.Fatal("waiting reader: bytes differ")
	}
	if err := <-leaderErr; err == nil {
		t.Error("the cancelled reader returned no error")
	}
}

// TestDiskCacheCorruptEntries: an entry that is truncated, emptied,
// garbled or holds another block is detected, removed and fetched again.
func TestDiskCacheCorruptEntries(t *testing.T) {
	cases := []struct {
		name    string
		corrupt func(b []byte) []byte
	}{
		{"truncated", func(b []byte) []byte { return b[:len(b)-7] }},
		{"empty", func(b []byte) []byte { return nil }},
		{"data byte flipped", func(b []byte) []byte { b[len(b)-100] ^= 1; return b }},
		{"header byte flipped", func(b []byte) []byte { b[10] ^= 1; return b }},
		{"magic", func(b []byte) []byte { copy(b, "XXXX"); return b }},
		{"bytes appended", func(b []byte) []byte { return append(b, 1, 2, 3) }},
	}
	for _, tc := range cases {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			s := newCacheSetup(t, 3*testBlock, 1<<20)
			s.read(t, 0, int64(len(s.data)))
			files := entryFiles(t, s.dir)
			if len(files) != 3 {
				t.Fatalf("%d entry files, want 3", len(files))
			}
			for _, f := range files {
				b, err := os.ReadFile(f)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(f, tc.corrupt(b), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			m := s.media()
			s.read(t, 0, int64(len(s.data)))  // whole blocks: read straight into p
			s.read(t, 0, int64(len(s.data)))  // now good again
			s.read(t, testBlock+1, testBlock) // sub-ranges: through a scratch buffer
			if got := s.media() - m; got != 1 {
				t.Errorf("re-reading 3 corrupt entries made %d media requests, want 1", got)
			}
			checkStats(t, s.store.Stats(), -1, 6, -1, 0, 3)
		})
	}
}

// entryFiles lists the cache's entry files.
func entryFiles(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*", "*.mfc"))
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestDiskCacheRestart: a cache opened again on the same directory serves
// what the previous one wrote, and ignores and cleans half-written files.
func TestDiskCacheRestart(t *testing.T) {
	s := newCacheSetup(t, 5*testBlock+17, 1<<20)
	s.read(t, 0, int64(len(s.data)))
	entries := s.cache.Len()
	used := s.cache.Used()
	// An interrupted write's temp file, old; another process's write in
	// progress, young; a file that is not the cache's.
	sub := filepath.Dir(entryFiles(t, s.dir)[0])
	old := filepath.Join(sub, "tmp-123")
	young := filepath.Join(sub, "tmp-456")
	other := filepath.Join(sub, "notes.txt")
	for _, f := range []string{old, young, other} {
		if err := os.WriteFile(f, []byte("half"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	past := time.Now().Add(-time.Hour)
	if err := os.Chtimes(old, past, past); err != nil {
		t.Fatal(err)
	}
	s.reopen(t, 1<<20)
	if s.cache.Len() != entries || s.cache.Used() != used {
		t.Fatalf("reopened cache: %d entries, %d bytes; want %d, %d", s.cache.Len(), s.cache.Used(), entries, used)
	}
	m := s.media()
	s.read(t, 0, int64(len(s.data)))
	s.read(t, 3, 2*testBlock)
	if got := s.media(); got != m {
		t.Fatalf("reads after a restart made %d media requests, want 0", got-m)
	}
	checkStats(t, s.store.Stats(), 9, 0, -1, 0, 0)
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Errorf("old temp file %s not removed (%v)", old, err)
	}
	for _, f := range []string{young, other} {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("%s removed: %v", f, err)
		}
	}
	// A smaller size at start evicts down to it.
	const room = 2*testBlock + 400
	s.reopen(t, room)
	if s.cache.Len() >= entries || s.cache.Used() > room {
		t.Errorf("reopened with room for %d bytes: %d entries, %d bytes", room, s.cache.Len(), s.cache.Used())
	}
	if n := len(entryFiles(t, s.dir)); n != s.cache.Len() {
		t.Errorf("%d entry files left, want %d", n, s.cache.Len())
	}
}

// TestDiskCacheNewVersion: a replaced object has a new generation, so its
// new bytes are read, not the cached old ones.
func TestDiskCacheNewVersion(t *testing.T) {
	s := newCacheSetup(t, 2*testBlock, 1<<20)
	s.read(t, 0, int64(len(s.data)))
	s.data = bytes.Repeat([]byte{42}, 2*testBlock)
	s.obj = s.gcs.Put(t, s.inner, s.obj.URI, s.data)
	m := s.media()
	s.read(t, 0, int64(len(s.data)))
	if got := s.media(); got != m+1 {
		t.Errorf("reading the new version made %d media requests, want 1", got-m)
	}
}

// TestDiskCacheUnwritable: when entries cannot be written (a full or
// failing disk), reads go on uncached and count the failures.
func TestDiskCacheUnwritable(t *testing.T) {
	s := newCacheSetup(t, 3*testBlock, 1<<20)
	// Every fan-out directory is a file: no entry can be created.
	for i := range 256 {
		if err := os.WriteFile(filepath.Join(s.dir, fmt.Sprintf("%02x", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s.read(t, 0, int64(len(s.data)))
	s.read(t, 0, int64(len(s.data)))
	if got := s.store.Stats().CacheWriteErrors.Load(); got != 6 {
		t.Errorf("write errors = %d, want 6", got)
	}
	if s.cache.Len() != 0 {
		t.Errorf("cache indexes %d entries it could not write", s.cache.Len())
	}
}

// TestDiskCacheLocalNotCached: local paths go straight to the store.
func TestDiskCacheLocalNotCached(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f.bin")
	data := []byte("local bytes, local already")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	mux, err := objstore.NewStore(context.Background(), objstore.WithDiskCache(mustCache(t, t.TempDir())))
	if err != nil {
		t.Fatal(err)
	}
	defer mux.Close()
	obj, err := mux.Stat(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(data))
	if err := mux.ReadAt(context.Background(), obj, got, 0); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("ReadAt = %v, %q", err, got)
	}
	st := mux.Stats()
	if st.CacheMisses.Load() != 0 || st.CacheHits.Load() != 0 || st.BytesRead.Load() != int64(len(data)) {
		t.Errorf("local read: misses %d hits %d bytes read %d; want 0, 0, %d", st.CacheMisses.Load(), st.CacheHits.Load(), st.BytesRead.Load(), len(data))
	}
}

// TestDiskCacheMux: a Mux with a cache reads gs:// objects through it and
// counts in its own Stats.
func TestDiskCacheMux(t *testing.T) {
	gcs := objstoretest.NewFakeGCS(t, "b")
	data := bytes.Repeat([]byte("abc"), 5000)
	obj := gcs.Put(t, gcs.Store(t), objstoretest.URI("b", "o"), data)
	mux, err := objstore.NewStore(context.Background(), objstore.WithDiskCache(mustCache(t, t.TempDir())),
		objstore.WithGCSOptions(objstore.WithGCSEndpoint(gcs.URL)))
	if err != nil {
		t.Fatal(err)
	}
	defer mux.Close()
	for range 2 {
		got := make([]byte, len(data))
		if err := mux.ReadAt(context.Background(), obj, got, 0); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("ReadAt = %v", err)
		}
	}
	st := mux.Stats()
	if st.CacheMisses.Load() != 4 || st.CacheHits.Load() != 4 || st.Reads.Load() != 1 || st.CacheBytesSaved.Load() != int64(len(data)) {
		t.Errorf("misses %d hits %d reads %d saved %d; want 4, 4, 1, %d", st.CacheMisses.Load(), st.CacheHits.Load(),
			st.Reads.Load(), st.CacheBytesSaved.Load(), len(data))
	}
}

func mustCache(t *testing.T, dir string) *objstore.DiskCache {
	t.Helper()
	c, err := objstore.NewDiskCache(dir, 1<<20, objstore.WithCacheBlockSize(testBlock))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestDiskCacheConfig: a cache that cannot hold one block is refused.
func TestDiskCacheConfig(t *testing.T) {
	_, err := objstore.NewDiskCache(t.TempDir(), 1000, objstore.WithCacheBlockSize(testBlock))
	if err == nil || !strings.Contains(err.Error(), "less than one block") {
		t.Errorf("NewDiskCache(size 1000) = %v, want an error naming the block", err)
	}
	if _, err := objstore.NewDiskCache("", 1<<30); err == nil {
		t.Error("NewDiskCache(\"\") gave no error")
	}
}

// TestDiskCacheKeepsListCapability checks that a cached store answers
// CanList as the store it wraps: an https:// store behind the cache still
// refuses globs instead of listing.
func TestDiskCacheKeepsListCapability(t *testing.T) {
	c, err := objstore.NewDiskCache(t.TempDir(), 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	h := objstore.NewHTTPSStore()
	cs := c.Wrap(h, nil)
	defer cs.Close()
	if objstore.CanList(cs, "https://example.invalid/data/") {
		t.Error("a cached https:// store says it can list")
	}
	if objstore.CanList(h, "https://example.invalid/data/") != objstore.CanList(cs, "https://example.invalid/data/") {
		t.Error("the cache answers CanList differently from the store it wraps")
	}
}
