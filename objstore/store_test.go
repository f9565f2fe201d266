package objstore_test

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshfeed/meshfeed/objstore"
	"github.com/meshfeed/meshfeed/objstore/objstoretest"
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

// The conformance suite (objstoretest.Conformance) on every store: local
// disk, GCS through the in-process fake-gcs-server, and the Mux over both.

func TestLocalStoreConformance(t *testing.T) {
	objstoretest.Conformance(t, func(t *testing.T) (objstore.Store, string) {
		s := objstore.NewLocalStore()
		t.Cleanup(func() { s.Close() })
		return s, t.TempDir()
	}, nil)
}

func TestGCSStoreConformance(t *testing.T) {
	objstoretest.Conformance(t, func(t *testing.T) (objstore.Store, string) {
		return objstoretest.StartFakeGCS(t, "suite"), "gs://suite/data"
	}, nil)
}

// TestGCSStoreConformanceServerPut puts the objects straight into the fake
// server, not through the store's Creator: what the store lists and reads
// is what another writer made.
func TestGCSStoreConformanceServerPut(t *testing.T) {
	var fake *objstoretest.FakeGCS
	objstoretest.Conformance(t, func(t *testing.T) (objstore.Store, string) {
		fake = objstoretest.NewFakeGCS(t, "server")
		return fake.Store(t), "gs://server/data"
	}, func(t testing.TB, store objstore.Store, uri string, data []byte) objstore.Object {
		return fake.Put(t, store, uri, data)
	})
}

func TestMuxSuite(t *testing.T) {
	fake := objstoretest.NewFakeGCS(t, "mux")
	m, err := objstore.NewStore(context.Background(), objstore.WithGCSOptions(objstore.WithGCSEndpoint(fake.URL)))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	t.Run("local", func(t *testing.T) {
		objstoretest.Conformance(t, func(t *testing.T) (objstore.Store, string) { return m, t.TempDir() }, nil)
	})
	t.Run("gcs", func(t *testing.T) {
		objstoretest.Conformance(t, func(t *testing.T) (objstore.Store, string) { return m, "gs://mux/root" }, nil)
	})
}

func TestMuxRouting(t *testing.T) {
	ctx := context.Background()
	m, err := objstore.NewStore(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()

	dir := t.TempDir()
	t.Chdir(dir)
	objstoretest.PutObject(t, m, "rel/f.bin", []byte("hello"))
	abs := filepath.Join(dir, "rel/f.bin")
	for _, uri := range []string{"rel/f.bin", "./rel/../rel/f.bin", abs, "file://" + abs} {
		o, err := m.Stat(ctx, uri)
		if err != nil || o.URI != abs {
			t.Errorf("Stat(%q) = %q, %v; want %q", uri, o.URI, err, abs)
		}
	}
	got, err := objstore.Match(ctx, m, []string{"rel/*.bin"})
	if err != nil || !slices.Equal(uris(got), []string{abs}) {
		t.Errorf("Match(%q) = %q, %v; want %q", "rel/*.bin", uris(got), err, abs)
	}
	objs, err := m.List(ctx, "rel/")
	if err != nil || !slices.Equal(uris(objs), []string{abs}) {
		t.Errorf("List(%q) = %q, %v; want %q", "rel/", uris(objs), err, abs)
	}
	if _, err := m.Stat(ctx, "ftp://bucket/x"); !errors.Is(err, objstore.ErrUnsupported) {
		t.Errorf("Stat(%q) = %v, want ErrUnsupported", "ftp://bucket/x", err)
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
	s := objstore.NewLocalStore(objstore.WithMaxOpenFiles(3))
	defer s.Close()
	dir := t.TempDir()
	var objs []objstore.Object
	var datas [][]byte
	for i := range 10 {
		b := randBytes(r, 1000+i)
		objs = append(objs, objstoretest.PutObject(t, s, filepath.Join(dir, fmt.Sprintf("f%02d", i)), b))
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
	s := objstore.NewLocalStore()
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
	if _, err := s.Stat(ctx, uri); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("Stat(%q) before Close = %v, want ErrNotFound", uri, err)
	}
	if _, err := objstore.Match(ctx, s, []string{dir}); !errors.Is(err, objstore.ErrNotFound) {
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
	if err != nil || !slices.Equal(uris(all), []string{uri}) {
		t.Errorf("List(%q) = %q, %v; want only %q (no temp files left)", dir+"/", uris(all), err, uri)
	}
}

// TestGCSEmulatorEnv checks that STORAGE_EMULATOR_HOST ("host:port", as the
// emulator docs set it) is enough to reach an emulator, through a Mux.
func TestGCSEmulatorEnv(t *testing.T) {
	fake := objstoretest.NewFakeGCS(t, "env")
	t.Setenv("STORAGE_EMULATOR_HOST", strings.TrimPrefix(fake.URL, "http://"))
	ctx := context.Background()
	m, err := objstore.NewStore(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	obj := objstoretest.PutObject(t, m, "gs://env/a/b.bin", []byte("0123456789"))
	if obj.Generation == 0 {
		t.Errorf("Stat(%q).Generation = 0, want the object's generation", obj.URI)
	}
	p := make([]byte, 4)
	if err := m.ReadAt(ctx, obj, p, 3); err != nil || string(p) != "3456" {
		t.Errorf("ReadAt(%s, [3, 7)) = %q, %v; want %q", obj.URI, p, err, "3456")
	}
	got, err := objstore.Match(ctx, m, []string{"gs://env"})
	if err != nil || !slices.Equal(uris(got), []string{"gs://env/a/b.bin"}) {
		t.Errorf("Match(gs://env) = %q, %v", uris(got), err)
	}
	if r := m.Stats().Reads.Load(); r != 1 {
		t.Errorf("Mux Stats().Reads = %d, want 1", r)
	}
}
