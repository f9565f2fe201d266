package manifest

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/meshfeed/meshfeed/objstore"
)

func testManifest() *Manifest {
	m := &Manifest{}
	s := Schema{Full: []byte("full"), Output: []byte("out"), Errors: []Error{{}}}
	for _, u := range []string{"/d/b.parquet", "/d/a.parquet", "/elsewhere/c.parquet"} {
		m.AddFile(File{URI: u, Size: 10, ModTimeNs: 5, Format: "parquet", Rows: 3,
			Columns:   []Column{{Name: "x"}},
			RowGroups: []RowGroup{{Rows: 3, Columns: []ColumnChunk{{Chunks: []Chunk{{Offset: 4, Length: 2, NullCount: -1}}}}}}}, s)
	}
	if err := m.Finish(); err != nil {
		panic(err)
	}
	return m
}

func obj(uri string, size, mtime, gen int64) objstore.Object {
	return objstore.Object{URI: uri, Size: size, ModTime: time.Unix(0, mtime), Generation: gen}
}

// TestFactsNeverStale: a fact is returned only for the identity it was
// stored under, and survives an encode/decode round trip.
func TestFactsNeverStale(t *testing.T) {
	m := testManifest()
	cur := obj("/d/a.parquet", 10, 5, 0)
	if err := m.PutFact(cur, "dummy", "k1", []byte("v1")); err != nil {
		t.Fatal(err)
	}
	if err := m.PutFact(obj("/d/a.parquet", 11, 5, 0), "dummy", "k1", []byte("v2")); !errors.Is(err, ErrStale) {
		t.Fatalf("PutFact on a changed file: %v, want ErrStale", err)
	}
	if err := m.PutFact(obj("/d/zz.parquet", 10, 5, 0), "dummy", "k1", nil); !errors.Is(err, ErrStale) {
		t.Fatalf("PutFact on a file not in the manifest: %v, want ErrStale", err)
	}
	var buf bytes.Buffer
	if err := Encode(&buf, m, "/d/_meshfeed_manifest.parquet"); err != nil {
		t.Fatal(err)
	}
	m2, err := Decode(buf.Bytes(), "/d/_meshfeed_manifest.parquet")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		o        objstore.Object
		kind     string
		key      string
		want     string
		wantSeen bool
	}{
		{cur, "dummy", "k1", "v1", true},
		{cur, "dummy", "k2", "", false},
		{cur, "other", "k1", "", false},
		{obj("/d/a.parquet", 11, 5, 0), "dummy", "k1", "", false}, // size changed
		{obj("/d/a.parquet", 10, 6, 0), "dummy", "k1", "", false}, // mtime changed
		{obj("/d/a.parquet", 10, 5, 7), "dummy", "k1", "", false}, // a generation appeared
		{obj("/d/b.parquet", 10, 5, 0), "dummy", "k1", "", false}, // another file
	} {
		got, ok := m2.Fact(tc.o, tc.kind, tc.key)
		if ok != tc.wantSeen || string(got) != tc.want {
			t.Errorf("Fact(%+v, %q, %q) = %q, %v, want %q, %v", tc.o, tc.kind, tc.key, got, ok, tc.want, tc.wantSeen)
		}
	}
	// A fact whose recorded identity is not the entry's is never returned.
	m2.Lookup("/d/a.parquet").Facts[0].Identity = "s9;m9"
	if _, ok := m2.Fact(cur, "dummy", "k1"); ok {
		t.Fatal("a fact of another identity was returned")
	}
}

// TestEncodeRelativeURIs: files under the manifest's directory are stored
// relative to it, so a renamed directory still resolves; others stay
// absolute.
func TestEncodeRelativeURIs(t *testing.T) {
	m := testManifest()
	var buf bytes.Buffer
	if err := Encode(&buf, m, "/d/_meshfeed_manifest.parquet"); err != nil {
		t.Fatal(err)
	}
	moved, err := Decode(buf.Bytes(), "/moved/_meshfeed_manifest.parquet")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range moved.Files {
		got = append(got, f.URI)
	}
	if want := "/elsewhere/c.parquet /moved/a.parquet /moved/b.parquet"; strings.Join(got, " ") != want {
		t.Fatalf("URIs after a move = %q, want %q", got, want)
	}
}

// TestIdentityDiff names what changed.
func TestIdentityDiff(t *testing.T) {
	for _, tc := range []struct {
		a, b Identity
		want string
	}{
		{Identity{Size: 1, ModTimeNs: 2}, Identity{Size: 1, ModTimeNs: 2}, ""},
		{Identity{Size: 1, ModTimeNs: 2}, Identity{Size: 3, ModTimeNs: 2}, "size 1 -> 3"},
		{Identity{Size: 1, ModTimeNs: 2}, Identity{Size: 1, ModTimeNs: 4}, "mtime"},
		{Identity{Size: 1, ModTimeNs: 2, Generation: 5}, Identity{Size: 1, ModTimeNs: 9, Generation: 5}, ""}, // GCS: updated time alone
		{Identity{Size: 1, Generation: 5}, Identity{Size: 1, Generation: 6}, "generation 5 -> 6"},
		{Identity{Size: 1, ETag: "a"}, Identity{Size: 1, ETag: "b"}, `etag "a" -> "b"`},
	} {
		got := tc.a.Diff(tc.b)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%+v.Diff(%+v) = %q, want %q", tc.a, tc.b, got, tc.want)
		}
	}
}

// TestDecodeRefuses: what is not a manifest of this version is refused,
// naming it.
func TestDecodeRefuses(t *testing.T) {
	var buf bytes.Buffer
	if err := Encode(&buf, testManifest(), "/d/m.parquet"); err != nil {
		t.Fatal(err)
	}
	good := buf.Bytes()
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"empty", nil},
		{"truncated", good[:len(good)/2]},
		{"tail cut", good[:len(good)-1]},
		{"text", []byte("not parquet at all, no")},
		{"other version", bytes.Replace(bytes.Clone(good), []byte(`meshfeed.manifest.version`), []byte(`meshfeed.manifest.versioX`), 1)},
	} {
		_, err := Decode(tc.data, "/d/m.parquet")
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "/d/m.parquet") {
			t.Errorf("Decode(%s) = %v, want ErrInvalid naming the manifest", tc.name, err)
		}
	}
}

// TestMergeRefuses: parts that are not one build's are refused.
func TestMergeRefuses(t *testing.T) {
	part := func(k, of int, pat string) *Manifest {
		m := testManifest()
		m.Part = &Part{Shard: k, Of: of, Patterns: []string{pat}}
		return m
	}
	for _, tc := range []struct {
		name  string
		parts []*Manifest
	}{
		{"none", nil},
		{"not a part", []*Manifest{testManifest()}},
		{"missing shard", []*Manifest{part(0, 2, "/d")}},
		{"shard twice", []*Manifest{part(0, 2, "/d"), part(0, 2, "/d")}},
		{"other patterns", []*Manifest{part(0, 2, "/d"), part(1, 2, "/e")}},
		{"same file twice", []*Manifest{part(0, 2, "/d"), part(1, 2, "/d")}},
	} {
		if _, err := Merge(tc.parts); !errors.Is(err, ErrMerge) {
			t.Errorf("Merge(%s) = %v, want ErrMerge", tc.name, err)
		}
	}
}

// TestIdentityOfETag checks that an S3, Azure or HTTPS object's ETag is part
// of its identity: a manifest entry of one version does not match another
// version of the same size and time, and the object rebuilt from the entry
// pins the recorded ETag.
func TestIdentityOfETag(t *testing.T) {
	at := time.Unix(1700000000, 0)
	v1 := objstore.Object{URI: "s3://b/f.parquet", Size: 10, ModTime: at, ETag: `"v1"`}
	v2 := v1
	v2.ETag = `"v2"`
	if d := IdentityOf(v1).Diff(IdentityOf(v2)); !strings.Contains(d, "etag") {
		t.Errorf("two ETags of one object differ by %q, want the etag named", d)
	}
	f := File{URI: v1.URI, Size: v1.Size, ModTimeNs: at.UnixNano(), ETag: v1.ETag}
	if got := f.Object().ETag; got != v1.ETag {
		t.Errorf("File.Object().ETag = %q, want %q", got, v1.ETag)
	}
}
