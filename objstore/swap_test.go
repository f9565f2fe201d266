package objstore

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// A symlink swapped in between the listing and the open (by rename, as an
// attacker would, over and over) never leads out of the root: every read
// returns the file's own bytes or an error wrapping ErrOutsideRoot (the link,
// or a link caught changing) or ErrNotFound (a later version than the one
// listed), never the bytes outside.
func TestRootsSymlinkSwapRace(t *testing.T) {
	base := t.TempDir()
	root, outside := filepath.Join(base, "root"), filepath.Join(base, "outside")
	for _, d := range []string{root, outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	inside, secret := []byte("inside!!"), []byte("SECRET!!")
	if err := os.WriteFile(filepath.Join(outside, "secret"), secret, 0o644); err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(root, "f")
	if err := os.WriteFile(f, inside, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	listed := func() Object {
		s := NewLocalStore(WithRoots(root))
		defer s.Close()
		objs, err := Match(ctx, s, []string{root + "/*"})
		if err != nil || len(objs) != 1 {
			t.Fatalf("Match = %v, %v", objs, err)
		}
		return objs[0]
	}
	obj := listed()

	// Deterministic cases first: an escaping link and a link loop.
	for _, target := range []string{"../outside/secret", "f"} {
		tmp := filepath.Join(root, ".tmp")
		if err := os.Symlink(target, tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, f); err != nil {
			t.Fatal(err)
		}
		s := NewLocalStore(WithRoots(root))
		err := s.ReadAt(ctx, obj, make([]byte, 8), 0)
		if !errors.Is(err, ErrOutsideRoot) {
			t.Errorf("ReadAt through a link to %s swapped in = %v, want ErrOutsideRoot", target, err)
		}
		if _, _, err := s.Map(ctx, obj, 0, 8); !errors.Is(err, ErrOutsideRoot) {
			t.Errorf("Map through a link to %s swapped in = %v, want ErrOutsideRoot", target, err)
		}
		s.Close()
	}

	// The race: a swapper flips f between a regular file and a link out.
	if err := os.Remove(f); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f, inside, 0o644); err != nil {
		t.Fatal(err)
	}
	obj = listed()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		link, file := filepath.Join(root, ".link"), filepath.Join(root, ".file")
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			var err error
			if i%2 == 0 {
				os.Remove(link)
				if err = os.Symlink("../outside/secret", link); err == nil {
					err = os.Rename(link, f)
				}
			} else if err = os.WriteFile(file, inside, 0o644); err == nil {
				err = os.Rename(file, f)
			}
			if err != nil {
				t.Error(err)
				return
			}
		}
	}()
	counts := map[string]int{}
	for range 2000 {
		s := NewLocalStore(WithRoots(root))
		p := make([]byte, 8)
		err := s.ReadAt(ctx, obj, p, 0)
		s.Close()
		switch {
		case err == nil && bytes.Equal(p, inside):
			counts["inside"]++
		case err == nil:
			t.Fatalf("ReadAt returned %q, want %q or an error", p, inside)
		case errors.Is(err, ErrOutsideRoot):
			counts["outside root"]++
		case errors.Is(err, ErrNotFound):
			counts["not found"]++
		default:
			t.Fatalf("ReadAt during the swaps = %v, want ErrOutsideRoot or ErrNotFound", err)
		}
	}
	close(stop)
	wg.Wait()
	t.Logf("outcomes: %v", counts)
}

// A file truncated under the map cache (or under a cached handle) is a file
// changed since it was listed: ErrNotFound, not a fault or an I/O error.
func TestTruncatedUnderMapCache(t *testing.T) {
	ctx := context.Background()
	f := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(f, make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	s := NewLocalStore(WithMapCache(1 << 30))
	defer s.Close()
	obj, err := s.Stat(ctx, f)
	if err != nil {
		t.Fatal(err)
	}
	_, release, err := s.Map(ctx, obj, 0, 10) // maps the whole file, populates its start
	if err != nil {
		t.Fatal(err)
	}
	release()
	if err := os.Truncate(f, 1000); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Map(ctx, obj, 500<<10, 10); !errors.Is(err, ErrNotFound) {
		t.Errorf("Map of a range the truncation removed = %v, want ErrNotFound", err)
	}
	if err := s.ReadAt(ctx, obj, make([]byte, 10), 500<<10); !errors.Is(err, ErrNotFound) {
		t.Errorf("ReadAt of a range the truncation removed = %v, want ErrNotFound", err)
	}
	if n := s.Stats().LiveMaps.Load(); n != 0 {
		t.Errorf("%d Map results live, want 0", n)
	}
}
