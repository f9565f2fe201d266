package objstore_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/meshfeed/meshfeed/objstore"
	"github.com/meshfeed/meshfeed/objstore/objstoretest"
)

func TestRootsRefuseEscapes(t *testing.T) {
	root, outside := objstoretest.RootTree(t)
	ctx := context.Background()
	store, err := objstore.NewStore(ctx, objstore.WithLocalOptions(objstore.WithRoots(root)))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	for _, tc := range objstoretest.RootEscapes {
		t.Run(tc.Name, func(t *testing.T) {
			pat := root + "/" + tc.Rel
			objs, err := objstore.Match(ctx, store, []string{pat})
			if !errors.Is(err, objstore.ErrOutsideRoot) {
				t.Fatalf("Match(%s) = %v, %v; want an error wrapping ErrOutsideRoot", tc.Rel, uris(objs), err)
			}
			if tc.Rel != "data/../../outside/secret.parquet" && !strings.Contains(err.Error(), root) {
				t.Errorf("error %q does not name the root %s", err, root)
			}
		})
	}
	// Reading an object by a URI that leads out is refused too (a listing
	// cannot be forged around the check: opening goes through the root).
	for _, rel := range []string{"linkdir/secret.parquet", "secret.parquet", "chain/hop.parquet", "abs.parquet"} {
		obj := objstore.Object{URI: root + "/" + rel}
		if err := store.ReadAt(ctx, obj, make([]byte, 4), 0); !errors.Is(err, objstore.ErrOutsideRoot) {
			t.Errorf("ReadAt(%s) = %v; want ErrOutsideRoot", rel, err)
		}
		if _, _, err := store.Map(ctx, obj, 0, 4); !errors.Is(err, objstore.ErrOutsideRoot) {
			t.Errorf("Map(%s) = %v; want ErrOutsideRoot", rel, err)
		}
	}
	// Paths under no root at all.
	if _, err := objstore.Match(ctx, store, []string{outside + "/secret.parquet"}); !errors.Is(err, objstore.ErrOutsideRoot) {
		t.Errorf("Match(outside) = %v; want ErrOutsideRoot", err)
	}
	// The same tree without roots serves the files outside (what the roots guard).
	plain, err := objstore.NewStore(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if objs, err := objstore.Match(ctx, plain, []string{root + "/linkdir/*.parquet"}); err != nil || len(objs) != 1 {
		t.Errorf("without roots: Match(linkdir/*.parquet) = %v, %v; want the file outside", uris(objs), err)
	}
}

func TestRootsFollowLinksInside(t *testing.T) {
	root, _ := objstoretest.RootTree(t)
	ctx := context.Background()
	store, err := objstore.NewStore(ctx, objstore.WithLocalOptions(objstore.WithRoots(root, "/nonexistent-meshfeed-root")))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	want, err := objstore.Match(ctx, store, []string{root + "/data"})
	if err != nil || len(want) != 1 {
		t.Fatalf("Match(data) = %v, %v; want one file", uris(want), err)
	}
	wantBytes := make([]byte, want[0].Size)
	if err := store.ReadAt(ctx, want[0], wantBytes, 0); err != nil {
		t.Fatal(err)
	}
	for _, rel := range []string{"inside", "inside/", "inside/*.parquet", "inside.parquet", "data/../inside"} {
		objs, err := objstore.Match(ctx, store, []string{root + "/" + rel})
		if err != nil || len(objs) != 1 {
			t.Errorf("Match(%s) = %v, %v; want one file (the symlink stays inside the root)", rel, uris(objs), err)
			continue
		}
		p := make([]byte, objs[0].Size)
		if err := store.ReadAt(ctx, objs[0], p, 0); err != nil || !bytes.Equal(p, wantBytes) {
			t.Errorf("Match(%s): reading %s = %v, want the bytes of %s", rel, objs[0].URI, err, want[0].URI)
		}
		data, release, err := store.Map(ctx, objs[0], 0, objs[0].Size)
		if err != nil || !bytes.Equal(data, wantBytes) {
			t.Errorf("Match(%s): mapping %s = %v, want the bytes of %s", rel, objs[0].URI, err, want[0].URI)
		}
		if release != nil {
			release()
		}
	}
	// A root that does not exist: its paths are not found, not outside.
	if _, err := objstore.Match(ctx, store, []string{"/nonexistent-meshfeed-root/x.parquet"}); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("Match under a missing root = %v; want ErrNotFound", err)
	}
}

// TestRootsNested: a path is resolved against the outermost root holding it,
// so a link from an inner root into the rest of an outer one is allowed, and
// refused when only the inner root is allowed.
func TestRootsNested(t *testing.T) {
	root, _ := objstoretest.RootTree(t)
	inner := root + "/data"
	if err := os.Symlink("../expand/ok.parquet", inner+"/up.parquet"); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, tc := range []struct {
		roots []string
		ok    bool
	}{{[]string{inner, root}, true}, {[]string{root, inner}, true}, {[]string{inner}, false}} {
		store := objstore.NewLocalStore(objstore.WithRoots(tc.roots...))
		objs, err := objstore.Match(ctx, store, []string{inner + "/up.parquet"})
		if tc.ok && (err != nil || len(objs) != 1) {
			t.Errorf("roots %v: Match = %v, %v; want the file", tc.roots, uris(objs), err)
		}
		if !tc.ok && !errors.Is(err, objstore.ErrOutsideRoot) {
			t.Errorf("roots %v: Match = %v, %v; want ErrOutsideRoot", tc.roots, uris(objs), err)
		}
		store.Close()
	}
}
