package loader_test

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshfeed/meshfeed/loader"
	"github.com/meshfeed/meshfeed/loader/loadertest"
)

var storeSeed = flag.Uint64("storeseed", 0, "seed for the store tests' random data (0: time-based)")

// newRand returns a seeded generator and logs the seed so a failure can be
// replayed with -storeseed.
func newRand(t testing.TB) *rand.Rand {
	t.Helper()
	seed := *storeSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun with -storeseed=%d)", seed, seed)
	return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
}

func randBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// join appends a relative name to a root that is a local directory or a
// gs://bucket/prefix.
func join(root, name string) string { return strings.TrimSuffix(root, "/") + "/" + name }

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

func uris(objs []loader.Object) []string {
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

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// runStoreSuite checks the Store contract on store, which must also be a
// Creator and a StatsReporter, under root (a local directory or
// gs://bucket/prefix) that holds nothing yet.
func runStoreSuite(t *testing.T, store loader.Store, root string) {
	ctx := context.Background()
	r := newRand(t)
	data := make(map[string][]byte)
	for _, f := range suiteFiles {
		b := randBytes(r, f.size)
		data[f.name] = b
		loadertest.PutObject(t, store, join(root, f.name), b)
	}
	stats := store.(loader.StatsReporter).Stats()

	t.Run("List", func(t *testing.T) {
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
			if want := names(root, c.want...); !equalStrings(uris(got), want) {
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
		if !errors.Is(err, loader.ErrNotFound) || !strings.Contains(fmt.Sprint(err), missing) {
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
		reads0, bytes0 := stats.Reads.Load(), stats.BytesRead.Load()
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
		if got, got2 := stats.Reads.Load()-reads0, stats.BytesRead.Load()-bytes0; got != wantReads || got2 != wantBytes {
			t.Errorf("stats moved by %d reads, %d bytes; want %d, %d", got, got2, wantReads, wantBytes)
		}

		for _, rg := range []struct{ off, len int64 }{{n - 10, 20}, {n, 1}, {n + 100, 5}, {0, n + 1}} {
			err := store.ReadAt(ctx, obj, make([]byte, rg.len), rg.off)
			if !errors.Is(err, io.ErrUnexpectedEOF) || !strings.Contains(fmt.Sprint(err), obj.URI) {
				t.Errorf("ReadAt(%s, [%d, %d)) = %v, want io.ErrUnexpectedEOF naming the object", obj.URI, rg.off, rg.off+rg.len, err)
			}
		}
		// The same past-the-end read with an Object that knows nothing but its URI.
		bare := loader.Object{URI: obj.URI}
		if err := store.ReadAt(ctx, bare, make([]byte, 20), n-10); !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("ReadAt(bare %s, [%d, %d)) = %v, want io.ErrUnexpectedEOF", obj.URI, n-10, n+10, err)
		}
		if err := store.ReadAt(ctx, bare, make([]byte, 5), 7); err != nil {
			t.Errorf("ReadAt(bare %s, [7, 12)) = %v", obj.URI, err)
		}

		missing := loader.Object{URI: join(root, "a/missing.bin")}
		if err := store.ReadAt(ctx, missing, make([]byte, 1), 0); !errors.Is(err, loader.ErrNotFound) || !strings.Contains(fmt.Sprint(err), missing.URI) {
			t.Errorf("ReadAt(%s) = %v, want ErrNotFound naming it", missing.URI, err)
		}
	})

	t.Run("ConcurrentReadAt", func(t *testing.T) {
		var objs []loader.Object
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
		for _, c := range cases {
			got, err := loader.Match(ctx, store, c.patterns)
			if want := names(root, c.want...); err != nil || !equalStrings(uris(got), want) {
				t.Errorf("Match(%q) = %q, %v; want %q", c.patterns, uris(got), err, want)
			}
		}
		for _, pat := range []string{join(root, "nope"), join(root, "*.csv"), join(root, "b/*hid*"), join(root, "a/x.bin/")} {
			_, err := loader.Match(ctx, store, []string{join(root, "a"), pat})
			if !errors.Is(err, loader.ErrNotFound) || !strings.Contains(fmt.Sprint(err), pat) || !strings.Contains(fmt.Sprint(err), "check") {
				t.Errorf("Match(%q) = %v, want ErrNotFound naming the pattern and saying what to check", pat, err)
			}
		}
		if _, err := loader.Match(ctx, store, []string{join(root, "a/[x")}); !errors.Is(err, path.ErrBadPattern) {
			t.Errorf("Match(%q) = %v, want path.ErrBadPattern", join(root, "a/[x"), err)
		}
	})

	t.Run("GenerationPinning", func(t *testing.T) {
		uri := join(root, "pinned.bin")
		old := randBytes(r, 1000)
		obj := loadertest.PutObject(t, store, uri, old)
		p := make([]byte, 100)
		if err := store.ReadAt(ctx, obj, p, 0); err != nil || !bytes.Equal(p, old[:100]) {
			t.Fatalf("ReadAt(%s) before overwrite = %v", uri, err)
		}
		newer := randBytes(r, 2000)
		obj2 := loadertest.PutObject(t, store, uri, newer)
		if obj2.CacheKey() == obj.CacheKey() {
			t.Errorf("CacheKey unchanged after overwrite: %q", obj.CacheKey())
		}
		err := store.ReadAt(ctx, obj, p, 0)
		if !errors.Is(err, loader.ErrNotFound) || !strings.Contains(fmt.Sprint(err), uri) {
			t.Errorf("ReadAt(old version of %s) = %v, want ErrNotFound naming it", uri, err)
		}
		if err := store.ReadAt(ctx, obj2, p, 1500); err != nil || !bytes.Equal(p, newer[1500:1600]) {
			t.Errorf("ReadAt(new version of %s) = %v, want the new bytes", uri, err)
		}
	})
}

func TestLocalStoreSuite(t *testing.T) {
	s := loader.NewLocalStore()
	defer s.Close()
	runStoreSuite(t, s, t.TempDir())
}

func TestGCSStoreSuite(t *testing.T) {
	s := loadertest.StartFakeGCS(t, "suite")
	runStoreSuite(t, s, "gs://suite/data")
}

func TestMuxSuite(t *testing.T) {
	fake := loadertest.NewFakeGCS(t, "mux")
	m, err := loader.NewStore(context.Background(), loader.WithGCSOptions(loader.WithGCSEndpoint(fake.URL)))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	t.Run("local", func(t *testing.T) { runStoreSuite(t, m, t.TempDir()) })
	t.Run("gcs", func(t *testing.T) { runStoreSuite(t, m, "gs://mux/root") })
}

func TestMuxRouting(t *testing.T) {
	ctx := context.Background()
	m, err := loader.NewStore(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()

	dir := t.TempDir()
	t.Chdir(dir)
	loadertest.PutObject(t, m, "rel/f.bin", []byte("hello"))
	abs := filepath.Join(dir, "rel/f.bin")
	for _, uri := range []string{"rel/f.bin", "./rel/../rel/f.bin", abs, "file://" + abs} {
		o, err := m.Stat(ctx, uri)
		if err != nil || o.URI != abs {
			t.Errorf("Stat(%q) = %q, %v; want %q", uri, o.URI, err, abs)
		}
	}
	got, err := loader.Match(ctx, m, []string{"rel/*.bin"})
	if err != nil || !equalStrings(uris(got), []string{abs}) {
		t.Errorf("Match(%q) = %q, %v; want %q", "rel/*.bin", uris(got), err, abs)
	}
	objs, err := m.List(ctx, "rel/")
	if err != nil || !equalStrings(uris(objs), []string{abs}) {
		t.Errorf("List(%q) = %q, %v; want %q", "rel/", uris(objs), err, abs)
	}
	if _, err := m.Stat(ctx, "s3://bucket/x"); !errors.Is(err, loader.ErrUnsupported) {
		t.Errorf("Stat(%q) = %v, want ErrUnsupported", "s3://bucket/x", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "rel")); err != nil {
		t.Errorf("Create did not make the directory: %v", err)
	}
}

// TestLocalHandleCache reads many files through a store that may keep only a
// few open, from several goroutines, and checks every byte.
func TestLocalHandleCache(t *testing.T) {
	ctx := context.Background()
	r := newRand(t)
	s := loader.NewLocalStore(loader.WithMaxOpenFiles(3))
	defer s.Close()
	dir := t.TempDir()
	var objs []loader.Object
	var datas [][]byte
	for i := range 10 {
		b := randBytes(r, 1000+i)
		objs = append(objs, loadertest.PutObject(t, s, filepath.Join(dir, fmt.Sprintf("f%02d", i)), b))
		datas = append(datas, b)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			gr := rand.New(rand.NewPCG(uint64(g), 2))
			for range 2000 {
				i := gr.IntN(len(objs))
				off := gr.Int64N(objs[i].Size)
				p := make([]byte, objs[i].Size-off)
				if err := s.ReadAt(ctx, objs[i], p, off); err != nil {
					errs <- err
					return
				}
				if !bytes.Equal(p, datas[i][off:]) {
					errs <- fmt.Errorf("ReadAt(%s, %d) returned the wrong bytes", objs[i].URI, off)
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
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.ReadAt(ctx, objs[0], make([]byte, 1), 0); err == nil {
		t.Errorf("ReadAt after Close = nil, want an error")
	}
}

// TestLocalCreateAtomic checks that nothing is visible before Close and that
// the temporary file is hidden from Match.
func TestLocalCreateAtomic(t *testing.T) {
	ctx := context.Background()
	s := loader.NewLocalStore()
	defer s.Close()
	dir := t.TempDir()
	uri := filepath.Join(dir, "sub/dir/out.bin")
	w, err := s.Create(ctx, uri)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte("partial")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Stat(ctx, uri); !errors.Is(err, loader.ErrNotFound) {
		t.Errorf("Stat(%q) before Close = %v, want ErrNotFound", uri, err)
	}
	if _, err := loader.Match(ctx, s, []string{dir}); !errors.Is(err, loader.ErrNotFound) {
		t.Errorf("Match(%q) before Close = %v, want ErrNotFound (temp file is hidden)", dir, err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	o, err := s.Stat(ctx, uri)
	if err != nil || o.Size != 7 {
		t.Errorf("Stat(%q) after Close = %+v, %v; want 7 bytes", uri, o, err)
	}
	all, err := s.List(ctx, dir+"/")
	if err != nil || !equalStrings(uris(all), []string{uri}) {
		t.Errorf("List(%q) = %q, %v; want only %q (no temp files left)", dir+"/", uris(all), err, uri)
	}
}

// TestGCSEmulatorEnv checks that STORAGE_EMULATOR_HOST ("host:port", as the
// emulator docs set it) is enough to reach an emulator, through a Mux.
func TestGCSEmulatorEnv(t *testing.T) {
	fake := loadertest.NewFakeGCS(t, "env")
	t.Setenv("STORAGE_EMULATOR_HOST", strings.TrimPrefix(fake.URL, "http://"))
	ctx := context.Background()
	m, err := loader.NewStore(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	obj := loadertest.PutObject(t, m, "gs://env/a/b.bin", []byte("0123456789"))
	if obj.Generation == 0 {
		t.Errorf("Stat(%q).Generation = 0, want the object's generation", obj.URI)
	}
	p := make([]byte, 4)
	if err := m.ReadAt(ctx, obj, p, 3); err != nil || string(p) != "3456" {
		t.Errorf("ReadAt(%s, [3, 7)) = %q, %v; want %q", obj.URI, p, err, "3456")
	}
	got, err := loader.Match(ctx, m, []string{"gs://env"})
	if err != nil || !equalStrings(uris(got), []string{"gs://env/a/b.bin"}) {
		t.Errorf("Match(gs://env) = %q, %v", uris(got), err)
	}
	if r := m.Stats().Reads.Load(); r != 1 {
		t.Errorf("Mux Stats().Reads = %d, want 1", r)
	}
}
