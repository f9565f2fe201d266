package transport

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestIdleTimeoutManyStreams: many streams whose clients never read hit the
// idle timeout together, over and over, while other clients open streams,
// read a few steps and cancel them, under a memory budget that makes
// streams wait for each other. Every stream opened is closed exactly once
// (trackedStream panics on a second Close), every record is released, and
// the slots and the memory account come back whole.
func TestIdleTimeoutManyStreams(t *testing.T) {
	mem := checkedMem(t)
	tb := &tracking{Backend: &DemoBackend{NumRows: 1 << 30, Mem: mem}}
	big := baseRequest()
	big.GlobalBatchSize, big.NumSlices, big.Slices, big.Epochs = 1<<14, 1, []int{0}, 0 // ~400 KB steps, unbounded
	ts := startServer(t, viaTCP, tb, []Option{WithMaxStreams(12), WithIdleTimeout(50 * time.Millisecond),
		WithMemoryBudget(8 << 20), WithPrefetch(2), WithAllocator(mem)})

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	var mu sync.Mutex
	codesSeen := map[codes.Code]int{}
	count := func(err error) {
		mu.Lock()
		codesSeen[status.Code(err)]++
		mu.Unlock()
	}
	deadline := time.Now().Add(2 * time.Second)
	// Idle clients: open a stream, never read, wait for its end.
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				s, err := ts.client.DoGet(ctx, ticket(t, big))
				if err != nil {
					count(err)
					continue
				}
				if _, err := s.Header(); err != nil {
					count(err)
					continue
				}
				// Hold the stream without reading until the server ends it
				// (the client's window fills first), then drain what it had.
				time.Sleep(150 * time.Millisecond)
				var err2 error
				for err2 == nil {
					_, err2 = s.Recv()
				}
				count(err2)
			}
		}()
	}
	// Readers: open, read a few steps, cancel.
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; time.Now().Before(deadline); n++ {
				sctx, scancel := context.WithCancel(ctx)
				s, err := ts.client.DoGet(sctx, ticket(t, big))
				if err == nil {
					for range (i + n) % 4 {
						if _, err = s.Recv(); err != nil {
							break
						}
					}
				}
				scancel()
				if err != nil {
					count(err)
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("stream ends seen by clients: %v; opened %d, closed %d", codesSeen, tb.opened.Load(), tb.closed.Load())
	if codesSeen[codes.Unavailable] == 0 {
		t.Errorf("no stream ended with the idle timeout (Unavailable): %v", codesSeen)
	}
	waitFor(t, "every stream closed, its slot and memory returned", func() bool {
		// A step gRPC dropped unfreed (its stream ended while SendMsg queued
		// it) comes back once its frame is garbage.
		runtime.GC()
		m := ts.srv.Metrics()
		return tb.opened.Load() == tb.closed.Load() && m.StreamsActive == 0 && m.BudgetInUse == 0
	})
}

// TestShutdownWaitsForIdleStreams: a stream ended by the idle timeout has
// closed its backend stream by the time Shutdown returns, so that whoever
// shuts the server down can then close the backend (serve closes its
// Pipeline) without a stream still using it.
func TestShutdownWaitsForIdleStreams(t *testing.T) {
	tb := &tracking{Backend: &DemoBackend{NumRows: 1 << 30}}
	tb.closeDelay.Store(int64(300 * time.Millisecond)) // the streams are slow to close
	ts := startServer(t, viaTCP, tb, []Option{WithIdleTimeout(50 * time.Millisecond)})
	big := baseRequest()
	big.GlobalBatchSize, big.NumSlices, big.Slices, big.Epochs = 1<<17, 1, []int{0}, 0
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for range 4 {
		s, err := ts.client.DoGet(ctx, ticket(t, big))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Header(); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "idle timeouts", func() bool { return ts.srv.Metrics().Errors[codes.Unavailable.String()] >= 4 })
	// The clients go away (gRPC drains a connection only once the data
	// queued for its streams is gone); the streams are still closing.
	cancel()
	sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer scancel()
	stopOnce.Store(ts, true)
	if err := ts.srv.Shutdown(sctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if o, c := tb.opened.Load(), tb.closed.Load(); o != c {
		t.Errorf("Shutdown returned with %d of %d backend streams still open", o-c, o)
	}
	ts.conn.Close()
	if err := <-ts.done; err != nil {
		t.Errorf("Serve: %v", err)
	}
}
