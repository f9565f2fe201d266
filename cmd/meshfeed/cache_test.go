package main

import (
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCacheFlags: --cache-dir makes the directory and a cache over it;
// without it there is none; a size that cannot hold a block is refused,
// naming the flag.
func TestCacheFlags(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cache")
	for _, c := range []struct {
		args    []string
		want    bool
		wantErr string
	}{
		{nil, false, ""},
		{[]string{"--cache-dir", dir}, true, ""},
		{[]string{"--cache-dir", dir, "--cache-size", "1000"}, false, "--cache-dir " + dir + ": objstore: cache"},
		{[]string{"--cache-dir", dir, "--cache-size", "0"}, false, "--cache-size 0"},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		f := newCacheFlags(fs)
		if err := fs.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		cache, opts, err := f.open()
		switch {
		case c.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("open(%q) = %v, want an error containing %q", c.args, err, c.wantErr)
			}
		case err != nil:
			t.Errorf("open(%q) = %v", c.args, err)
		case (cache != nil) != c.want || len(opts) != len(c.args)/2:
			t.Errorf("open(%q) = cache %v, %d options; want a cache: %v", c.args, cache, len(opts), c.want)
		case c.want:
			if st, err := os.Stat(dir); err != nil || !st.IsDir() || cache.Dir() != dir {
				t.Errorf("open(%q): directory %s not made (%v)", c.args, dir, err)
			}
		}
	}
}
