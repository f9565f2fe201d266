package loader_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/meshfeed/meshfeed/internal/datagen"
	"github.com/meshfeed/meshfeed/loader"
)

// rootTree builds, in a new directory:
//
//	outside/secret.parquet, outside/dir/s.parquet    (a real dataset outside the root)
//	root/data/part-00000.parquet ...                 (a real dataset inside)
//	root/linkdir     -> ../outside                   (symlinked directory leading out)
//	root/secret.parquet -> ../outside/secret.parquet (symlinked file leading out)
//	root/abs.parquet -> <absolute path of a file inside root>
//	root/chain/hop.parquet -> ../hop2.parquet, root/hop2.parquet -> ../outside/secret.parquet
//	root/expand/ok.parquet (a file), root/expand/out -> ../../outside/dir (dir symlink leading out)
//	root/expand2/leak.parquet -> ../../outside/secret.parquet
//	root/inside -> data                              (symlinked directory staying inside)
//	root/inside.parquet -> data/part-00000.parquet   (symlinked file staying inside)
//
// and returns the root and the outside directory.
func rootTree(t *testing.T) (root, outside string) {
	t.Helper()
	base := t.TempDir()
	root, outside = filepath.Join(base, "root"), filepath.Join(base, "outside")
	spec := datagen.DefaultSpec()
	spec.Rows, spec.Files, spec.RowGroupRows, spec.Features = 20, 1, 10, 2
	ctx := context.Background()
	for _, d := range []string{filepath.Join(root, "data"), filepath.Join(outside, "dir")} {
		if _, err := datagen.Write(ctx, datagen.LocalCreator{}, d, spec); err != nil {
			t.Fatal(err)
		}
	}
	first := func(dir string) string {
		m, _ := filepath.Glob(filepath.Join(dir, "*.parquet"))
		if len(m) == 0 {
			t.Fatalf("no parquet file in %s", dir)
		}
		return m[0]
	}
	in := first(filepath.Join(root, "data"))
	copyFile(t, first(filepath.Join(outside, "dir")), filepath.Join(outside, "secret.parquet"))
	for _, d := range []string{"chain", "expand", "expand2"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	copyFile(t, in, filepath.Join(root, "expand", "ok.parquet"))
	links := [][2]string{
		{"../outside", "linkdir"},
		{"../outside/secret.parquet", "secret.parquet"},
		{in, "abs.parquet"},
		{"../hop2.parquet", "chain/hop.parquet"},
		{"../outside/secret.parquet", "hop2.parquet"},
		{"../../outside/dir", "expand/out"},
		{"../../outside/secret.parquet", "expand2/leak.parquet"},
		{"data", "inside"},
		{"data/" + filepath.Base(in), "inside.parquet"},
	}
	for _, l := range links {
		if err := os.Symlink(l[0], filepath.Join(root, l[1])); err != nil {
			t.Fatal(err)
		}
	}
	return root, outside
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// rootEscapes are the patterns that try to leave the root through it, as
// paths relative to the root (joined to it).
var rootEscapes = []struct{ name, rel string }{
	{"symlinked dir to outside, by path", "linkdir/secret.parquet"},
	{"symlinked dir to outside, as a directory", "linkdir"},
	{"symlinked file to outside", "secret.parquet"},
	{"dot-dot in the path", "data/../../outside/secret.parquet"},
	{"glob through a symlinked dir", "linkdir/*.parquet"},
	{"glob through a symlinked dir, deeper", "linkdir/*/*.parquet"},
	{"glob matching a symlinked file", "*.parquet"},
	{"directory expansion meets a symlinked file leading out", "expand2"},
	{"directory expansion meets a symlinked dir leading out", "expand"},
	{"recursive glob meets a symlinked dir leading out", "expand/**"},
	{"absolute symlink", "abs.parquet"},
	{"symlink chain that ends outside", "chain/hop.parquet"},
	{"symlink chain that ends outside, by glob", "chain/*.parquet"},
}

func TestRootsRefuseEscapes(t *testing.T) {
	root, outside := rootTree(t)
	ctx := context.Background()
	store, err := loader.NewStore(ctx, loader.WithLocalOptions(loader.WithRoots(root)))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	for _, tc := range rootEscapes {
		t.Run(tc.name, func(t *testing.T) {
			pat := root + "/" + tc.rel
			objs, err := loader.Match(ctx, store, []string{pat})
			if !errors.Is(err, loader.ErrOutsideRoot) {
				t.Fatalf("Match(%s) = %v, %v; want an error wrapping ErrOutsideRoot", tc.rel, uris(objs), err)
			}
			if tc.rel != "data/../../outside/secret.parquet" && !strings.Contains(err.Error(), root) {
				t.Errorf("error %q does not name the root %s", err, root)
			}
			if _, err := loader.Open(ctx, store, []string{pat}); !errors.Is(err, loader.ErrOutsideRoot) {
				t.Errorf("Open(%s) = %v; want ErrOutsideRoot", tc.rel, err)
			}
		})
	}
	// Reading an object by a URI that leads out is refused too (a listing
	// cannot be forged around the check: opening goes through the root).
	for _, rel := range []string{"linkdir/secret.parquet", "secret.parquet", "chain/hop.parquet", "abs.parquet"} {
		obj := loader.Object{URI: root + "/" + rel}
		if err := store.ReadAt(ctx, obj, make([]byte, 4), 0); !errors.Is(err, loader.ErrOutsideRoot) {
			t.Errorf("ReadAt(%s) = %v; want ErrOutsideRoot", rel, err)
		}
		if _, _, err := store.Map(ctx, obj, 0, 4); !errors.Is(err, loader.ErrOutsideRoot) {
			t.Errorf("Map(%s) = %v; want ErrOutsideRoot", rel, err)
		}
	}
	// Paths under no root at all.
	if _, err := loader.Match(ctx, store, []string{outside + "/secret.parquet"}); !errors.Is(err, loader.ErrOutsideRoot) {
		t.Errorf("Match(outside) = %v; want ErrOutsideRoot", err)
	}
	// The same tree without roots serves the files outside (what the roots guard).
	plain, err := loader.NewStore(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if objs, err := loader.Match(ctx, plain, []string{root + "/linkdir/*.parquet"}); err != nil || len(objs) != 1 {
		t.Errorf("without roots: Match(linkdir/*.parquet) = %v, %v; want the file outside", uris(objs), err)
	}
}

func TestRootsFollowLinksInside(t *testing.T) {
	root, _ := rootTree(t)
	ctx := context.Background()
	store, err := loader.NewStore(ctx, loader.WithLocalOptions(loader.WithRoots(root, "/nonexistent-meshfeed-root")))
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
	// A root that does not exist: its paths are not found, not outside.
	if _, err := loader.Match(ctx, store, []string{"/nonexistent-meshfeed-root/x.parquet"}); !errors.Is(err, loader.ErrNotFound) {
		t.Errorf("Match under a missing root = %v; want ErrNotFound", err)
	}
}

// TestRootsNested: a path is resolved against the outermost root holding it,
// so a link from an inner root into the rest of an outer one is allowed, and
// refused when only the inner root is allowed.
func TestRootsNested(t *testing.T) {
	root, _ := rootTree(t)
	inner := root + "/data"
	if err := os.Symlink("../expand/ok.parquet", inner+"/up.parquet"); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, tc := range []struct {
		roots []string
		ok    bool
	}{{[]string{inner, root}, true}, {[]string{root, inner}, true}, {[]string{inner}, false}} {
		store := loader.NewLocalStore(loader.WithRoots(tc.roots...))
		objs, err := loader.Match(ctx, store, []string{inner + "/up.parquet"})
		if tc.ok && (err != nil || len(objs) != 1) {
			t.Errorf("roots %v: Match = %v, %v; want the file", tc.roots, uris(objs), err)
		}
		if !tc.ok && !errors.Is(err, loader.ErrOutsideRoot) {
			t.Errorf("roots %v: Match = %v, %v; want ErrOutsideRoot", tc.roots, uris(objs), err)
		}
		store.Close()
	}
}
