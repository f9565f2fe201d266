package objstore

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// mappedFile writes n bytes (byte i is i*7 + i>>shift) to a file of its
// own and returns them, its path, a LocalStore (closed with the test) and
// the file's Object.
func mappedFile(t *testing.T, n int, shift uint, opts ...LocalOption) ([]byte, string, *LocalStore, Object) {
	t.Helper()
	content := make([]byte, n)
	for i := range content {
		content[i] = byte(i*7 + i>>shift)
	}
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, content, 0o644); err != nil {
		t.Fatal(err)
	}
	s := NewLocalStore(opts...)
	t.Cleanup(func() { s.Close() })
	obj, err := s.Stat(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	return content, path, s, obj
}

func TestLocalStoreMap(t *testing.T) {
	ctx := context.Background()
	content, path, s, obj := mappedFile(t, 3*os.Getpagesize()+123, 8)
	size := int64(len(content))
	for _, tc := range []struct {
		off, n  int64
		wantErr error
	}{
		{0, size, nil},
		{1, 10, nil},
		{int64(os.Getpagesize()) - 3, 7, nil}, // straddles a page boundary
		{size - 1, 1, nil},
		{100, 0, nil},
		{size - 1, 2, io.ErrUnexpectedEOF},
		{size + 5, 1, io.ErrUnexpectedEOF},
	} {
		b, release, err := s.Map(ctx, obj, tc.off, tc.n)
		if tc.wantErr != nil {
			if !errors.Is(err, tc.wantErr) {
				t.Errorf("Map(%d, %d) = %v, want %v", tc.off, tc.n, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("Map(%d, %d) = %v, want nil", tc.off, tc.n, err)
			continue
		}
		if !bytes.Equal(b, content[tc.off:tc.off+tc.n]) {
			t.Errorf("Map(%d, %d) returned other bytes than the file's", tc.off, tc.n)
		}
		release()
	}
	if n := s.Stats().LiveMaps.Load(); n != 0 {
		t.Errorf("%d mappings live after release, want 0", n)
	}
	// A replaced file is another version: Map refuses it, as ReadAt does.
	if err := os.WriteFile(path, content[:100], 0o644); err != nil {
		t.Fatal(err)
	}
	s.forget(path)
	if _, _, err := s.Map(ctx, obj, 0, 10); !errors.Is(err, ErrNotFound) {
		t.Errorf("Map of a replaced file = %v, want ErrNotFound", err)
	}
}
