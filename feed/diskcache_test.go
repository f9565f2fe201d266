package feed

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/meshfeed/meshfeed/internal/datagen"
	"github.com/meshfeed/meshfeed/loader"
	"github.com/meshfeed/meshfeed/objstore"
	"github.com/meshfeed/meshfeed/objstore/objstoretest"
	"github.com/meshfeed/meshfeed/transport"
)

// cachedEnv is faultSpec's dataset on a fake GCS behind a LatencyFront (a
// remote store's latency) and a FaultFront that only counts the media
// requests (reads of object bytes) that reach the store.
type cachedEnv struct {
	*faultEnv
	latency *objstoretest.LatencyFront
	media   *objstoretest.FaultFront
}

func newCachedEnv(t *testing.T) *cachedEnv {
	t.Helper()
	// faultSpec's rows, 64 features wide: files of about 600 KB, many
	// cache blocks each, read by the loader well past the footer's tail.
	spec := faultSpec()
	spec.Features = 64
	fake := objstoretest.NewFakeGCS(t, "bucket")
	if _, err := datagen.Write(context.Background(), fake.Store(t), "gs://bucket/train/ds", spec); err != nil {
		t.Fatalf("datagen.Write to fake GCS: %v", err)
	}
	e := &cachedEnv{faultEnv: &faultEnv{fake: fake}}
	e.latency = objstoretest.NewLatencyFront(t, e.fake.URL, 2*time.Millisecond, 0)
	e.media = objstoretest.NewFaultFrontFor(t, e.latency.URL(), objstoretest.IsGCSMedia)
	return e
}

func (e *cachedEnv) mediaRequests() int {
	m, _ := e.media.Counts()
	return m
}

// serveCached starts a Pipeline over a Mux reading gs:// through the
// counting fronts, with a disk cache in dir when dir is not empty. The
// footer cache and the dataset cache are off, so that every epoch reads its
// footers from storage too.
func (e *cachedEnv) serveCached(t *testing.T, dir string) (*testServer, func() *objstore.Stats) {
	t.Helper()
	opts := []objstore.MuxOption{objstore.WithGCSOptions(objstore.WithGCSEndpoint(e.media.URL()))}
	if dir != "" {
		c, err := objstore.NewDiskCache(dir, 64<<20, objstore.WithCacheBlockSize(64<<10))
		if err != nil {
			t.Fatal(err)
		}
		opts = append(opts, objstore.WithDiskCache(c))
	}
	p, err := NewPipeline(context.Background(),
		WithAllocator(checkedMem(t)),
		WithStoreOptions(opts...),
		WithCacheTTL(0),
		WithReadAhead(128<<10),
		WithLoaderOptions(loader.WithFooterCache(nil)))
	if err != nil {
		t.Fatalf("NewPipeline: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	ts := startServer(t, viaTCP, p, []transport.Option{transport.WithAllowedRoots("gs://bucket/train")})
	// The server confined the Pipeline to its roots: a new store, whose
	// counters these are.
	return ts, func() *objstore.Stats {
		st := p.cfg.store.(objstore.StatsReporter).Stats()
		// What the server exports (meshfeed_storage_cache_*, /debug/vars).
		if got, ok := p.StorageStats(); !ok || got.CacheHits != st.CacheHits.Load() || got.CacheMisses != st.CacheMisses.Load() ||
			got.CacheBytesSaved != st.CacheBytesSaved.Load() || got.CacheCorrupt != st.CacheCorrupt.Load() {
			t.Errorf("StorageStats() = %+v, %v; the store counts hits %d, misses %d, saved %d", got, ok,
				st.CacheHits.Load(), st.CacheMisses.Load(), st.CacheBytesSaved.Load())
		}
		return st
	}
}

// epochSums streams epoch of faultRequest's plan and returns its step sums.
func epochSums(t *testing.T, ts *testServer, epoch int) []string {
	t.Helper()
	req := faultRequest()
	req.Start = transport.Position{Epoch: epoch}
	req.Epochs = epoch + 1
	sums, err := stepSums(context.Background(), ts.Client, req, 0, nil)
	if err != nil {
		t.Fatalf("epoch %d: %v", epoch, err)
	}
	if len(sums) == 0 {
		t.Fatalf("epoch %d: no steps", epoch)
	}
	return sums
}

// TestDiskCacheSecondEpoch: with --cache-dir, the second epoch of a dataset
// that fits the cache makes no media request to the store, also when it is
// served by a new server over the same directory, and every step equals an
// uncached run's.
func TestDiskCacheSecondEpoch(t *testing.T) {
	e := newCachedEnv(t)
	plain, _ := e.serveCached(t, "")
	want := [][]string{epochSums(t, plain, 0), epochSums(t, plain, 1)}
	uncached := e.mediaRequests()
	if uncached == 0 {
		t.Fatal("the uncached run made no media request: the front counts nothing")
	}

	dir := t.TempDir()
	ts, statsOf := e.serveCached(t, dir)
	m0 := e.mediaRequests()
	if got := epochSums(t, ts, 0); !slices.Equal(got, want[0]) {
		t.Fatal("epoch 0 through the cache differs from the uncached run")
	}
	m1 := e.mediaRequests()
	if m1-m0 < 4 {
		t.Fatalf("epoch 0 through an empty cache made %d media requests, want several per file (footer, row groups)", m1-m0)
	}
	if got := epochSums(t, ts, 1); !slices.Equal(got, want[1]) {
		t.Fatal("epoch 1 from the cache differs from the uncached run")
	}
	if m2 := e.mediaRequests(); m2 != m1 {
		t.Errorf("epoch 1 made %d media requests, want 0 (the cache holds the dataset)", m2-m1)
	}
	stats := statsOf()
	if stats.CacheHits.Load() == 0 || stats.CacheBytesSaved.Load() == 0 || stats.CacheCorrupt.Load() != 0 {
		t.Errorf("cache stats: %d hits, %d bytes saved, %d corrupt; want hits, bytes saved, none corrupt",
			stats.CacheHits.Load(), stats.CacheBytesSaved.Load(), stats.CacheCorrupt.Load())
	}
	t.Logf("media requests: uncached two epochs %d, cached epoch 0 %d, epoch 1 0; %d bytes saved", uncached, m1-m0, stats.CacheBytesSaved.Load())

	// A restarted server over the same directory: both epochs from disk.
	ts2, statsOf2 := e.serveCached(t, dir)
	for epoch := range 2 {
		if got := epochSums(t, ts2, epoch); !slices.Equal(got, want[epoch]) {
			t.Fatalf("epoch %d after a restart differs from the uncached run", epoch)
		}
	}
	if m3 := e.mediaRequests(); m3 != m1 {
		t.Errorf("a restarted server made %d media requests, want 0", m3-m1)
	}
	if st := statsOf2(); st.CacheMisses.Load() != 0 || st.CacheHits.Load() == 0 {
		t.Errorf("restarted server: %d cache misses, %d hits; want 0 and some", st.CacheMisses.Load(), st.CacheHits.Load())
	}
}
