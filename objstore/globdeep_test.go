package objstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// deepTree writes a chain of depth directories d0/d1/.../d{depth-1} under a
// new directory, with a file f.parquet and a file x.bin in each, and returns
// the directory and how many files it wrote.
func deepTree(t *testing.T, depth int) (root string, files int) {
	t.Helper()
	root = t.TempDir()
	dir := root
	for i := range depth {
		dir = filepath.Join(dir, fmt.Sprintf("d%d", i))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"f.parquet", "x.bin"} {
			if err := os.WriteFile(filepath.Join(dir, f), []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
			files++
		}
	}
	return root, files
}

// countingStore counts List calls, and runs onList (if set) after each.
type countingStore struct {
	Store
	lists  atomic.Int64
	onList func()
}

func (c *countingStore) List(ctx context.Context, prefix string) ([]Object, error) {
	c.lists.Add(1)
	objs, err := c.Store.List(ctx, prefix)
	if c.onList != nil {
		c.onList()
	}
	return objs, err
}

// A "**" pattern over a tree 30 deep is matched with work linear in the tree:
// one listing, and at most (segments of a name) x (segments of the pattern)
// automaton steps per listed name, however many "**" the pattern has (a
// backtracking matcher takes exponentially many in their number).
func TestGlobDeepTreeBounded(t *testing.T) {
	const depth = 30
	root, files := deepTree(t, depth)
	s := &countingStore{Store: NewLocalStore()}
	defer s.Close()
	ctx := context.Background()
	for _, tc := range []struct {
		rel  string
		want int // matches
	}{
		{"**/*.parquet", depth},
		{"**/d*/**/*.parquet", depth},
		{"**/d*/**/d*/**/d*/**/d*/**/d*/**/*.parquet", depth - 4},
		{"**/d*/**/d*/**/d*/**/d*/**/d*/**/d*/**/nothing", 0},
		{"d0/**/d29/*.parquet", 1},
		{"**", 2 * depth},
	} {
		pat := root + "/" + tc.rel
		g, err := compileGlob(pat)
		if err != nil {
			t.Fatal(err)
		}
		lists, steps := s.lists.Load(), matchSteps.Load()
		objs, err := Match(ctx, s, []string{pat})
		if tc.want == 0 {
			if !errors.Is(err, ErrNotFound) {
				t.Errorf("Match(%s) = %d objects, %v; want ErrNotFound", tc.rel, len(objs), err)
			}
		} else if err != nil || len(objs) != tc.want {
			t.Errorf("Match(%s) = %d objects, %v; want %d", tc.rel, len(objs), err, tc.want)
		}
		if n := s.lists.Load() - lists; n != 1 {
			t.Errorf("Match(%s) listed %d times, want once", tc.rel, n)
		}
		nameSegs := strings.Count(root, "/") + depth + 2
		bound := int64(files * nameSegs * len(g.segs))
		if n := matchSteps.Load() - steps; n > bound {
			t.Errorf("Match(%s) took %d matcher steps over %d names, want at most %d (names x their segments x the pattern's)", tc.rel, n, files, bound)
		} else {
			t.Logf("Match(%s): %d matcher steps over %d names (bound %d)", tc.rel, n, files, bound)
		}
	}
}

// The one-pass matcher agrees with a backtracking reference on every name
// of a tree and every pattern built from its segments.
func TestGlobMatchesReference(t *testing.T) {
	names := []string{"/r/a/b/c.parquet", "/r/a/_t/c.parquet", "/r/x.parquet", "/r/a/b/a/b/c.parquet", "/r/.h/a", "/r/a", "/r/a/b"}
	pats := []string{"/r/**", "/r/**/c.parquet", "/r/**/a/**/c.parquet", "/r/**/b/**", "/r/*/**/*", "/r/**/**/a", "/r/_t/**", "/r/**/_t/*", "/r/.h/**", "/r/**/b", "/r/a/**/**"}
	for _, p := range pats {
		g, err := compileGlob(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range names {
			if got, want := g.match(n), refMatch(strings.Split(p, "/"), strings.Split(n, "/")); got != want {
				t.Errorf("glob(%q).match(%q) = %v, want %v", p, n, got, want)
			}
		}
	}
}

// refMatch is the backtracking matcher the one-pass one replaced.
func refMatch(pat, name []string) bool {
	for len(pat) > 0 {
		if pat[0] == "**" {
			for len(pat) > 1 && pat[1] == "**" {
				pat = pat[1:]
			}
			rest := pat[1:]
			for i := 0; i <= len(name); i++ {
				if (len(rest) > 0 || i > 0) && refMatch(rest, name[i:]) {
					return true
				}
				if i < len(name) && hidden(name[i]) {
					return false
				}
			}
			return false
		}
		if len(name) == 0 || (hidden(name[0]) && !hidden(pat[0])) {
			return false
		}
		if ok, _ := path.Match(pat[0], name[0]); !ok {
			return false
		}
		pat, name = pat[1:], name[1:]
	}
	return len(name) == 0
}

// A cancelled context stops Match with its error: before listing, and
// between the listing and the matching (no name is matched after it).
func TestMatchCancelled(t *testing.T) {
	root, _ := deepTree(t, 30)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	s := &countingStore{Store: NewLocalStore()}
	defer s.Close()
	if _, err := Match(ctx, s, []string{root + "/**/*.parquet"}); !errors.Is(err, context.Canceled) {
		t.Errorf("Match(cancelled) = %v, want context.Canceled", err)
	}
	rs := &countingStore{Store: NewLocalStore(WithRoots(root))}
	defer rs.Close()
	if _, err := Match(ctx, rs, []string{root + "/**/*.parquet"}); !errors.Is(err, context.Canceled) {
		t.Errorf("Match(cancelled, with roots) = %v, want context.Canceled", err)
	}
	for _, pat := range []string{root + "/**/*.parquet", root} {
		ctx, cancel := context.WithCancel(context.Background())
		s.onList = cancel
		steps := matchSteps.Load()
		if _, err := Match(ctx, s, []string{pat}); !errors.Is(err, context.Canceled) {
			t.Errorf("Match(%s, cancelled after listing) = %v, want context.Canceled", pat, err)
		}
		if n := matchSteps.Load() - steps; n != 0 {
			t.Errorf("Match(%s, cancelled after listing) took %d matcher steps, want 0", pat, n)
		}
		cancel()
	}
}

// Past its limits Match fails with ErrGlobLimit naming the pattern and the
// limit.
func TestMatchLimits(t *testing.T) {
	root, _ := deepTree(t, 30)
	s := NewLocalStore()
	defer s.Close()
	ctx := context.Background()
	for _, tc := range []struct {
		pat  string
		opts []MatchOption
		say  string
	}{
		{root + "/**/*.parquet", []MatchOption{WithMaxMatches(7)}, "at most 7 per pattern"},
		{root + "/d0/*", []MatchOption{WithMaxMatches(1)}, "at most 1 per pattern"},
		{root + "/**/*.parquet", []MatchOption{WithMaxGlobDepth(10)}, "at most 10 segments deep"},
		{root + "/d0/d1/**/x.bin", []MatchOption{WithMaxGlobDepth(5)}, "at most 5 segments deep"},
	} {
		_, err := Match(ctx, s, []string{tc.pat}, tc.opts...)
		if !errors.Is(err, ErrGlobLimit) || !strings.Contains(fmt.Sprint(err), tc.pat) || !strings.Contains(fmt.Sprint(err), tc.say) {
			t.Errorf("Match(%q) = %v; want ErrGlobLimit naming the pattern and saying %q", tc.pat, err, tc.say)
		}
	}
	// Within the limits (the defaults hold a tree 30 deep), the same patterns match.
	for _, pat := range []string{root + "/**/*.parquet", root + "/d0/d1/**/x.bin"} {
		if _, err := Match(ctx, s, []string{pat}); err != nil {
			t.Errorf("Match(%q) with the default limits = %v", pat, err)
		}
	}
	// A depth limit concerns "**" alone: a one-segment glob lists deeper
	// names but cannot reach them.
	if objs, err := Match(ctx, s, []string{root + "/d0/*.parquet"}, WithMaxGlobDepth(1)); err != nil || len(objs) != 1 {
		t.Errorf("Match(d0/*.parquet, depth 1) = %d objects, %v; want 1", len(objs), err)
	}
}

// Malformed globs and NUL bytes are refused with their sentinels.
func TestMatchBadInput(t *testing.T) {
	s := NewLocalStore()
	defer s.Close()
	ctx := context.Background()
	dir := t.TempDir()
	for _, pat := range []string{dir + "/[x", dir + "/a/[]a]/*"} {
		_, err := Match(ctx, s, []string{pat})
		if !errors.Is(err, ErrBadPattern) || !errors.Is(err, path.ErrBadPattern) || !strings.Contains(fmt.Sprint(err), pat) {
			t.Errorf("Match(%q) = %v, want ErrBadPattern (and path.ErrBadPattern) naming it", pat, err)
		}
	}
	nul := dir + "/a\x00b.parquet"
	if _, err := Match(ctx, s, []string{nul}); !errors.Is(err, ErrInvalidPath) {
		t.Errorf("Match(NUL) = %v, want ErrInvalidPath", err)
	}
	if _, err := s.Stat(ctx, nul); !errors.Is(err, ErrInvalidPath) {
		t.Errorf("Stat(NUL) = %v, want ErrInvalidPath", err)
	}
	if err := s.ReadAt(ctx, Object{URI: nul}, make([]byte, 1), 0); !errors.Is(err, ErrInvalidPath) {
		t.Errorf("ReadAt(NUL) = %v, want ErrInvalidPath", err)
	}
	if _, _, err := ParseGCSURI("gs://b/a\x00b"); !errors.Is(err, ErrInvalidPath) {
		t.Errorf("ParseGCSURI(NUL) = %v, want ErrInvalidPath", err)
	}
}
