package objstore

import (
	"errors"
	"path"
	"testing"
)

func TestGlobMatch(t *testing.T) {
	cases := []struct {
		pattern, uri string
		want         bool
	}{
		// Single-segment wildcards.
		{"/d/*.parquet", "/d/a.parquet", true},
		{"/d/*.parquet", "/d/a.csv", false},
		{"/d/*.parquet", "/d/sub/a.parquet", false}, // * stays in one segment
		{"/d/part-?.parquet", "/d/part-1.parquet", true},
		{"/d/part-?.parquet", "/d/part-10.parquet", false},
		{"/d/part-[0-4].parquet", "/d/part-3.parquet", true},
		{"/d/part-[0-4].parquet", "/d/part-5.parquet", false},
		{"/d/part-[^0-4].parquet", "/d/part-5.parquet", true},
		{`/d/a\*b`, "/d/a*b", true},
		{`/d/a\*b`, "/d/axb", false},
		{"/d/*/x", "/d/e/x", true},
		{"/d/*/x", "/d/x", false},
		// "**" spans zero or more segments.
		{"/d/**/*.parquet", "/d/a.parquet", true},
		{"/d/**/*.parquet", "/d/e/a.parquet", true},
		{"/d/**/*.parquet", "/d/e/f/g/a.parquet", true},
		{"/d/**/*.parquet", "/other/a.parquet", false},
		{"/d/**", "/d/e/f", true},
		{"/d/**", "/d", false}, // ** matches zero segments, but "/d/" then needs one more
		{"/d/**/**/x", "/d/x", true},
		{"/d/**/e/**/x", "/d/1/e/2/3/x", true},
		{"/d/**/e/**/x", "/d/1/f/2/3/x", false},
		{"/d/**x", "/d/ax", true}, // "**" inside a segment is path.Match's "*"
		{"/d/**x", "/d/a/x", false},
		// Hidden names: not reached by wildcards, only when named.
		{"/d/*", "/d/_SUCCESS", false},
		{"/d/*", "/d/.crc", false},
		{"/d/_*", "/d/_SUCCESS", true},
		{"/d/.*", "/d/.crc", true},
		{"/d/**/*.parquet", "/d/_temporary/a.parquet", false},
		{"/d/**/*.parquet", "/d/ok/.tmp/a.parquet", false},
		{"/d/_temporary/*.parquet", "/d/_temporary/a.parquet", true},
		{"/_d/*.parquet", "/_d/a.parquet", true}, // literal hidden segment in the prefix
		{"/d/x_*", "/d/x_1", true},               // '_' not at the start is not hidden
		// gs:// URIs are matched segment by segment too.
		{"gs://b/d/*.parquet", "gs://b/d/a.parquet", true},
		{"gs://b/d/*.parquet", "gs://c/d/a.parquet", false},
		{"gs://b/**", "gs://b/d/e/a.parquet", true},
		{"gs://b/*", "gs://b/d/", false}, // directory placeholder
		{"gs://*/d/a", "gs://b/d/a", true},
	}
	for _, c := range cases {
		g, err := compileGlob(c.pattern)
		if err != nil {
			t.Errorf("compileGlob(%q) = %v", c.pattern, err)
			continue
		}
		if got := g.match(c.uri); got != c.want {
			t.Errorf("glob(%q).match(%q) = %v, want %v", c.pattern, c.uri, got, c.want)
		}
	}
}

func TestGlobPrefix(t *testing.T) {
	cases := []struct{ pattern, want string }{
		{"/d/*.parquet", "/d/"},
		{"/d/part-*.parquet", "/d/part-"},
		{"/d/e/**/x", "/d/e/"},
		{"/d/part-[0-4]", "/d/part-"},
		{"gs://b/x/y?", "gs://b/x/y"},
		{`/d/a\*b`, "/d/a"},
		{"gs://*/x", "gs://"},
	}
	for _, c := range cases {
		g, err := compileGlob(c.pattern)
		if err != nil || g.prefix != c.want {
			t.Errorf("compileGlob(%q).prefix = %q, %v; want %q", c.pattern, g.prefix, err, c.want)
		}
	}
}

func TestGlobBadPattern(t *testing.T) {
	for _, pat := range []string{"/d/[x", "/d/a[", `/d/x\`, "/d/[]a]/b"} {
		if _, err := compileGlob(pat); !errors.Is(err, path.ErrBadPattern) {
			t.Errorf("compileGlob(%q) = %v, want path.ErrBadPattern", pat, err)
		}
	}
}

func TestHiddenPath(t *testing.T) {
	cases := []struct {
		rel  string
		want bool
	}{
		{"a.parquet", false},
		{"x/a.parquet", false},
		{"_SUCCESS", true},
		{".a.parquet.crc", true},
		{"_temporary/0/a.parquet", true},
		{"x/.tmp/a", true},
		{"dir/", true}, // GCS placeholder
		{"a_b/c.d", false},
	}
	for _, c := range cases {
		if got := hiddenPath(c.rel); got != c.want {
			t.Errorf("hiddenPath(%q) = %v, want %v", c.rel, got, c.want)
		}
	}
}
