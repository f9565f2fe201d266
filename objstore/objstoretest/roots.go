package objstoretest

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/meshfeed/meshfeed/internal/datagen"
)

// RootTree builds, in a new directory:
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
func RootTree(t *testing.T) (root, outside string) {
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

// RootEscapes are the patterns that try to leave the root through it, as
// paths relative to the root (joined to it).
var RootEscapes = []struct{ Name, Rel string }{
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
