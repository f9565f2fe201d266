package objstore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
)

// WithRoots confines a [LocalStore] to the given directories: every path it
// lists, stats, reads or maps must lie under one of them, and is resolved
// against that directory the way [os.Root] resolves names: a symlink or ".."
// that leads out of the root is refused, at every component and for every
// file reached through a directory or a glob, while symlinks that stay inside
// the root are followed. Files are opened through the os.Root, so nothing can
// be swapped between the check and the open. A path under no root, or one
// that escapes its root, is an error wrapping ErrOutsideRoot that names the
// path and the root. When roots nest, a path is resolved against the
// outermost one that lexically holds it (so a symlink from an inner root to
// elsewhere in the outer one is allowed).
//
// Roots are made absolute against the working directory; a root that does
// not exist (yet) makes the paths under it not found. Create is not
// confined. What a root does not guard against (hard links, bind mounts,
// files replaced after they were opened) is listed in docs/PROTOCOL.md.
// Default: no roots, every path is served as is.
func WithRoots(roots ...string) LocalOption {
	return func(c *localConfig) {
		for _, r := range roots {
			if abs, err := filepath.Abs(r); err == nil {
				c.roots = append(c.roots, abs)
			} else {
				c.roots = append(c.roots, filepath.Clean(r))
			}
		}
	}
}

// rootSet holds a store's roots and their os.Root handles, opened on first
// use (a root that cannot be opened is retried next time).
type rootSet struct {
	paths []string // absolute, cleaned

	mu     sync.Mutex
	opened map[string]*os.Root
	closed bool
}

// rooted is a path resolved against its root: the path lies lexically under
// dir, at rel (slash-separated, "." for the root itself).
type rooted struct {
	root *os.Root
	dir  string
	rel  string
}

// escapeErr is the error os.Root returns for a name that leads out of the
// root (unexported in package os; found once by asking for "..").
var escapeErr = sync.OnceValue(func() error {
	r, err := os.OpenRoot(os.TempDir())
	if err != nil {
		return nil
	}
	defer r.Close()
	_, err = r.Stat("..")
	for err != nil {
		u := errors.Unwrap(err)
		if u == nil {
			return err
		}
		err = u
	}
	return nil
})

// escapes reports whether err says that a name led out of its root.
func escapes(err error) bool {
	if err == nil {
		return false
	}
	if e := escapeErr(); e != nil && errors.Is(err, e) {
		return true
	}
	return strings.Contains(err.Error(), "path escapes from parent")
}

// holder returns the outermost (shortest) root that lexically holds p
// (absolute, cleaned): an inner root adds nothing to the outer one, and a
// symlink from the inner one into the rest of the outer one stays allowed.
func (rs *rootSet) holder(p string) (string, bool) {
	best := ""
	for _, r := range rs.paths {
		if (p == r || strings.HasPrefix(p, strings.TrimSuffix(r, "/")+"/")) && (best == "" || len(r) < len(best)) {
			best = r
		}
	}
	return best, best != ""
}

// resolve returns the root of p (absolute and cleaned, a trailing slash
// allowed), opening it if needed.
func (rs *rootSet) resolve(p string) (rooted, error) {
	clean := filepath.Clean(p)
	dir, ok := rs.holder(clean)
	if !ok {
		return rooted{}, fmt.Errorf("objstore: %s: %w: it is not under any of them (%s)", clean, ErrOutsideRoot, strings.Join(rs.paths, ", "))
	}
	rel, err := filepath.Rel(dir, clean)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return rooted{}, fmt.Errorf("objstore: %s: %w: it is not under the root %s", clean, ErrOutsideRoot, dir)
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.closed {
		return rooted{}, fmt.Errorf("objstore: %s: store is closed", clean)
	}
	r := rs.opened[dir]
	if r == nil {
		if r, err = os.OpenRoot(dir); err != nil {
			return rooted{}, localErr("open root", dir, err)
		}
		if rs.opened == nil {
			rs.opened = make(map[string]*os.Root)
		}
		rs.opened[dir] = r
	}
	return rooted{root: r, dir: dir, rel: filepath.ToSlash(rel)}, nil
}

// abs returns the absolute path of rel, a name inside the root.
func (r rooted) abs(rel string) string {
	if rel == "." || rel == "" {
		return r.dir
	}
	return filepath.Join(r.dir, filepath.FromSlash(rel))
}

// err turns an error of an os.Root call on name into the store's: an escape
// wraps ErrOutsideRoot and names the path and the root; a missing file wraps
// ErrNotFound.
func (r rooted) err(op, name string, err error) error {
	p := r.abs(name)
	if escapes(err) {
		return fmt.Errorf("objstore: %s %s: %w: it resolves outside the root %s (a symlink or \"..\" on the way leads out of it; symlinks must stay inside the root)",
			op, p, ErrOutsideRoot, r.dir)
	}
	return localErr(op, p, err)
}

func (rs *rootSet) close() {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.closed = true
	for _, r := range rs.opened {
		r.Close()
	}
	rs.opened = nil
}

// openLocal opens path for reading: through its root when the store has
// roots, else directly.
func (s *LocalStore) openLocal(p string) (*os.File, error) {
	if s.roots == nil {
		f, err := os.Open(p)
		if err != nil {
			return nil, localErr("open", p, err)
		}
		return f, nil
	}
	r, err := s.roots.resolve(p)
	if err != nil {
		return nil, err
	}
	f, err := r.root.Open(r.rel)
	if err != nil {
		return nil, r.err("open", r.rel, err)
	}
	return f, nil
}

// statLocal stats path (following symlinks): through its root when the
// store has roots.
func (s *LocalStore) statLocal(p string) (fs.FileInfo, error) {
	if s.roots == nil {
		info, err := os.Stat(p)
		if err != nil {
			return nil, localErr("stat", p, err)
		}
		return info, nil
	}
	r, err := s.roots.resolve(p)
	if err != nil {
		return nil, err
	}
	info, err := r.root.Stat(r.rel)
	if err != nil {
		return nil, r.err("stat", r.rel, err)
	}
	return info, nil
}

// listRooted is List for a store with roots: it walks the directory part of
// prefix inside its root. Symlinks to files are followed inside the root;
// those that lead out of it are not listed but returned in escaped (absolute
// paths), so that Match can refuse a pattern that would have matched one.
// Symlinks to directories are not descended, as without roots.
func (s *LocalStore) listRooted(abs string) (objs []Object, escaped []escapedEntry, err error) {
	dirPath := abs
	if !strings.HasSuffix(abs, "/") {
		dirPath = filepath.Dir(abs)
	}
	r, err := s.roots.resolve(dirPath)
	if err != nil {
		if errors.Is(err, ErrOutsideRoot) && !strings.HasSuffix(abs, "/") {
			// The prefix names a path in the parent of a root (a root
			// itself without its slash): list the root if it matches.
			if dir, ok := s.roots.holder(filepath.Clean(abs)); ok {
				return s.listRooted(dir + "/")
			}
		}
		return nil, nil, err
	}
	fsys := r.root.FS()
	err = fs.WalkDir(fsys, r.rel, func(rel string, d fs.DirEntry, err error) error {
		p := r.abs(rel)
		if err != nil {
			if rel == r.rel && (errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR)) {
				return fs.SkipAll
			}
			return r.err("list", rel, err)
		}
		if d.IsDir() {
			dir := withSlash(p)
			if rel != r.rel && !strings.HasPrefix(dir, abs) && !strings.HasPrefix(abs, dir) {
				return fs.SkipDir
			}
			return nil
		}
		if !strings.HasPrefix(p, abs) {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return r.err("stat", rel, err)
		}
		if info.Mode()&fs.ModeSymlink != 0 {
			if info, err = r.root.Stat(rel); err != nil {
				if escapes(err) {
					escaped = append(escaped, escapedEntry{p, r.err("stat", rel, err)})
				}
				return nil // dangling link: not a file
			}
		}
		if !info.Mode().IsRegular() {
			return nil
		}
		objs = append(objs, Object{URI: p, Size: info.Size(), ModTime: info.ModTime()})
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("objstore: list %s: %w", abs, err)
	}
	return objs, escaped, nil
}

// escapeLister is implemented by the stores that can say which entries of a
// listing were left out because they lead out of a root.
type escapeLister interface {
	listEscapes(ctx context.Context, prefix string) ([]Object, []escapedEntry, error)
}

// escapedEntry is a listed symlink that leads out of its root, and the error
// (wrapping ErrOutsideRoot) that names it and the root.
type escapedEntry struct {
	uri string
	err error
}

// checkEscaped returns the error of the first of escaped that keep (the
// pattern's filter) accepts.
func checkEscaped(pat string, escaped []escapedEntry, keep func(string) bool) error {
	for _, e := range escaped {
		if keep(e.uri) {
			return fmt.Errorf("objstore: pattern %q matches a symlink leading out of its root: %w", pat, e.err)
		}
	}
	return nil
}

// listEscapes implements escapeLister.
func (s *LocalStore) listEscapes(ctx context.Context, prefix string) ([]Object, []escapedEntry, error) {
	if s.roots == nil {
		objs, err := s.List(ctx, prefix)
		return objs, nil, err
	}
	abs, err := localPath(prefix, true)
	if err != nil {
		return nil, nil, err
	}
	objs, escaped, err := s.listRooted(abs)
	if err != nil {
		return nil, nil, err
	}
	sort.Slice(objs, func(i, j int) bool { return objs[i].URI < objs[j].URI })
	return objs, escaped, nil
}

// listEscapes implements escapeLister for local paths.
func (m *Mux) listEscapes(ctx context.Context, prefix string) ([]Object, []escapedEntry, error) {
	s, err := m.route(ctx, prefix)
	if err != nil {
		return nil, nil, err
	}
	if l, ok := s.(escapeLister); ok {
		return l.listEscapes(ctx, prefix)
	}
	objs, err := s.List(ctx, prefix)
	return objs, nil, err
}

// listFor lists prefix with store, and the escaped entries when the store
// can tell them.
func listFor(ctx context.Context, store Store, prefix string) ([]Object, []escapedEntry, error) {
	if l, ok := store.(escapeLister); ok {
		return l.listEscapes(ctx, prefix)
	}
	objs, err := store.List(ctx, prefix)
	return objs, nil, err
}
