package objstore

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

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
	if n := s.Stats().LiveFileMaps.Load(); n != 1 {
		t.Errorf("%d whole-file mappings live, want 1 (the old version's is unmapped)", n)
	}
	// ... after which the old version is gone.
	if _, _, err := s.Map(ctx, obj, 0, 10); !errors.Is(err, ErrNotFound) {
		t.Errorf("Map of the replaced version = %v, want ErrNotFound", err)
	}
	if n := s.Stats().LiveMaps.Load(); n != 0 {
		t.Errorf("%d Map results not released, want 0", n)
	}
}
