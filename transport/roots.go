package transport

import (
	"fmt"
	"net/url"
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
	if sc, rest, ok := strings.Cut(uri, "://"); ok && sc != "file" {
		if !slices.Contains(remoteSchemes, sc) {
			return location{}, fmt.Errorf("%q: scheme %q is not served (use %s://, az:// or an absolute local path)", uri, sc, strings.Join(remoteSchemes, "://, "))
		}
		return parseRemote(uri, sc, rest)
	}
	p := strings.TrimPrefix(uri, "file://")
	if !strings.HasPrefix(p, "/") {
		return location{}, fmt.Errorf("%q is not an absolute path", uri)
	}
	return location{scheme: "file", segs: segments(p)}, nil
}

// remoteSchemes are the URI schemes of the remote stores, whose roots are
// a bucket (or an http(s) host) and a prefix of object names.
var remoteSchemes = []string{"gs", "s3", "https", "http"}

// parseRemote parses a remote URI: scheme://bucket/path, or for http(s)
// scheme://host[:port]/path, whose host is compared without case and whose
// path is percent-decoded before its segments are checked (a server
// decodes "%2e%2e" to ".." and "%2f" to "/").
func parseRemote(uri, scheme, rest string) (location, error) {
	bucket, p, _ := strings.Cut(rest, "/")
	if bucket == "" {
		return location{}, fmt.Errorf("%q has no bucket or host", uri)
	}
	if scheme == "https" || scheme == "http" {
		if strings.Contains(bucket, "@") {
			return location{}, fmt.Errorf("%q: credentials in the URL are not served", uri)
		}
		bucket = strings.ToLower(bucket)
		dec, err := url.PathUnescape(p)
		if err != nil {
			return location{}, fmt.Errorf("%q: %v", uri, err)
		}
		if hasDotDot(dec) {
			return location{}, fmt.Errorf("%q has a \"..\" segment (percent-encoded)", uri)
		}
		p = dec
	}
	return location{scheme: scheme, bucket: bucket, segs: segments(p)}, nil
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
// The check is lexical. For gs://, s3:// and az:// URIs (Azure's
// spellings: parseAzureLocation) it is the whole check: object stores have
// no symlinks and no directories, an object's name is its path, so a
// segment-wise prefix of the name (with ".." refused, since the store would
// take "a/../b" literally) is what a root means there. For http(s):// the
// root is a host and a path prefix, checked on the decoded path; a server's
// redirects are followed wherever they lead (a CDN), but never to plain
// http:// off loopback (objstore.HTTPSStore). Local paths are checked
// again on disk: New confines a RootedBackend (the Pipeline) to the local
// roots, which then resolves every path, glob match and directory entry
// through os.Root (objstore.WithRoots).
func checkRoots(uris []string, roots []location) error {
	return checkRootsOf("dataset", uris, roots)
}

// checkRootsOf is checkRoots for URIs of what ("dataset", "tokenizer").
func checkRootsOf(what string, uris []string, roots []location) error {
	var p problems
	for _, u := range uris {
		loc, err := parseLocation(u)
		if err != nil {
			p.add("%s %v", what, err)
			continue
		}
		if !slices.ContainsFunc(roots, loc.under) {
			p.add("%s %q is not under an allowed root (%s): move it under one, or start the server with --allow for its directory", what, u, rootList(roots))
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
