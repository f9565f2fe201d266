package loader

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/compress"
)

// WithMapCache keeps whole-file mappings between reads: a second pass over a
// file maps nothing new, every byte decoded is still the file's, the cache
// stays within its bound, and Close unmaps everything.

func TestMapCacheReusesMappings(t *testing.T) {
	path := mmapFile(t, compress.Codecs.Uncompressed)
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	s := NewLocalStore(WithMapCache(info.Size()))
	for pass := range 3 {
		fetched, mapped := readAllChecked(t, s, path, mem)
		if mapped == 0 || mapped != fetched {
			t.Fatalf("pass %d: MappedBytes = %d, want FetchedBytes %d", pass, mapped, fetched)
		}
		if got := s.Stats().FileMaps.Load(); got != 1 {
			t.Fatalf("pass %d: %d whole-file mappings made, want 1 (the first pass maps the file, later ones reuse it)", pass, got)
		}
		if n := s.liveMaps.Load(); n != 0 {
			t.Errorf("pass %d: %d Map results not released after the reader closed, want 0", pass, n)
		}
	}
	if n := s.fileMapsLive.Load(); n != 1 {
		t.Errorf("%d whole-file mappings live before Close, want 1", n)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if n := s.fileMapsLive.Load(); n != 0 {
		t.Errorf("%d whole-file mappings live after Close, want 0", n)
	}
}

func TestMapCacheBound(t *testing.T) {
	a := mmapFile(t, compress.Codecs.Uncompressed)
	b := filepath.Join(t.TempDir(), "b.parquet")
	content, err := os.ReadFile(a)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(b, content, 0o644); err != nil {
		t.Fatal(err)
	}
	size := int64(len(content))
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)

	// Room for one file: reading b evicts a's mapping.
	s := NewLocalStore(WithMapCache(size + size/2))
	defer s.Close()
	readAllChecked(t, s, a, mem)
	readAllChecked(t, s, b, mem)
	if got := s.Stats().FileMaps.Load(); got != 2 {
		t.Errorf("%d whole-file mappings made, want 2", got)
	}
	if n := s.fileMapsLive.Load(); n != 1 {
		t.Errorf("%d whole-file mappings live, want 1 (the cache holds one file of %d bytes)", n, size)
	}
	readAllChecked(t, s, a, mem)
	if got := s.Stats().FileMaps.Load(); got != 3 {
		t.Errorf("%d whole-file mappings made after re-reading the evicted file, want 3", got)
	}

	// A file larger than the cache is mapped range by range, as without it.
	small := NewLocalStore(WithMapCache(size - 1))
	defer small.Close()
	fetched, mapped := readAllChecked(t, small, a, mem)
	if mapped != fetched {
		t.Errorf("MappedBytes = %d, want FetchedBytes %d", mapped, fetched)
	}
	if got := small.Stats().FileMaps.Load(); got != 0 {
		t.Errorf("%d whole-file mappings of a file larger than the cache, want 0", got)
	}
}

// A cached mapping pins the version it mapped: it serves the old Object
// until the new version is mapped, after which the old one is refused.
func TestMapCacheReplacedFile(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	old := make([]byte, 3*os.Getpagesize()+11)
	for i := range old {
		old[i] = byte(i)
	}
	if err := os.WriteFile(path, old, 0o644); err != nil {
		t.Fatal(err)
	}
	s := NewLocalStore(WithMapCache(1 << 20))
	defer s.Close()
	obj, err := s.Stat(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	data, release, err := s.Map(ctx, obj, 5, 100)
	if err != nil {
		t.Fatal(err)
	}
	if data[0] != 5 || data[99] != 104 {
		t.Fatalf("mapped bytes %d..%d, want 5..104", data[0], data[99])
	}
	// Replace by rename, as LocalStore.Create does.
	tmp := filepath.Join(dir, "f.tmp")
	neu := make([]byte, 2*os.Getpagesize())
	for i := range neu {
		neu[i] = 0xEE
	}
	if err := os.WriteFile(tmp, neu, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	// The mapping handed out before keeps the old bytes.
	if data[0] != 5 || data[99] != 104 {
		t.Errorf("a live mapping changed under a rename")
	}
	release()
	nobj, err := s.Stat(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	// The cached handle still serves the version it pinned, as ReadAt's does.
	data, release, err = s.Map(ctx, obj, 5, 1)
	if err != nil {
		t.Fatalf("Map of the cached old version: %v", err)
	}
	if data[0] != 5 {
		t.Errorf("Map of the cached old version returned %d, want 5", data[0])
	}
	release()
	// The new version replaces the cached handle and its mapping ...
	data, release, err = s.Map(ctx, nobj, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if data[0] != 0xEE {
		t.Errorf("Map of the new version returned %#x, want 0xee", data[0])
	}
	release()
	if got := s.Stats().FileMaps.Load(); got != 2 {
		t.Errorf("%d whole-file mappings made, want 2 (one per version)", got)
	}
	if n := s.fileMapsLive.Load(); n != 1 {
		t.Errorf("%d whole-file mappings live, want 1 (the old version's is unmapped)", n)
	}
	// ... after which the old version is gone.
	if _, _, err := s.Map(ctx, obj, 0, 10); !errors.Is(err, ErrNotFound) {
		t.Errorf("Map of the replaced version = %v, want ErrNotFound", err)
	}
	if n := s.liveMaps.Load(); n != 0 {
		t.Errorf("%d Map results not released, want 0", n)
	}
}
