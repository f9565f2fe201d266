package feed

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshfeed/meshfeed/internal/datagen"
	"github.com/meshfeed/meshfeed/loader"
	"github.com/meshfeed/meshfeed/transport"
)

// soakDuration is how long TestSoak runs its 16 concurrent streams:
// MESHFEED_SOAK_SECONDS (for longer runs), default 5 s.
func soakDuration(t *testing.T) time.Duration {
	d := 5 * time.Second
	if v := os.Getenv("MESHFEED_SOAK_SECONDS"); v != "" {
		s, err := strconv.ParseFloat(v, 64)
		if err != nil || s <= 0 {
			t.Fatalf("MESHFEED_SOAK_SECONDS=%q: want a positive number of seconds", v)
		}
		d = time.Duration(s * float64(time.Second))
	}
	t.Logf("soak for %v (set MESHFEED_SOAK_SECONDS for longer)", d)
	return d
}

// heapInuse returns HeapInuse after two garbage collections.
func heapInuse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// TestSoak: 16 concurrent streams over a pipeline for soakDuration, each
// reading whole epochs of one of four request variants and checking every
// step against that variant's fault-free checksums; then 1,000 open-and-cancel
// cycles. Afterwards no stream is active, no Arrow buffer is allocated, the
// goroutine count is back at its baseline and the Go heap in use grew by less
// than a tolerance (16 MiB).
func TestSoak(t *testing.T) {
	spec := datagen.DefaultSpec()
	spec.Rows, spec.Files, spec.RowGroupRows, spec.Features, spec.Seed = 600, 3, 40, 8, 9
	dir := writeDataset(t, spec)
	mem := checkedMem(t)
	p, err := NewPipeline(context.Background(), WithAllocator(mem),
		WithLoaderOptions(loader.WithDecodeWorkers(2)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	ts := startServer(t, viaTCP, p, []transport.Option{transport.WithAllowedRoots(dir), transport.WithMaxStreams(64)})

	variants := []*transport.Request{
		pipeRequest(dir, 32, 4, []int{0, 1, 2, 3}, transport.LastBatchPad),
		pipeRequest(dir, 32, 4, []int{1, 3}, transport.LastBatchDrop),
		pipeRequest(dir, 24, 2, []int{0}, transport.LastBatchPad),
		pipeRequest(dir, 24, 2, []int{0, 1}, transport.LastBatchDrop),
	}
	variants[0].Shuffle = transport.Shuffle{Enabled: true, Window: 30}
	variants[3].Shuffle = transport.Shuffle{Enabled: true}
	want := make([][]string, len(variants))
	for i, v := range variants {
		v.Epochs = 1
		if want[i], err = stepSums(context.Background(), ts.Client, v, 0, nil); err != nil || len(want[i]) == 0 {
			t.Fatalf("variant %d: %d steps, %v", i, len(want[i]), err)
		}
	}
	base := runtimeGoroutines()
	heap0 := heapInuse()

	const streams = 16
	deadline := time.Now().Add(soakDuration(t))
	var epochs atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, streams)
	for g := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for it := 0; time.Now().Before(deadline); it++ {
				v := (g + it) % len(variants)
				got, err := stepSums(context.Background(), ts.Client, variants[v], 0, nil)
				if err == nil {
					err = sameSums(got, want[v])
				}
				if err != nil {
					errs <- fmt.Errorf("stream %d epoch %d (variant %d): %w", g, it, v, err)
					return
				}
				epochs.Add(1)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	t.Logf("%d epochs read by %d concurrent streams, every step as in the reference", epochs.Load(), streams)
	if epochs.Load() < streams {
		t.Errorf("only %d epochs in the soak, want at least one per stream", epochs.Load())
	}

	unbounded := *variants[0]
	unbounded.Epochs = 0
	tkt := ticket(t, &unbounded)
	const cycles = 1000
	for i := range cycles {
		ctx, cancel := context.WithCancel(context.Background())
		stream, err := ts.Client.DoGet(ctx, tkt)
		if err != nil {
			cancel()
			t.Fatalf("cycle %d: %v", i, err)
		}
		if i%2 == 0 { // half cancel after the schema and a step, half at once
			for range 2 {
				if _, err := stream.Recv(); err != nil {
					cancel()
					t.Fatalf("cycle %d: %v", i, err)
				}
			}
		}
		cancel()
	}
	waitFor(t, "no stream active", func() bool { return ts.Srv.Metrics().StreamsActive == 0 })
	checkGoroutines(t, base, 0)
	waitFor(t, "the pipeline's allocator to be empty", func() bool { return mem.CurrentAlloc() == 0 })
	const tolerance = 16 << 20
	heap1 := heapInuse()
	t.Logf("heap in use: %d KiB before, %d KiB after", heap0>>10, heap1>>10)
	if heap1 > heap0+tolerance {
		t.Errorf("heap in use grew from %d to %d bytes over the soak, more than the %d-byte tolerance", heap0, heap1, tolerance)
	}
}
