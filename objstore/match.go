package objstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"sort"
	"strings"
	"sync/atomic"
)

// Defaults of Match's limits.
const (
	// DefaultMaxMatches: see WithMaxMatches.
	DefaultMaxMatches = 1 << 20
	// DefaultMaxGlobDepth: see WithMaxGlobDepth.
	DefaultMaxGlobDepth = 64
)

// MatchOption configures [Match].
type MatchOption func(*matchConfig)

type matchConfig struct {
	maxMatches int
	maxDepth   int
}

// WithMaxMatches bounds the objects one pattern may match: a pattern that
// matches more is an error wrapping ErrGlobLimit that names it and the
// limit. Default DefaultMaxMatches; zero or negative means the default.
func WithMaxMatches(n int) MatchOption { return func(c *matchConfig) { c.maxMatches = n } }

// WithMaxGlobDepth bounds how deep below its literal prefix a pattern with
// "**" may match: listing a name more than n path segments below it is an
// error wrapping ErrGlobLimit that names the pattern, the name and the
// limit. Default DefaultMaxGlobDepth; zero or negative means the default.
func WithMaxGlobDepth(n int) MatchOption { return func(c *matchConfig) { c.maxDepth = n } }

// Match expands patterns into the objects they name, deduplicated and sorted
// by URI. Each pattern, local or remote (gs://), is one of:
//
//   - an exact file or object;
//   - a directory (or gs:// prefix followed by "/"): every file under it,
//     recursively;
//   - a glob: "*", "?" and "[...]" match within one path segment as in
//     path.Match, and a segment "**" matches any number of segments. The
//     store lists the longest literal prefix of the glob; matching is done
//     here, never by the server, in one pass over each listed name (time
//     linear in the names' segments times the pattern's, whatever the
//     tree's depth).
//
// A store that cannot list ([CanList]: http(s)://) takes exact URIs only:
// '?' and '[' are the URL's own characters, and a pattern with '*' or
// ending in '/' is an error wrapping ErrUnsupported that says to name each
// file.
//
// Names starting with '.' or '_' (_SUCCESS, .crc files, _temporary/) are
// skipped when they are reached through a directory or a wildcard; a pattern
// segment that itself starts with '.' or '_' can name them. Relative local
// patterns resolve against the working directory.
//
// A pattern that matches nothing is an error wrapping ErrNotFound that names
// it; a malformed glob wraps ErrBadPattern (and path.ErrBadPattern); a NUL
// byte in a pattern wraps ErrInvalidPath; a pattern past the limits
// (WithMaxMatches, WithMaxGlobDepth) wraps ErrGlobLimit. Match stops with
// ctx's error when ctx is done, between listed names.
func Match(ctx context.Context, store Store, patterns []string, opts ...MatchOption) ([]Object, error) {
	cfg := matchConfig{maxMatches: DefaultMaxMatches, maxDepth: DefaultMaxGlobDepth}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.maxMatches <= 0 {
		cfg.maxMatches = DefaultMaxMatches
	}
	if cfg.maxDepth <= 0 {
		cfg.maxDepth = DefaultMaxGlobDepth
	}
	if len(patterns) == 0 {
		return nil, fmt.Errorf("objstore: no input patterns given: %w", ErrNotFound)
	}
	seen := make(map[string]Object)
	for _, pat := range patterns {
		if err := checkPath(pat); err != nil {
			return nil, err
		}
		objs, err := matchOne(ctx, store, pat, &cfg)
		if err != nil {
			return nil, err
		}
		if len(objs) == 0 {
			return nil, noMatch(pat)
		}
		if len(objs) > cfg.maxMatches {
			return nil, fmt.Errorf("objstore: pattern %q matches %d objects: %w: at most %d per pattern (WithMaxMatches); name fewer files",
				pat, len(objs), ErrGlobLimit, cfg.maxMatches)
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

// checkPath refuses a URI or pattern that no store can hold: a NUL byte
// (the system calls would see a shorter path).
func checkPath(uri string) error {
	if i := strings.IndexByte(uri, 0); i >= 0 {
		return fmt.Errorf("objstore: %q: %w: a NUL byte at offset %d", uri, ErrInvalidPath, i)
	}
	return nil
}

func noMatch(pat string) error {
	hint := "check the bucket and object names and that the credentials may list the bucket"
	switch sc := uriScheme(pat); {
	case sc == "https" || sc == "http":
		hint = "check the URL (and any token the server wants)"
	case sc == "":
		wd, _ := os.Getwd()
		hint = fmt.Sprintf("check that the path exists and is readable (relative paths resolve against %s)", wd)
	}
	return fmt.Errorf("objstore: %q matched no files: %w; %s; names starting with '.' or '_' are skipped unless named", pat, ErrNotFound, hint)
}

// globMeta are the characters that make a pattern a glob ('\\' escapes).
const globMeta = "*?[\\"

func matchOne(ctx context.Context, store Store, pat string, cfg *matchConfig) ([]Object, error) {
	norm := pat
	if uriScheme(pat) == "" {
		p, err := localPath(pat, true)
		if err != nil {
			return nil, err
		}
		norm = p
	}
	listable := CanList(store, norm)
	if !listable && (strings.Contains(norm, "*") || strings.HasSuffix(norm, "/")) {
		return nil, fmt.Errorf("objstore: pattern %q: %w: its store cannot list (HTTP has no listing), so it takes exact URLs only, not a glob or a directory; name each file", pat, ErrUnsupported)
	}
	// Without a listing, '?' and '[' are a URL's own characters (a query).
	if listable && strings.ContainsAny(norm, globMeta) {
		return matchGlob(ctx, store, pat, norm, cfg)
	}
	if !strings.HasSuffix(norm, "/") {
		o, err := store.Stat(ctx, norm)
		if err == nil {
			return []Object{o}, nil
		}
		if !errors.Is(err, ErrNotFound) {
			return nil, err
		}
		if !listable {
			return nil, nil // no directory to expand: Match reports no match
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
	for i, o := range objs {
		if i%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, fmt.Errorf("objstore: matching %q: %w", pat, err)
			}
		}
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

func matchGlob(ctx context.Context, store Store, orig, pat string, cfg *matchConfig) ([]Object, error) {
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
	// The directory the literal prefix ends in: depth counts from there.
	base := g.prefix[:strings.LastIndexByte(g.prefix, '/')+1]
	baseDepth := strings.Count(base, "/")
	out := objs[:0]
	for i, o := range objs {
		if i%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, fmt.Errorf("objstore: matching %q: %w", orig, err)
			}
		}
		if g.deep {
			if d := strings.Count(o.URI, "/") - baseDepth + 1; d > cfg.maxDepth {
				return nil, fmt.Errorf("objstore: pattern %q reaches %s, %d segments below %s: %w: \"**\" matches at most %d segments deep (WithMaxGlobDepth)",
					orig, o.URI, d, base, ErrGlobLimit, cfg.maxDepth)
			}
		}
		if g.match(o.URI) {
			out = append(out, o)
		}
	}
	return out, nil
}

// glob is a compiled pattern: its segments (split on '/', runs of "**"
// collapsed into one), matched against a name's segments in one pass.
type glob struct {
	segs   []string
	prefix string // longest literal prefix, what the store lists
	deep   bool   // has a "**" segment
}

func compileGlob(pat string) (glob, error) {
	var segs []string
	deep := false
	for _, s := range strings.Split(pat, "/") {
		if s == "**" {
			deep = true
			if len(segs) > 0 && segs[len(segs)-1] == "**" {
				continue // "**/**" is "**"
			}
			segs = append(segs, s)
			continue
		}
		// path.Match checks the whole pattern even when the name is empty.
		if _, err := path.Match(s, ""); err != nil {
			return glob{}, fmt.Errorf("%w: %w", ErrBadPattern, err)
		}
		segs = append(segs, s)
	}
	prefix := pat
	if i := strings.IndexAny(pat, globMeta); i >= 0 {
		prefix = pat[:i]
	}
	return glob{segs: segs, prefix: prefix, deep: deep}, nil
}

// matchSteps counts the state transitions of glob.match, so that tests can
// bound the work of matching without timing it.
var matchSteps atomic.Int64

// match reports whether uri matches the glob.
func (g glob) match(uri string) bool {
	if strings.HasSuffix(uri, "/") {
		return false // GCS directory placeholder
	}
	return matchSegs(g.segs, strings.Split(uri, "/"))
}

// matchSegs runs the pattern's segments as a nondeterministic automaton over
// the name's segments, all live states at once (no backtracking): O(len(pat)
// * len(name)) steps. A state is a position in pat; at a "**" it is fresh
// (nothing consumed yet) or has consumed at least one segment. A "**"
// consumes segments that are not hidden; it may consume none unless it ends
// the pattern (a trailing "**" matches one or more segments, not the
// directory itself). A literal or wildcard segment matches a hidden name only
// when it is hidden itself.
func matchSegs(pat, name []string) bool {
	n := len(pat)
	// cur[j]: at position j, fresh; more[j]: inside the "**" at j, having
	// consumed at least one segment.
	cur, more := make([]bool, n+1), make([]bool, n+1)
	nextCur, nextMore := make([]bool, n+1), make([]bool, n+1)
	cur[0] = true
	closure := func(cur, more []bool) {
		for j := 0; j < n; j++ {
			if pat[j] != "**" {
				continue
			}
			if (cur[j] && j+1 < n) || more[j] {
				cur[j+1] = true
			}
		}
	}
	closure(cur, more)
	for _, seg := range name {
		clear(nextCur)
		clear(nextMore)
		any := false
		for j := 0; j < n; j++ {
			if !cur[j] && !more[j] {
				continue
			}
			matchSteps.Add(1)
			if pat[j] == "**" {
				if !hidden(seg) {
					nextMore[j] = true
					any = true
				}
				continue
			}
			if !cur[j] || (hidden(seg) && !hidden(pat[j])) {
				continue
			}
			if ok, _ := path.Match(pat[j], seg); ok {
				nextCur[j+1] = true
				any = true
			}
		}
		if !any {
			return false
		}
		closure(nextCur, nextMore)
		cur, nextCur = nextCur, cur
		more, nextMore = nextMore, more
	}
	return cur[n]
}
