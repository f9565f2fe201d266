package feed

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/meshfeed/meshfeed/internal/arrowmem"
	"github.com/meshfeed/meshfeed/internal/datagen"
	"github.com/meshfeed/meshfeed/objstore"
	"github.com/meshfeed/meshfeed/transport"
)

// peakAllocator tracks the most bytes held at once through it: the stream's
// decoded row groups, read-ahead, slices and steps.
type peakAllocator struct {
	memory.Allocator
	cur, peak, total atomic.Int64 // total: every byte allocated
	allocs           atomic.Int64 // allocations made: the readers' work shows here
}

func (a *peakAllocator) add(n int64) {
	if n > 0 {
		a.total.Add(n)
		a.allocs.Add(1)
	}
	c := a.cur.Add(n)
	for p := a.peak.Load(); c > p && !a.peak.CompareAndSwap(p, c); p = a.peak.Load() {
	}
}

func (a *peakAllocator) Allocate(n int) []byte { a.add(int64(n)); return a.Allocator.Allocate(n) }

// AllocateUninitialized passes the decoders' uncleared allocations through,
// as the server's pool allocator serves them.
func (a *peakAllocator) AllocateUninitialized(n int) []byte {
	a.add(int64(n))
	if u, ok := a.Allocator.(arrowmem.UninitializedAllocator); ok {
		return u.AllocateUninitialized(n)
	}
	return a.Allocator.Allocate(n)
}
func (a *peakAllocator) Reallocate(n int, b []byte) []byte {
	a.add(int64(n - len(b)))
	return a.Allocator.Reallocate(n, b)
}
func (a *peakAllocator) Free(b []byte) { a.add(-int64(len(b))); a.Allocator.Free(b) }

// minorFaults returns the process's minor page faults so far.
func minorFaults() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Minflt
}

// cpuTime returns the process's user plus system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

var (
	mixBenchOnce sync.Once
	mixBenchDirs []string
	mixBenchErr  error
)

// mixBenchData writes three sources of 65,536 rows of id, label and
// features[64] (268 bytes a row, uncompressed, two row groups each; about
// 17.6 MB each) once under os.TempDir, and reads them once (warm page cache).
func mixBenchData(b *testing.B) []string {
	mixBenchOnce.Do(func() {
		for i := 0; i < 3; i++ {
			s := datagen.DefaultSpec()
			s.Rows, s.Files, s.RowGroupRows, s.Features = 65536, 1, 32768, 64
			s.Compression, s.Dictionary, s.Seed = datagen.CompressionNone, false, uint64(i+1)
			dir := filepath.Join(os.TempDir(), fmt.Sprintf("meshfeed-bench-mixture-v1-%d", i))
			if _, err := os.Stat(filepath.Join(dir, "done")); err != nil {
				os.RemoveAll(dir)
				if _, err := datagen.Write(context.Background(), datagen.LocalCreator{}, dir, s); err != nil {
					mixBenchErr = err
					return
				}
				if err := os.WriteFile(filepath.Join(dir, "done"), nil, 0o644); err != nil {
					mixBenchErr = err
					return
				}
			}
			files, _ := filepath.Glob(filepath.Join(dir, "*.parquet"))
			for _, f := range files {
				if _, err := os.ReadFile(f); err != nil {
					mixBenchErr = err
					return
				}
			}
			mixBenchDirs = append(mixBenchDirs, dir)
		}
	})
	if mixBenchErr != nil {
		b.Fatal(mixBenchErr)
	}
	return mixBenchDirs
}

// BenchmarkMixture compares, in one invocation, a three-source mixture
// (weights 1:1:1) with one dataset made of the same three sources' files
// (the same rows and bytes), same B and D, each read for the same 24 steps
// (196,608 rows) straight from the Pipeline's stream: rows/s, and the peak
// bytes the stream held through its allocator (the sources' readers share
// one read-ahead budget), the bytes it allocated per step (decoding, and any
// copy of a step), the process's CPU time per run (less sensitive than
// rows/s to other work on a shared machine), and the mappings of the files
// the readers made per step and the bytes they mapped (each piece maps the
// pages of its rows, with the pages cutting its edges: mapping, populating
// and unmapping them is most of the readers' CPU time). Once per case it
// also reads the steps untimed, as a consumer slower than the readers
// (mixBenchHeld): held-peak-bytes, the most held then, is the same from run
// to run where peak-bytes moves with timing.
func BenchmarkMixture(b *testing.B) {
	dirs := mixBenchData(b)
	const B, D, steps = 8192, 4, 24
	single, mix := mixtureAndOne(dirs, B, D, steps)
	got := map[string]mixBenchResult{}
	for _, v := range []struct {
		name string
		req  *transport.Request
	}{{"single", single}, {"mixture", mix}, {"single-again", single}, {"mixture-again", mix}} {
		b.Run(v.name, func(b *testing.B) {
			pool := arrowmem.NewPoolAllocator() // the server's default, one for its streams
			var r mixBenchResult
			for i := 0; i < b.N; i++ {
				r.add(mixBenchRun(b, v.req, pool, steps))
			}
			b.StopTimer()
			r.held = mixBenchHeld(b, v.req, pool, steps)
			b.StartTimer()
			n := float64(b.N)
			b.ReportMetric(n*steps*B/r.elapsed.Seconds(), "rows/s")
			b.ReportMetric(float64(r.peak), "peak-bytes")
			b.ReportMetric(float64(r.held), "held-peak-bytes")
			b.ReportMetric(float64(r.cpu.Milliseconds())/n, "cpu-ms/op")
			b.ReportMetric(float64(r.alloc)/(n*steps), "alloc-bytes/step")
			b.ReportMetric(float64(r.maps)/(n*steps), "maps/step")
			b.ReportMetric(float64(r.mapped)/(n*steps), "mapped-bytes/step")
			b.ReportMetric(float64(r.allocs)/(n*steps), "pool-allocs/step")
			b.ReportMetric(float64(r.allocs-r.reused)/(n*steps), "pool-misses/step")
			b.ReportMetric(float64(r.faults)/(n*steps), "minflt/step")
			b.ReportMetric(float64(r.mallocs)/(n*steps), "mallocs/step")
			b.ReportMetric(float64(r.gcs)/n, "gc/op")
			base := strings.TrimSuffix(v.name, "-again")
			sum := got[base]
			sum.add(r)
			got[base] = sum
			if one := got["single"]; v.req == mix && one.runs > 0 {
				logMixBench(b, one, sum)
			}
		})
	}
}

// logMixBench logs how the mixture's runs so far in this invocation compare
// with the single dataset's: the last line logged covers every run of both
// (CPU time and rows/s over all runs, the most bytes held in any).
func logMixBench(b *testing.B, one, m mixBenchResult) {
	pct := func(a, b float64) float64 { return 100 * (b - a) / a }
	b.Logf("mixture against single, %d and %d runs: CPU per run %+.1f%%, rows/s %+.1f%%, peak bytes %+.1f%% (held with the readers caught up: %+.1f%%; targets: rows/s within 5%%, peak within 10%%), bytes mapped %+.1f%%",
		m.runs, one.runs, pct(one.cpu.Seconds()/float64(one.runs), m.cpu.Seconds()/float64(m.runs)),
		pct(float64(one.runs)/one.elapsed.Seconds(), float64(m.runs)/m.elapsed.Seconds()),
		pct(float64(one.peak), float64(m.peak)), pct(float64(one.held), float64(m.held)),
		pct(float64(one.mapped)/float64(one.runs), float64(m.mapped)/float64(m.runs)))
}

// mixBenchResult is what BenchmarkMixture measures of one run or the sum of
// several (the most bytes held at once for peak and held).
type mixBenchResult struct {
	runs                      int
	peak, alloc, maps, mapped int64
	dropped                   int64 // the bytes of the mappings given back before their release
	held                      int64 // mixBenchHeld's, of one run
	elapsed, cpu              time.Duration
	allocs, reused            int64 // the pool's allocations, and those it served from freed memory
	faults, mallocs, gcs      int64 // minor page faults, Go heap allocations, GC cycles
}

func (r *mixBenchResult) add(o mixBenchResult) {
	r.runs += o.runs
	r.peak, r.held = max(r.peak, o.peak), max(r.held, o.held)
	r.alloc, r.maps, r.mapped, r.dropped = r.alloc+o.alloc, r.maps+o.maps, r.mapped+o.mapped, r.dropped+o.dropped
	r.elapsed, r.cpu = r.elapsed+o.elapsed, r.cpu+o.cpu
	r.allocs, r.reused = r.allocs+o.allocs, r.reused+o.reused
	r.faults, r.mallocs, r.gcs = r.faults+o.faults, r.mallocs+o.mallocs, r.gcs+o.gcs
}

// mixBenchHeld reads steps steps of req on a new Pipeline allocating from
// pool, untimed, as a consumer slower than the readers would: after each
// step it waits until the readers have done what their read-ahead allows
// (no allocation for 30 ms), holding that step and the one before it (a
// transport sends one step while the next is cut), and returns the most
// bytes held at once. The timed runs' peak moves with how far the readers
// got ahead of the consumer (a single dataset's slice releases a piece
// before its reader has decoded the next one when the consumer is fast);
// this one is what the stream holds when they are ahead, the same in every
// run.
func mixBenchHeld(b *testing.B, req *transport.Request, pool memory.Allocator, steps int) int64 {
	mem := &peakAllocator{Allocator: pool}
	p, err := NewPipeline(context.Background(), mixBenchOptions(b, mem)...)
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	st, err := p.OpenWith(context.Background(), req, mem) // as the shared-memory wire opens it
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	var prev transport.Step
	for n := 0; n < steps; n++ {
		step, err := st.Next(context.Background())
		if err != nil {
			b.Fatalf("step %d: %v", n, err)
		}
		for last := int64(-1); mem.allocs.Load() != last; {
			last = mem.allocs.Load()
			time.Sleep(30 * time.Millisecond)
		}
		prev.Release()
		prev = step
	}
	prev.Release()
	return mem.peak.Load()
}

// mixBenchOptions returns the benchmark's Pipeline options: allocating
// through mem, with MESHFEED_MIX_BENCH_READ_AHEAD's read-ahead when set.
func mixBenchOptions(b *testing.B, mem memory.Allocator) []Option {
	opts := []Option{WithAllocator(mem)}
	if v := os.Getenv("MESHFEED_MIX_BENCH_READ_AHEAD"); v != "" {
		ra, err := strconv.ParseInt(v, 10, 64)
		if err != nil || ra <= 0 {
			b.Fatalf("MESHFEED_MIX_BENCH_READ_AHEAD=%q: want a positive number of bytes", v)
		}
		opts = append(opts, WithReadAhead(ra))
	}
	return opts
}

// mixBenchRun reads steps steps of req on a new Pipeline allocating from
// pool, timing them from OpenWith (as the shared-memory wire opens a
// stream: a mixture's slices placed where they can be).
func mixBenchRun(b *testing.B, req *transport.Request, pool memory.Allocator, steps int) mixBenchResult {
	mem := &peakAllocator{Allocator: pool}
	p, err := NewPipeline(context.Background(), mixBenchOptions(b, mem)...)
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	var reused0 int64
	if pa, ok := pool.(*arrowmem.PoolAllocator); ok {
		reused0 = pa.Reused()
	}
	f0 := minorFaults()
	t0, c0 := time.Now(), cpuTime()
	st, err := p.OpenWith(context.Background(), req, mem) // as the shared-memory wire opens it
	if err != nil {
		b.Fatal(err)
	}
	n := 0
	for ; n < steps; n++ {
		step, err := st.Next(context.Background())
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			b.Fatal(err)
		}
		step.Release()
	}
	r := mixBenchResult{runs: 1, elapsed: time.Since(t0), cpu: cpuTime() - c0}
	r.faults = minorFaults() - f0
	runtime.ReadMemStats(&ms1)
	r.mallocs, r.gcs = int64(ms1.Mallocs-ms0.Mallocs), int64(ms1.NumGC-ms0.NumGC)
	if pa, ok := pool.(*arrowmem.PoolAllocator); ok {
		r.reused = pa.Reused() - reused0
	}
	r.allocs = mem.allocs.Load()
	st.Close()
	if n != steps {
		b.Fatalf("%d steps, want %d", n, steps)
	}
	if sr, ok := p.cfg.store.(objstore.StatsReporter); ok {
		r.maps, r.mapped, r.dropped = sr.Stats().Maps.Load(), sr.Stats().BytesMapped.Load(), sr.Stats().BytesDropped.Load()
	}
	r.peak, r.alloc = mem.peak.Load(), mem.total.Load()
	return r
}

// BenchmarkMixturePaired reads BenchmarkMixture's two requests in pairs of
// runs, one of each, alternating which goes first, each case with its own
// pool kept across its runs: other work on a shared machine then falls on
// both cases alike, and the medians of the pairs' ratios (mixture over
// single: CPU per run, wall time per run) compare them where BenchmarkMixture's
// blocks of runs of one case at a time move with the machine's load. It
// reports the medians of the cases' CPU per run too, and the mixture's
// counts per run against the single dataset's (pool allocations and misses,
// Go allocations, minor page faults, mappings, GC cycles).
//
// MESHFEED_MIX_BENCH_SOURCES=PREFIX reads the sources PREFIX-0, -1 and -2
// instead (benchmarks/mixture.py's, e.g. .cache/bench-mixture-400000) with
// MESHFEED_MIX_BENCH_SHAPE=B,D,STEPS (default 2048,8,585: that script's
// mesh and steps), and a run reads every step.
func BenchmarkMixturePaired(b *testing.B) {
	dirs := mixBenchData(b)
	B, D, steps := 8192, 4, 24
	if pre := os.Getenv("MESHFEED_MIX_BENCH_SOURCES"); pre != "" {
		dirs = []string{pre + "-0", pre + "-1", pre + "-2"}
		B, D, steps = 2048, 8, 585
		if v := os.Getenv("MESHFEED_MIX_BENCH_SHAPE"); v != "" {
			if _, err := fmt.Sscanf(v, "%d,%d,%d", &B, &D, &steps); err != nil {
				b.Fatalf("MESHFEED_MIX_BENCH_SHAPE=%q: want B,D,STEPS", v)
			}
		}
	}
	single, mix := mixtureAndOne(dirs, B, D, steps)
	pools := [2]*arrowmem.PoolAllocator{arrowmem.NewPoolAllocator(), arrowmem.NewPoolAllocator()}
	reqs := [2]*transport.Request{single, mix}
	var cpu, wall, cpuRatio, wallRatio [2][]float64
	var sums [2]mixBenchResult
	for i := 0; i < b.N; i++ {
		var r [2]mixBenchResult
		for j := 0; j < 2; j++ {
			c := (i + j) % 2
			pprof.Do(context.Background(), pprof.Labels("case", [2]string{"single", "mixture"}[c]), func(context.Context) {
				r[c] = mixBenchRun(b, reqs[c], pools[c], steps)
			})
			sums[c].add(r[c])
		}
		for c := 0; c < 2; c++ {
			cpu[c] = append(cpu[c], float64(r[c].cpu.Microseconds())/1000)
			wall[c] = append(wall[c], float64(r[c].elapsed.Microseconds())/1000)
		}
		cpuRatio[0] = append(cpuRatio[0], r[1].cpu.Seconds()/max(r[0].cpu.Seconds(), 1e-9))
		wallRatio[0] = append(wallRatio[0], r[1].elapsed.Seconds()/r[0].elapsed.Seconds())
	}
	med := func(v []float64) float64 {
		s := append([]float64(nil), v...)
		slices.Sort(s)
		if len(s) == 0 {
			return 0
		}
		return s[len(s)/2]
	}
	b.ReportMetric(med(cpu[0]), "single-cpu-ms/op")
	b.ReportMetric(med(cpu[1]), "mixture-cpu-ms/op")
	b.ReportMetric(100*(med(cpuRatio[0])-1), "cpu-%")
	b.ReportMetric(100*(med(wallRatio[0])-1), "wall-%")
	n := float64(b.N)
	per := func(c int, v int64) float64 { return float64(v) / n }
	b.Logf("%d pairs: medians: CPU per run single %.2f ms, mixture %.2f ms (pairs' ratio %+.1f%%); wall per run single %.2f ms, mixture %.2f ms (pairs' ratio %+.1f%%); per run single/mixture: pool allocations %.0f/%.0f, misses %.1f/%.1f, Go allocations %.0f/%.0f, minor faults %.0f/%.0f, maps %.1f/%.1f, MB mapped %.1f/%.1f, dropped %.1f/%.1f, GC cycles %.1f/%.1f",
		b.N, med(cpu[0]), med(cpu[1]), 100*(med(cpuRatio[0])-1), med(wall[0]), med(wall[1]), 100*(med(wallRatio[0])-1),
		per(0, sums[0].allocs), per(1, sums[1].allocs), per(0, sums[0].allocs-sums[0].reused), per(1, sums[1].allocs-sums[1].reused),
		per(0, sums[0].mallocs), per(1, sums[1].mallocs), per(0, sums[0].faults), per(1, sums[1].faults),
		per(0, sums[0].maps), per(1, sums[1].maps), per(0, sums[0].mapped)/1e6, per(1, sums[1].mapped)/1e6,
		per(0, sums[0].dropped)/1e6, per(1, sums[1].dropped)/1e6, per(0, sums[0].gcs), per(1, sums[1].gcs))
}
