package transport

import (
	"fmt"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// location is a cleaned dataset URI or root: a scheme ("gs" or "file"), a
// bucket (gs only) and the path's segments.
type location struct {
	scheme string
	bucket string
	segs   []string
}

func (l location) String() string {
	if l.scheme != "file" {
		return l.scheme + "://" + l.bucket + "/" + strings.Join(l.segs, "/")
	}
	return "/" + strings.Join(l.segs, "/")
}

// hasDotDot reports whether any "/"- or "\"-separated segment of uri is "..".
func hasDotDot(uri string) bool {
	for _, seg := range strings.FieldsFunc(uri, func(r rune) bool { return r == '/' || r == '\\' }) {
		if seg == ".." {
			return true
		}
	}
	return false
}

// parseLocation cleans a dataset URI: gs://bucket/path, file:///abs/path or
// /abs/path. Relative local paths, other schemes and ".." segments are
// errors.
func parseLocation(uri string) (location, error) {
	if hasDotDot(uri) {
		return location{}, fmt.Errorf("%q has a \"..\" segment", uri)
	}
	if loc, ok, err := parseAzureLocation(uri); ok {
		return loc, err
	}
	if rest, ok := strings.CutPrefix(uri, "gs://"); ok {
		bucket, p, _ := strings.Cut(rest, "/")
		if bucket == "" {
			return location{}, fmt.Errorf("%q has no bucket", uri)
		}
		return location{scheme: "gs", bucket: bucket, segs: segments(p)}, nil
	}
	p := strings.TrimPrefix(uri, "file://")
	if i := strings.Index(p, "://"); i >= 0 {
		return location{}, fmt.Errorf("%q: scheme %q is not served (use gs:// or an absolute local path)", uri, p[:i])
	}
	if !strings.HasPrefix(p, "/") {
		return location{}, fmt.Errorf("%q is not an absolute path", uri)
	}
	return location{scheme: "file", segs: segments(p)}, nil
}

// segments returns the non-empty segments of p after path.Clean.
func segments(p string) []string {
	c := path.Clean("/" + p)
	if c == "/" {
		return nil
	}
	return strings.Split(c[1:], "/")
}

// parseRoot parses an allowed root as parseLocation does, except that a
// relative local path is made absolute against the working directory.
func parseRoot(root string) (location, error) {
	if root != "" && !strings.Contains(root, "://") && !strings.HasPrefix(root, "/") && !hasDotDot(root) {
		abs, err := filepath.Abs(root)
		if err != nil {
			return location{}, fmt.Errorf("%q: %v", root, err)
		}
		root = filepath.ToSlash(abs)
	}
	if root == "" {
		return location{}, fmt.Errorf("empty root")
	}
	return parseLocation(root)
}

// under reports whether l lies under root (segment-wise prefix).
func (l location) under(root location) bool {
	if l.scheme != root.scheme || l.bucket != root.bucket || len(l.segs) < len(root.segs) {
		return false
	}
	return slices.Equal(l.segs[:len(root.segs)], root.segs)
}

// checkRoots returns an error wrapping ErrPermissionDenied naming the first
// URI that does not lie under one of roots (every URI is checked; all bad
// ones are named).
//
// The check is lexical. For gs:// and az:// URIs it is the whole check
// (Azure's spellings: parseAzureLocation): GCS has no
// symlinks and no directories, an object's name is its path, so a
// segment-wise prefix of the name (with ".." refused, since GCS would take
// "a/../b" literally) is what a root means there. Local paths are checked
// again on disk: New confines a RootedBackend (the Pipeline) to the local
// roots, which then resolves every path, glob match and directory entry
// through os.Root (objstore.WithRoots).
func checkRoots(uris []string, roots []location) error {
	var p problems
	for _, u := range uris {
		loc, err := parseLocation(u)
		if err != nil {
			p.add("dataset %v", err)
			continue
		}
		if !slices.ContainsFunc(roots, loc.under) {
			p.add("dataset %q is not under an allowed root (%s)", u, rootList(roots))
		}
	}
	return p.err("transport", ErrPermissionDenied)
}

func rootList(roots []location) string {
	if len(roots) == 0 {
		return "none configured"
	}
	s := make([]string, len(roots))
	for i, r := range roots {
		s[i] = r.String()
	}
	return strings.Join(s, ", ")
}

// localRoots returns the local allowed roots, absolute and cleaned.
func (c *Config) localRoots() []string {
	var out []string
	for _, l := range c.rootLocs {
		if l.scheme == "file" {
			out = append(out, l.String())
		}
	}
	return out
}
