package loader

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/compress"

	"github.com/meshfeed/meshfeed/objstore"
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
	s := objstore.NewLocalStore(objstore.WithMapCache(info.Size()))
	for pass := range 3 {
		fetched, mapped := readAllChecked(t, s, path, mem)
		if mapped == 0 || mapped != fetched {
			t.Fatalf("pass %d: MappedBytes = %d, want FetchedBytes %d", pass, mapped, fetched)
		}
		if got := s.Stats().FileMaps.Load(); got != 1 {
			t.Fatalf("pass %d: %d whole-file mappings made, want 1 (the first pass maps the file, later ones reuse it)", pass, got)
		}
		if n := s.Stats().LiveMaps.Load(); n != 0 {
			t.Errorf("pass %d: %d Map results not released after the reader closed, want 0", pass, n)
		}
	}
	if n := s.Stats().LiveFileMaps.Load(); n != 1 {
		t.Errorf("%d whole-file mappings live before Close, want 1", n)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if n := s.Stats().LiveFileMaps.Load(); n != 0 {
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
	s := objstore.NewLocalStore(objstore.WithMapCache(size + size/2))
	defer s.Close()
	readAllChecked(t, s, a, mem)
	readAllChecked(t, s, b, mem)
	if got := s.Stats().FileMaps.Load(); got != 2 {
		t.Errorf("%d whole-file mappings made, want 2", got)
	}
	if n := s.Stats().LiveFileMaps.Load(); n != 1 {
		t.Errorf("%d whole-file mappings live, want 1 (the cache holds one file of %d bytes)", n, size)
	}
	readAllChecked(t, s, a, mem)
	if got := s.Stats().FileMaps.Load(); got != 3 {
		t.Errorf("%d whole-file mappings made after re-reading the evicted file, want 3", got)
	}

	// A file larger than the cache is mapped range by range, as without it.
	small := objstore.NewLocalStore(objstore.WithMapCache(size - 1))
	defer small.Close()
	fetched, mapped := readAllChecked(t, small, a, mem)
	if mapped != fetched {
		t.Errorf("MappedBytes = %d, want FetchedBytes %d", mapped, fetched)
	}
	if got := small.Stats().FileMaps.Load(); got != 0 {
		t.Errorf("%d whole-file mappings of a file larger than the cache, want 0", got)
	}
}
