package objstoretest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"path"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/meshfeed/meshfeed/internal/testseed"
	"github.com/meshfeed/meshfeed/objstore"
)

// suiteFiles are the files every suite run writes under its root.
var suiteFiles = []struct {
	name string
	size int
}{
	{"a/x.bin", 100_000},
	{"a/y.bin", 3},
	{"b/z.parquet", 70_000},
	{"b/_SUCCESS", 0},
	{"b/.hidden", 10},
	{"c/d/e.parquet", 1},
	{"c/_tmp/f.parquet", 5},
	{"top.parquet", 4096},
}

func randBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func join(root, name string) string { return strings.TrimSuffix(root, "/") + "/" + name }

func uris(objs []objstore.Object) []string {
	out := make([]string, len(objs))
	for i, o := range objs {
		out[i] = o.URI
	}
	return out
}

func names(root string, rel ...string) []string {
	out := make([]string, len(rel))
	for i, r := range rel {
		out[i] = join(root, r)
	}
	return out
}

// PutFunc writes data at uri, replacing any object there, so that store
// sees it, and returns the object as store's Stat reports it.
type PutFunc func(t testing.TB, store objstore.Store, uri string, data []byte) objstore.Object

// Conformance checks the [objstore.Store] contract, the way gocloud.dev's
// blob/drivertest checks a driver: listing, glob matching ([objstore.Match]),
// stat, ranged and tail reads, reads past the end, not-found errors,
// concurrent reads and version pinning. Every store runs it (local disk,
// GCS on the fake server, the Mux); a new store adds one test that calls it.
// A store that cannot list (objstore.CanList false: https://) is checked
// for that instead: List and globs fail with ErrUnsupported, exact URIs
// match.
//
// open returns the store under test and a root under which it holds nothing
// yet (a local directory, "gs://bucket/prefix"); it is called once. put
// writes the test's objects; nil puts through the store's
// [objstore.Creator] (PutObject). Counters are checked when the store is an
// [objstore.StatsReporter]. The random contents are seeded by
// internal/testseed (MESHFEED_SEED replays a run).
//
// Length: the suite is one list of short subtests over the same objects, in
// the order a reader checks the contract; split up, the contract would be
// scattered over helpers.
func Conformance(t *testing.T, open func(t *testing.T) (store objstore.Store, root string), put PutFunc) {
	t.Helper()
	if put == nil {
		put = PutObject
	}
	ctx := context.Background()
	store, root := open(t)
	root = strings.TrimSuffix(root, "/")
	seed := testseed.Get(t, 0, "")
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	data := make(map[string][]byte)
	for _, f := range suiteFiles {
		b := randBytes(r, f.size)
		data[f.name] = b
		put(t, store, join(root, f.name), b)
	}
	var stats *objstore.Stats
	if sr, ok := store.(objstore.StatsReporter); ok {
		stats = sr.Stats()
	}

	// A store that cannot list (https://) must say so for every prefix, and
	// is checked on exact URIs only.
	canList := objstore.CanList(store, root+"/")

	t.Run("List", func(t *testing.T) {
		if !canList {
			for _, prefix := range []string{root + "/", join(root, "a"), join(root, "a/x.bin")} {
				_, err := store.List(ctx, prefix)
				if !errors.Is(err, objstore.ErrUnsupported) || !strings.Contains(fmt.Sprint(err), prefix) {
					t.Errorf("List(%q) on a store that cannot list = %v, want ErrUnsupported naming it", prefix, err)
				}
			}
			return
		}
		cases := []struct {
			prefix string
			want   []string
		}{
			{root + "/", []string{"a/x.bin", "a/y.bin", "b/.hidden", "b/_SUCCESS", "b/z.parquet", "c/_tmp/f.parquet", "c/d/e.parquet", "top.parquet"}},
			{join(root, "a"), []string{"a/x.bin", "a/y.bin"}},
			{join(root, "a/"), []string{"a/x.bin", "a/y.bin"}},
			{join(root, "b/z"), []string{"b/z.parquet"}},
			{join(root, "c/"), []string{"c/_tmp/f.parquet", "c/d/e.parquet"}},
			{join(root, "t"), []string{"top.parquet"}},
			{join(root, "nope/"), []string{}},
			{join(root, "a/x.bin"), []string{"a/x.bin"}},
		}
		for _, c := range cases {
			got, err := store.List(ctx, c.prefix)
			if err != nil {
				t.Errorf("List(%q) = %v", c.prefix, err)
				continue
			}
			if want := names(root, c.want...); !slices.Equal(uris(got), want) {
				t.Errorf("List(%q) = %q, want %q", c.prefix, uris(got), want)
			}
			for _, o := range got {
				rel := strings.TrimPrefix(o.URI, root+"/")
				if o.Size != int64(len(data[rel])) {
					t.Errorf("List(%q): %s size %d, want %d", c.prefix, o.URI, o.Size, len(data[rel]))
				}
			}
		}
	})

	t.Run("Stat", func(t *testing.T) {
		for _, f := range suiteFiles {
			uri := join(root, f.name)
			o, err := store.Stat(ctx, uri)
			if err != nil || o.URI != uri || o.Size != int64(f.size) || o.ModTime.IsZero() {
				t.Errorf("Stat(%q) = %+v, %v; want size %d", uri, o, err, f.size)
			}
		}
		missing := join(root, "a/missing.bin")
		_, err := store.Stat(ctx, missing)
		if !errors.Is(err, objstore.ErrNotFound) || !strings.Contains(fmt.Sprint(err), missing) {
			t.Errorf("Stat(%q) = %v, want ErrNotFound naming it", missing, err)
		}
	})

	t.Run("ReadAt", func(t *testing.T) {
		name := "a/x.bin"
		obj, err := store.Stat(ctx, join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		want := data[name]
		n := int64(len(want))
		var reads0, bytes0 int64
		if stats != nil {
			reads0, bytes0 = stats.Reads.Load(), stats.BytesRead.Load()
		}
		var wantReads, wantBytes int64
		for _, rg := range []struct{ off, len int64 }{
			{0, 100}, {0, 1}, {n/2 - 17, 4099}, {n - 100, 100}, {n - 1, 1}, {0, n}, {12345, 0},
		} {
			p := make([]byte, rg.len)
			if err := store.ReadAt(ctx, obj, p, rg.off); err != nil {
				t.Errorf("ReadAt(%s, [%d, %d)) = %v", obj.URI, rg.off, rg.off+rg.len, err)
				continue
			}
			if !bytes.Equal(p, want[rg.off:rg.off+rg.len]) {
				t.Errorf("ReadAt(%s, [%d, %d)) returned the wrong bytes", obj.URI, rg.off, rg.off+rg.len)
			}
			if rg.len > 0 {
				wantReads++
				wantBytes += rg.len
			}
		}
		if stats != nil {
			if got, got2 := stats.Reads.Load()-reads0, stats.BytesRead.Load()-bytes0; got != wantReads || got2 != wantBytes {
				t.Errorf("stats moved by %d reads, %d bytes; want %d, %d", got, got2, wantReads, wantBytes)
			}
		}

		for _, rg := range []struct{ off, len int64 }{{n - 10, 20}, {n, 1}, {n + 100, 5}, {0, n + 1}} {
			err := store.ReadAt(ctx, obj, make([]byte, rg.len), rg.off)
			if !errors.Is(err, io.ErrUnexpectedEOF) || !strings.Contains(fmt.Sprint(err), obj.URI) {
				t.Errorf("ReadAt(%s, [%d, %d)) = %v, want io.ErrUnexpectedEOF naming the object", obj.URI, rg.off, rg.off+rg.len, err)
			}
		}
		// The same past-the-end read with an Object that knows nothing but its URI.
		bare := objstore.Object{URI: obj.URI}
		if err := store.ReadAt(ctx, bare, make([]byte, 20), n-10); !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("ReadAt(bare %s, [%d, %d)) = %v, want io.ErrUnexpectedEOF", obj.URI, n-10, n+10, err)
		}
		if err := store.ReadAt(ctx, bare, make([]byte, 5), 7); err != nil {
			t.Errorf("ReadAt(bare %s, [7, 12)) = %v", obj.URI, err)
		}

		missing := objstore.Object{URI: join(root, "a/missing.bin")}
		if err := store.ReadAt(ctx, missing, make([]byte, 1), 0); !errors.Is(err, objstore.ErrNotFound) || !strings.Contains(fmt.Sprint(err), missing.URI) {
			t.Errorf("ReadAt(%s) = %v, want ErrNotFound naming it", missing.URI, err)
		}
	})

	t.Run("TailReads", func(t *testing.T) {
		// What a footer read does: the last n bytes of each listed object,
		// located by the size the listing reported.
		objs, err := listOrStat(ctx, store, root, canList)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objs {
			want := data[strings.TrimPrefix(o.URI, root+"/")]
			for _, n := range []int64{8, 64 << 10} {
				n = min(n, o.Size)
				p := make([]byte, n)
				if err := store.ReadAt(ctx, o, p, o.Size-n); err != nil {
					t.Errorf("ReadAt(%s, last %d bytes) = %v", o.URI, n, err)
					continue
				}
				if !bytes.Equal(p, want[int64(len(want))-n:]) {
					t.Errorf("ReadAt(%s, last %d bytes) returned the wrong bytes", o.URI, n)
				}
			}
		}
	})

	t.Run("ConcurrentReadAt", func(t *testing.T) {
		var objs []objstore.Object
		for _, f := range suiteFiles {
			if f.size > 0 {
				o, err := store.Stat(ctx, join(root, f.name))
				if err != nil {
					t.Fatal(err)
				}
				objs = append(objs, o)
			}
		}
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for g := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				gr := rand.New(rand.NewPCG(uint64(g), 1))
				for range 50 {
					o := objs[gr.IntN(len(objs))]
					off := gr.Int64N(o.Size)
					ln := 1 + gr.Int64N(o.Size-off)
					p := make([]byte, ln)
					if err := store.ReadAt(ctx, o, p, off); err != nil {
						errs <- err
						return
					}
					rel := strings.TrimPrefix(o.URI, root+"/")
					if !bytes.Equal(p, data[rel][off:off+ln]) {
						errs <- fmt.Errorf("ReadAt(%s, [%d, %d)) returned the wrong bytes", o.URI, off, off+ln)
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	})

	t.Run("Match", func(t *testing.T) {
		cases := []struct {
			patterns []string
			want     []string
		}{
			{[]string{join(root, "b")}, []string{"b/z.parquet"}},
			{[]string{join(root, "b/")}, []string{"b/z.parquet"}},
			{[]string{root}, []string{"a/x.bin", "a/y.bin", "b/z.parquet", "c/d/e.parquet", "top.parquet"}},
			{[]string{join(root, "c")}, []string{"c/d/e.parquet"}},
			{[]string{join(root, "a/x.bin")}, []string{"a/x.bin"}},
			{[]string{join(root, "b/_SUCCESS")}, []string{"b/_SUCCESS"}},
			{[]string{join(root, "a/?.bin")}, []string{"a/x.bin", "a/y.bin"}},
			{[]string{join(root, "[ab]/*")}, []string{"a/x.bin", "a/y.bin", "b/z.parquet"}},
			{[]string{join(root, "b/_*")}, []string{"b/_SUCCESS"}},
			{[]string{join(root, "**/*.parquet")}, []string{"b/z.parquet", "c/d/e.parquet", "top.parquet"}},
			{[]string{join(root, "**")}, []string{"a/x.bin", "a/y.bin", "b/z.parquet", "c/d/e.parquet", "top.parquet"}},
			{[]string{join(root, "c/**/*.parquet")}, []string{"c/d/e.parquet"}},
			{[]string{join(root, "*.parquet")}, []string{"top.parquet"}},
			{[]string{join(root, "t*"), join(root, "top.parquet"), join(root, "a")}, []string{"a/x.bin", "a/y.bin", "top.parquet"}},
		}
		if !canList {
			matchUnlisted(t, store, root)
			return
		}
		for _, c := range cases {
			got, err := objstore.Match(ctx, store, c.patterns)
			if want := names(root, c.want...); err != nil || !slices.Equal(uris(got), want) {
				t.Errorf("Match(%q) = %q, %v; want %q", c.patterns, uris(got), err, want)
			}
		}
		for _, pat := range []string{join(root, "nope"), join(root, "*.csv"), join(root, "b/*hid*"), join(root, "a/x.bin/")} {
			_, err := objstore.Match(ctx, store, []string{join(root, "a"), pat})
			if !errors.Is(err, objstore.ErrNotFound) || !strings.Contains(fmt.Sprint(err), pat) || !strings.Contains(fmt.Sprint(err), "check") {
				t.Errorf("Match(%q) = %v, want ErrNotFound naming the pattern and saying what to check", pat, err)
			}
		}
		if _, err := objstore.Match(ctx, store, []string{join(root, "a/[x")}); !errors.Is(err, path.ErrBadPattern) {
			t.Errorf("Match(%q) = %v, want path.ErrBadPattern", join(root, "a/[x"), err)
		}
	})

	t.Run("GenerationPinning", func(t *testing.T) {
		uri := join(root, "pinned.bin")
		old := randBytes(r, 1000)
		obj := put(t, store, uri, old)
		p := make([]byte, 100)
		if err := store.ReadAt(ctx, obj, p, 0); err != nil || !bytes.Equal(p, old[:100]) {
			t.Fatalf("ReadAt(%s) before overwrite = %v", uri, err)
		}
		newer := randBytes(r, 2000)
		obj2 := put(t, store, uri, newer)
		if obj2.CacheKey() == obj.CacheKey() {
			t.Errorf("CacheKey unchanged after overwrite: %q", obj.CacheKey())
		}
		err := store.ReadAt(ctx, obj, p, 0)
		if !errors.Is(err, objstore.ErrNotFound) || !strings.Contains(fmt.Sprint(err), uri) {
			t.Errorf("ReadAt(old version of %s) = %v, want ErrNotFound naming it", uri, err)
		}
		if err := store.ReadAt(ctx, obj2, p, 1500); err != nil || !bytes.Equal(p, newer[1500:1600]) {
			t.Errorf("ReadAt(new version of %s) = %v, want the new bytes", uri, err)
		}
	})
}

// listOrStat returns the suite's objects: listed under root, or, from a
// store that cannot list, stat'ed one by one.
func listOrStat(ctx context.Context, store objstore.Store, root string, canList bool) ([]objstore.Object, error) {
	if canList {
		return store.List(ctx, root+"/")
	}
	var objs []objstore.Object
	for _, f := range suiteFiles {
		o, err := store.Stat(ctx, join(root, f.name))
		if err != nil {
			return nil, err
		}
		objs = append(objs, o)
	}
	return objs, nil
}

// matchUnlisted checks Match on a store that cannot list: exact URIs match
// (hidden names too, since they are named), a missing one is ErrNotFound
// naming it, and globs and directories are ErrUnsupported naming the
// pattern.
func matchUnlisted(t *testing.T, store objstore.Store, root string) {
	ctx := context.Background()
	exact := []string{join(root, "a/x.bin"), join(root, "b/_SUCCESS"), join(root, "top.parquet")}
	got, err := objstore.Match(ctx, store, exact)
	if want := slices.Sorted(slices.Values(exact)); err != nil || !slices.Equal(uris(got), want) {
		t.Errorf("Match(%q) = %q, %v; want %q", exact, uris(got), err, want)
	}
	missing := join(root, "nope.bin")
	if _, err := objstore.Match(ctx, store, []string{missing}); !errors.Is(err, objstore.ErrNotFound) || !strings.Contains(fmt.Sprint(err), missing) {
		t.Errorf("Match(%q) = %v, want ErrNotFound naming it", missing, err)
	}
	for _, pat := range []string{join(root, "*.parquet"), join(root, "a/"), join(root, "**/x.bin")} {
		_, err := objstore.Match(ctx, store, []string{pat})
		if !errors.Is(err, objstore.ErrUnsupported) || !strings.Contains(fmt.Sprint(err), pat) || !strings.Contains(fmt.Sprint(err), "name each file") {
			t.Errorf("Match(%q) on a store that cannot list = %v, want ErrUnsupported naming it and saying to name each file", pat, err)
		}
	}
}
