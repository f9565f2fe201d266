package objstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"sort"
	"strings"
)

// Match expands patterns into the objects they name, deduplicated and sorted
// by URI. Each pattern, local or gs://, is one of:
//
//   - an exact file or object;
//   - a directory (or gs:// prefix followed by "/"): every file under it,
//     recursively;
//   - a glob: "*", "?" and "[...]" match within one path segment as in
//     path.Match, and a segment "**" matches any number of segments. The
//     store lists the longest literal prefix of the glob; matching is done
//     here, never by the server.
//
// Names starting with '.' or '_' (_SUCCESS, .crc files, _temporary/) are
// skipped when they are reached through a directory or a wildcard; a pattern
// segment that itself starts with '.' or '_' can name them. Relative local
// patterns resolve against the working directory.
//
// A pattern that matches nothing is an error wrapping ErrNotFound that names
// it; a malformed glob is an error wrapping path.ErrBadPattern.
func Match(ctx context.Context, store Store, patterns []string) ([]Object, error) {
	if len(patterns) == 0 {
		return nil, fmt.Errorf("objstore: no input patterns given: %w", ErrNotFound)
	}
	seen := make(map[string]Object)
	for _, pat := range patterns {
		objs, err := matchOne(ctx, store, pat)
		if err != nil {
			return nil, err
		}
		if len(objs) == 0 {
			return nil, noMatch(pat)
		}
		for _, o := range objs {
			seen[o.URI] = o
		}
	}
	out := make([]Object, 0, len(seen))
	for _, o := range seen {
		out = append(out, o)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].URI < out[j].URI })
	return out, nil
}

func noMatch(pat string) error {
	hint := "check the bucket and object names and that the credentials may list the bucket"
	if uriScheme(pat) == "" {
		wd, _ := os.Getwd()
		hint = fmt.Sprintf("check that the path exists and is readable (relative paths resolve against %s)", wd)
	}
	return fmt.Errorf("objstore: %q matched no files: %w; %s; names starting with '.' or '_' are skipped unless named", pat, ErrNotFound, hint)
}

// globMeta are the characters that make a pattern a glob ('\\' escapes).
const globMeta = "*?[\\"

func matchOne(ctx context.Context, store Store, pat string) ([]Object, error) {
	norm := pat
	if uriScheme(pat) == "" {
		p, err := localPath(pat, true)
		if err != nil {
			return nil, err
		}
		norm = p
	}
	if strings.ContainsAny(norm, globMeta) {
		return matchGlob(ctx, store, pat, norm)
	}
	if !strings.HasSuffix(norm, "/") {
		o, err := store.Stat(ctx, norm)
		if err == nil {
			return []Object{o}, nil
		}
		if !errors.Is(err, ErrNotFound) {
			return nil, err
		}
	}
	// A directory: everything under it that is not hidden.
	dir := withSlash(norm)
	objs, escaped, err := listFor(ctx, store, dir)
	if err != nil {
		return nil, err
	}
	if err := checkEscaped(pat, escaped, func(u string) bool { return !hiddenPath(strings.TrimPrefix(u, dir)) }); err != nil {
		return nil, err
	}
	out := objs[:0]
	for _, o := range objs {
		rel := strings.TrimPrefix(o.URI, dir)
		if !hiddenPath(rel) {
			out = append(out, o)
		}
	}
	return out, nil
}

// hiddenPath reports whether any segment of a relative path is hidden, or the
// path names a directory placeholder (ends in "/").
func hiddenPath(rel string) bool {
	if rel == "" || strings.HasSuffix(rel, "/") {
		return true
	}
	for seg := range strings.SplitSeq(rel, "/") {
		if hidden(seg) {
			return true
		}
	}
	return false
}

func hidden(seg string) bool {
	return seg != "" && (seg[0] == '.' || seg[0] == '_')
}

func matchGlob(ctx context.Context, store Store, orig, pat string) ([]Object, error) {
	g, err := compileGlob(pat)
	if err != nil {
		return nil, fmt.Errorf("objstore: pattern %q: %w", orig, err)
	}
	objs, escaped, err := listFor(ctx, store, g.prefix)
	if err != nil {
		return nil, err
	}
	if err := checkEscaped(orig, escaped, g.match); err != nil {
		return nil, err
	}
	out := objs[:0]
	for _, o := range objs {
		if g.match(o.URI) {
			out = append(out, o)
		}
	}
	return out, nil
}

// glob is a compiled pattern: segments split on '/', "**" kept as is.
type glob struct {
	segs   []string
	prefix string // longest literal prefix, what the store lists
}

func compileGlob(pat string) (glob, error) {
	segs := strings.Split(pat, "/")
	for _, s := range segs {
		if s == "**" {
			continue
		}
		// path.Match checks the whole pattern even when the name is empty.
		if _, err := path.Match(s, ""); err != nil {
			return glob{}, err
		}
	}
	prefix := pat
	if i := strings.IndexAny(pat, globMeta); i >= 0 {
		prefix = pat[:i]
	}
	return glob{segs: segs, prefix: prefix}, nil
}

// match reports whether uri matches the glob.
func (g glob) match(uri string) bool {
	if strings.HasSuffix(uri, "/") {
		return false // GCS directory placeholder
	}
	return matchSegs(g.segs, strings.Split(uri, "/"))
}

func matchSegs(pat, name []string) bool {
	for len(pat) > 0 {
		if pat[0] == "**" {
			for len(pat) > 1 && pat[1] == "**" {
				pat = pat[1:]
			}
			rest := pat[1:]
			for i := 0; i <= len(name); i++ {
				// A trailing "**" matches one or more segments, not the directory itself.
				if (len(rest) > 0 || i > 0) && matchSegs(rest, name[i:]) {
					return true
				}
				if i < len(name) && hidden(name[i]) {
					return false // "**" does not descend into hidden names
				}
			}
			return false
		}
		if len(name) == 0 {
			return false
		}
		if hidden(name[0]) && !hidden(pat[0]) {
			return false
		}
		if ok, _ := path.Match(pat[0], name[0]); !ok {
			return false
		}
		pat, name = pat[1:], name[1:]
	}
	return len(name) == 0
}
