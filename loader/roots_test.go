package loader_test

import (
	"context"
	"errors"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/meshfeed/meshfeed/loader"
	"github.com/meshfeed/meshfeed/objstore"
	"github.com/meshfeed/meshfeed/objstore/objstoretest"
)

// Open over a store with roots: every pattern that leads out of a root is
// refused with objstore.ErrOutsideRoot (objstore's tests check the store's
// side: listing, matching, reading, mapping), and symlinks that stay inside
// the root are datasets like any other.

func TestOpenRefusesRootEscapes(t *testing.T) {
	root, _ := objstoretest.RootTree(t)
	ctx := context.Background()
	store, err := objstore.NewStore(ctx, objstore.WithLocalOptions(objstore.WithRoots(root)))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	for _, tc := range objstoretest.RootEscapes {
		t.Run(tc.Name, func(t *testing.T) {
			if _, err := loader.Open(ctx, store, []string{root + "/" + tc.Rel}); !errors.Is(err, objstore.ErrOutsideRoot) {
				t.Errorf("Open(%s) = %v; want ErrOutsideRoot", tc.Rel, err)
			}
		})
	}
}

func TestOpenFollowsLinksInsideRoots(t *testing.T) {
	root, _ := objstoretest.RootTree(t)
	ctx := context.Background()
	store, err := objstore.NewStore(ctx, objstore.WithLocalOptions(objstore.WithRoots(root, "/nonexistent-meshfeed-root")))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	want, err := loader.Open(ctx, store, []string{root + "/data"})
	if err != nil {
		t.Fatalf("Open(data) = %v", err)
	}
	for _, rel := range []string{"inside", "inside/", "inside/*.parquet", "inside.parquet", "data/../inside"} {
		ds, err := loader.Open(ctx, store, []string{root + "/" + rel})
		if err != nil {
			t.Errorf("Open(%s) = %v; want the dataset (the symlink stays inside the root)", rel, err)
			continue
		}
		if ds.NumRows() != want.NumRows() {
			t.Errorf("Open(%s): %d rows, want %d", rel, ds.NumRows(), want.NumRows())
		}
		rec, err := ds.ReadRowGroup(ctx, 0, 0, memory.DefaultAllocator)
		if err != nil || rec.NumRows() == 0 {
			t.Errorf("Open(%s): reading row group 0 = %v", rel, err)
		}
		if rec != nil {
			rec.Release()
		}
	}
}
