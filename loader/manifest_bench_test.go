package loader_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/fsouza/fake-gcs-server/fakestorage"

	"github.com/meshfeed/meshfeed/internal/datagen"
	"github.com/meshfeed/meshfeed/loader"
	"github.com/meshfeed/meshfeed/manifest"
	"github.com/meshfeed/meshfeed/objstore"
	"github.com/meshfeed/meshfeed/objstore/objstoretest"
)

// BenchmarkManifestPlanning plans a dataset of many small files on the GCS
// emulator behind a 30 ms per-request latency, from its manifest and from
// its footers, and reports the requests, the bytes fetched and the time of
// each. The files are copies of one small Parquet file made straight in
// the emulator, 1,000 per bucket (a pattern each):
// MESHFEED_MANIFEST_BENCH_FILES (default 20,000) with their manifest (that
// file's entry under each object's name and identity: building it through
// the latency would cost what the footers do), named explicitly, and
// MESHFEED_MANIFEST_BENCH_FOOTER_FILES (default 2,000) planned from their
// footers: the emulator's CPU per footer read grows with the files it
// holds, and 20,000 footers take it far longer than the 30 ms latency
// would. Run with -benchtime=1x (see BENCHMARKS.md).
func BenchmarkManifestPlanning(b *testing.B) {
	n := envInt(b, "MESHFEED_MANIFEST_BENCH_FILES", 20000)
	nf := envInt(b, "MESHFEED_MANIFEST_BENCH_FOOTER_FILES", 2000)
	ctx := context.Background()
	dir := b.TempDir()
	s := datagen.DefaultSpec()
	s.Rows, s.Features = 100, 4
	res, err := datagen.Write(ctx, datagen.LocalCreator{}, dir, s)
	if err != nil {
		b.Fatal(err)
	}
	data, err := os.ReadFile(res.Files[0].URI)
	if err != nil {
		b.Fatal(err)
	}
	one, err := loader.BuildManifest(ctx, objstore.NewLocalStore(), []string{res.Files[0].URI}, 0, 0)
	if err != nil {
		b.Fatal(err)
	}
	// The emulator scans its bucket's objects (formatting each one's ID) on
	// every write and read: buckets of 1,000 files keep that out of the
	// measurement.
	const perBucket = 1000
	buckets := func(prefix string, files int) (names, patterns []string) {
		for i := 0; i*perBucket < files; i++ {
			names = append(names, fmt.Sprintf("%s%03d", prefix, i))
			patterns = append(patterns, fmt.Sprintf("gs://%s%03d/data/", prefix, i))
		}
		return names, patterns
	}
	mBuckets, mPatterns := buckets("manifest", n)
	fBuckets, fPatterns := buckets("footers", nf)
	gcs := objstoretest.NewFakeGCS(b, append(mBuckets, fBuckets...)...)
	for _, set := range []struct {
		names []string
		files int
	}{{mBuckets, n}, {fBuckets, nf}} {
		for i := range set.files {
			gcs.Server.CreateObject(fakestorage.Object{
				ObjectAttrs: fakestorage.ObjectAttrs{BucketName: set.names[i/perBucket], Name: fmt.Sprintf("data/part-%06d.parquet", i)},
				Content:     data,
			})
		}
	}
	direct := gcs.Store(b)
	var objs []objstore.Object
	for _, p := range mPatterns {
		o, err := direct.List(ctx, p)
		if err != nil {
			b.Fatal(err)
		}
		objs = append(objs, o...)
	}
	if len(objs) != n {
		b.Fatalf("listing the emulator: %d objects, want %d", len(objs), n)
	}
	m := &manifest.Manifest{}
	for _, o := range objs {
		e := one.Files[0]
		id := manifest.IdentityOf(o)
		e.URI, e.Size, e.ModTimeNs, e.Generation = o.URI, id.Size, id.ModTimeNs, id.Generation
		m.AddFile(e, one.Schemas[0])
	}
	if err := m.Finish(); err != nil {
		b.Fatal(err)
	}
	muri := "gs://" + mBuckets[0] + "/" + manifest.DefaultName
	if err := manifest.Write(ctx, direct, muri, m); err != nil {
		b.Fatal(err)
	}
	mobj, _ := direct.Stat(ctx, muri)
	b.Logf("%d files of %d bytes; manifest %d bytes (%.1f bytes per file)", n, len(data), mobj.Size, float64(mobj.Size)/float64(n))

	for _, tc := range []struct {
		name, mode string
		patterns   []string
		files      int
	}{{"manifest", muri, mPatterns, n}, {"footers", "", fPatterns, nf}} {
		b.Run(tc.name, func(b *testing.B) {
			front := objstoretest.NewLatencyFront(b, gcs.URL, 30*time.Millisecond, 0)
			store := objstoretest.NewStore(b, front.URL())
			var ds *loader.Dataset
			runtime.GC() // the setup's garbage is not the planner's
			cpu0 := cpuTime(b)
			start := time.Now()
			for b.Loop() {
				var err error
				ds, err = loader.Open(ctx, store, tc.patterns, loader.WithManifest(tc.mode), loader.WithFooterCache(nil))
				if err != nil {
					b.Fatal(err)
				}
			}
			el := time.Since(start) / time.Duration(b.N)
			cpu := (cpuTime(b) - cpu0) / time.Duration(b.N)
			if len(ds.Files) != tc.files || (tc.mode != "") != (ds.PlanInfo().Manifest != "") {
				b.Fatalf("%d files, plan %+v", len(ds.Files), ds.PlanInfo())
			}
			reqs := float64(front.Requests()) / float64(b.N)
			bytes := float64(front.BodyBytes()) / float64(b.N)
			b.ReportMetric(reqs, "requests/op")
			b.ReportMetric(bytes, "bytes/op")
			b.ReportMetric(el.Seconds(), "s/plan")
			b.ReportMetric(cpu.Seconds(), "cpu-s/plan")
			b.Logf("%s: %d files planned in %v (%v of CPU, the emulator's included), %.0f requests, %.0f bytes fetched, %+v",
				tc.name, tc.files, el, cpu, reqs, bytes, ds.PlanInfo())
		})
	}
}

// envInt is the positive integer in the environment variable name, or def.
func envInt(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		b.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// cpuTime is the CPU time (user and system) of the process so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
