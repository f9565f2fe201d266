package loader_test

import (
	"context"
	"errors"
	"flag"
	"io"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/meshfeed/meshfeed/internal/datagen"
	"github.com/meshfeed/meshfeed/loader"
	"github.com/meshfeed/meshfeed/objstore"
	"github.com/meshfeed/meshfeed/objstore/objstoretest"
)

// Throughput against latency: a dataset on a remote store's emulator behind
// an objstoretest.LatencyFront (a latency before every request's first
// byte, one bandwidth shared by all response bodies), read whole through the
// loader as `meshfeed read` does. Each case reports the bytes the loader
// received per second (MiB/s) and as a share of the front's bandwidth
// (%cap): 100% is the link kept busy from start to end.
//
//	go test ./loader/ -run '^$' -bench BenchmarkLatencyThroughput -benchtime 2x
//
// Cases, per store: "raw" reads the objects in ranged reads of 1 MiB, 64
// at a time, without the loader (the ceiling of store, front and machine);
// "reads=workers" keeps as many reads in flight as decode
// workers (how the reader worked before WithReadsInFlight), "reads=default"
// the default, "cache/cold" and "cache/warm" the first and second epoch
// through a DiskCache in front of the store, and "local" the same files on
// local disk (no front), for comparison.

var (
	latencyFlag   = flag.Duration("meshfeed.latency", 50*time.Millisecond, "BenchmarkLatencyThroughput: latency per request")
	bandwidthFlag = flag.Int64("meshfeed.bandwidth", 200<<20, "BenchmarkLatencyThroughput: aggregate bandwidth, bytes/s")
	blockFlag     = flag.Int64("meshfeed.cacheblock", objstore.DefaultCacheBlockSize, "BenchmarkLatencyThroughput: the disk cache's block size")
)

// remoteStore is a store for BenchmarkLatencyThroughput: start starts its
// emulator (stopped at the end of the benchmark) and returns its base URL, a
// store that writes to it directly, and open, which returns a store reading
// through endpoint (a proxy in front of the emulator). root is where the
// dataset is written.
type remoteStore struct {
	name  string
	root  string
	start func(b *testing.B) (upstream string, writer objstore.Store, open func(endpoint string) objstore.Store)
	// uris, when set, names the files as read through the front at base
	// (a store that cannot list); nil reads root's *.parquet.
	uris func(b *testing.B, base string) []string
	// dir, when set, is where the dataset is written instead of root
	// (known once start ran).
	dir func() string
}

var remoteStores = []remoteStore{
	{name: "gcs", root: "gs://bench/latency", start: func(b *testing.B) (string, objstore.Store, func(string) objstore.Store) {
		fake := objstoretest.NewFakeGCS(b, "bench")
		return fake.URL, fake.Store(b), func(endpoint string) objstore.Store { return objstoretest.NewStore(b, endpoint) }
	}},
	{name: "s3", root: "s3://bench/latency", start: func(b *testing.B) (string, objstore.Store, func(string) objstore.Store) {
		fake := objstoretest.NewFakeS3(b, "bench")
		return fake.URL, fake.Store(b), func(endpoint string) objstore.Store { return objstoretest.NewS3Store(b, endpoint) }
	}},
	{name: "azure", root: "az://bench/latency", start: func(b *testing.B) (string, objstore.Store, func(string) objstore.Store) {
		az := objstoretest.StartAzurite(b)
		az.CreateContainer(b, "bench")
		return az.Base, az.Store(b), func(endpoint string) objstore.Store {
			return objstoretest.NewAzureStoreAt(b, endpoint+"/"+objstoretest.AzuriteAccount)
		}
	}},
	httpsStore(),
}

// httpsStore is the https:// entry: a FakeHTTP serving a directory (over
// loopback http, which the store allows), the dataset written to that
// directory on local disk, and its files named one by one as URLs of the
// front (HTTP has no listing).
func httpsStore() remoteStore {
	var dir string
	return remoteStore{name: "https",
		start: func(b *testing.B) (string, objstore.Store, func(string) objstore.Store) {
			fake := objstoretest.NewFakeHTTP(b, false)
			dir = fake.Dir
			return fake.URL, objstore.NewLocalStore(), func(string) objstore.Store { return objstore.NewHTTPSStore() }
		},
		dir: func() string { return dir },
		uris: func(b *testing.B, base string) []string {
			names, err := filepath.Glob(filepath.Join(dir, "*.parquet"))
			if err != nil || len(names) == 0 {
				b.Fatalf("https: the dataset's files in %s: %v (%d found)", dir, err, len(names))
			}
			for i, n := range names {
				names[i] = base + "/" + filepath.Base(n)
			}
			return names
		}}
}

// latencySpec is the dataset: 64 MiB of float32 features in 16 files of
// 1 MiB row groups, uncompressed (so the bytes on the link are the bytes
// decoded, and decoding is cheap beside the transfer).
func latencySpec() datagen.Spec {
	return datagen.Spec{Rows: 64 << 10, Files: 16, RowGroupRows: 1 << 10, Features: 256,
		Format: datagen.FormatParquet, Compression: datagen.CompressionNone}
}

func BenchmarkLatencyThroughput(b *testing.B) {
	for _, rs := range remoteStores {
		b.Run(rs.name, func(b *testing.B) { benchLatency(b, rs) })
	}
}

// benchLatency runs the cases of one store.
func benchLatency(b *testing.B, rs remoteStore) {
	ctx := context.Background()
	upstream, writer, open := rs.start(b)
	spec := latencySpec()
	root := rs.root
	if rs.dir != nil { // the dataset goes where the server serves it from
		root = rs.dir()
	}
	if _, err := datagen.Write(ctx, writer.(objstore.Creator), root, spec); err != nil {
		b.Fatal(err)
	}
	local := b.TempDir()
	if _, err := datagen.Write(ctx, objstore.NewLocalStore(), local, spec); err != nil {
		b.Fatal(err)
	}
	front := objstoretest.NewLatencyFront(b, upstream, *latencyFlag, *bandwidthFlag)
	remote := open(front.URL())
	glob := []string{rs.root + "/*.parquet"}
	if rs.uris != nil {
		glob = rs.uris(b, front.URL())
	}
	b.Logf("%s: latency %v, bandwidth %.0f MiB/s", rs.name, *latencyFlag, float64(*bandwidthFlag)/(1<<20))

	workers := []loader.ReaderOption{loader.WithReaderReadsInFlight(1)} // taken as the decode workers
	b.Run("raw", func(b *testing.B) { rawRanges(b, remote, glob) })
	b.Run("reads=workers", func(b *testing.B) { readThrough(b, remote, glob, workers) })
	b.Run("reads=default", func(b *testing.B) { readThrough(b, remote, glob, nil) })
	b.Run("reads=16", func(b *testing.B) {
		readThrough(b, remote, glob, []loader.ReaderOption{loader.WithReaderReadsInFlight(16)})
	})
	b.Run("cache/cold", func(b *testing.B) {
		var rate rate
		link := front.BodyBytes()
		for range b.N {
			b.StopTimer()
			c, err := objstore.NewDiskCache(filepath.Join(b.TempDir(), "cache"), 1<<30, objstore.WithCacheBlockSize(*blockFlag))
			if err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			rate.add(readOnce(b, c.Wrap(remote, new(objstore.Stats)), glob, nil))
		}
		rate.report(b)
		// Body bytes on the link (footers and listings included) per byte
		// the loader read: what fetching whole blocks costs.
		b.ReportMetric(float64(front.BodyBytes()-link)/rate.bytes, "link/read")
	})
	b.Run("cache/warm", func(b *testing.B) {
		c, err := objstore.NewDiskCache(filepath.Join(b.TempDir(), "cache"), 1<<30, objstore.WithCacheBlockSize(*blockFlag))
		if err != nil {
			b.Fatal(err)
		}
		cached := c.Wrap(remote, new(objstore.Stats))
		readOnce(b, cached, glob, nil) // the first epoch, untimed
		b.ResetTimer()
		before := front.Requests()
		readThrough(b, cached, glob, nil)
		// The listing of loader.Open (footers and data come from the cache).
		b.ReportMetric(float64(front.Requests()-before)/float64(b.N), "requests/op")
	})
	b.Run("local", func(b *testing.B) {
		readThrough(b, objstore.NewLocalStore(), []string{filepath.Join(local, "*.parquet")}, nil)
	})
}

// rate sums the bytes read and the seconds it took.
type rate struct{ bytes, secs float64 }

func (r *rate) add(bytes, secs float64) { r.bytes += bytes; r.secs += secs }

// report reports the bytes received per second and their share of the
// front's bandwidth (-meshfeed.bandwidth, also for reads that do not go
// through the front).
func (r *rate) report(b *testing.B) {
	b.SetBytes(int64(r.bytes / float64(b.N)))
	b.ReportMetric(r.bytes/r.secs/(1<<20), "MiB/s")
	b.ReportMetric(100*r.bytes/r.secs/float64(*bandwidthFlag), "%cap")
}

// rawRanges reads every object of glob in ranged reads of 1 MiB, 64 at a
// time, with no loader: what the store and the front deliver at most.
func rawRanges(b *testing.B, store objstore.Store, glob []string) {
	ctx := context.Background()
	objs, err := objstore.Match(ctx, store, glob)
	if err != nil {
		b.Fatal(err)
	}
	type job struct {
		obj    objstore.Object
		off, n int64
	}
	var jobs []job
	for _, o := range objs {
		for off := int64(0); off < o.Size; off += 1 << 20 {
			jobs = append(jobs, job{o, off, min(1<<20, o.Size-off)})
		}
	}
	var rate rate
	for range b.N {
		start := time.Now()
		ch := make(chan job)
		var wg sync.WaitGroup
		var failed atomic.Value
		for range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				buf := make([]byte, 1<<20)
				for j := range ch {
					if err := store.ReadAt(ctx, j.obj, buf[:j.n], j.off); err != nil {
						failed.Store(err)
					}
				}
			}()
		}
		var total int64
		for _, j := range jobs {
			ch <- j
			total += j.n
		}
		close(ch)
		wg.Wait()
		if err, _ := failed.Load().(error); err != nil {
			b.Fatal(err)
		}
		rate.add(float64(total), time.Since(start).Seconds())
	}
	rate.report(b)
}

// readThrough reads the dataset b.N times and reports the rate.
func readThrough(b *testing.B, store objstore.Store, glob []string, opts []loader.ReaderOption) {
	var rate rate
	for range b.N {
		rate.add(readOnce(b, store, glob, opts))
	}
	rate.report(b)
}

// readOnce opens the dataset (untimed: footers) and reads every row group
// with the reader's defaults (read-ahead, decode workers) and opts. It
// returns the bytes the loader fetched and the seconds reading took.
func readOnce(b *testing.B, store objstore.Store, glob []string, opts []loader.ReaderOption) (float64, float64) {
	ctx := context.Background()
	b.StopTimer()
	ds, err := loader.Open(ctx, store, glob, loader.WithFooterCache(nil))
	if err != nil {
		b.Fatal(err)
	}
	b.StartTimer()
	start := time.Now()
	r := ds.NewReader(ctx, ds.RowGroups(), memory.DefaultAllocator, opts...)
	defer r.Close()
	for {
		rec, _, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			b.Fatal(err)
		}
		rec.Release()
	}
	return float64(r.Stats().FetchedBytes.Load()), time.Since(start).Seconds()
}
