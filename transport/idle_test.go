package transport

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/flight"
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
				sctx, scancel := context.WithCancel(ctx)
				s, err := ts.client.DoGet(sctx, ticket(t, big))
				if err != nil {
					scancel()
					count(err)
					continue
				}
				if _, err := s.Header(); err != nil {
					scancel()
					count(err)
					continue
				}
				// Hold the stream without reading until the server ends it
				// (the client's window fills first), then drain what it had.
				// A stream that spent the hold waiting for the memory
				// budget or a slot that other streams held was not idle
				// (no step of its own waited for its client): read from
				// then on, it is served for ever (the request is
				// unbounded), so the drain gives up after a second
				// (Canceled) instead of waiting for the test's deadline.
				time.Sleep(400 * time.Millisecond)
				stop := time.AfterFunc(time.Second, scancel)
				var err2 error
				for err2 == nil {
					_, err2 = s.Recv()
				}
				stop.Stop()
				scancel()
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

// gateWriter passes the schema message and blocks the next Send until
// unblock is closed; it counts the Sends.
type gateWriter struct {
	sends   atomic.Int32
	unblock chan struct{}
}

func (w *gateWriter) Send(*flight.FlightData) error {
	if w.sends.Add(1) > 1 {
		<-w.unblock
	}
	return nil
}

// TestIdleNoSendAfterAbandon: once the idle timeout has given up on a
// stream (its call returns), the stream starts no further send, even when
// the pending one completes just then: gRPC would drop a message queued on a
// stream whose call has ended.
func TestIdleNoSendAfterAbandon(t *testing.T) {
	s, err := New(&DemoBackend{NumRows: 1 << 20}, WithLogger(discard), WithAllowedRoots("/data"))
	if err != nil {
		t.Fatal(err)
	}
	req := baseRequest()
	req.Epochs = 0
	st, err := s.backend.Open(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := &gateWriter{unblock: make(chan struct{})}
	idle := &idleClock{}
	done := make(chan error, 1)
	go func() {
		_, err := s.stream(ctx, st, w, idle)
		done <- err
	}()
	if err := idle.wait(done, 30*time.Millisecond); !errors.Is(err, ErrIdle) {
		t.Fatalf("wait = %v, want ErrIdle", err)
	}
	close(w.unblock) // the client takes the pending step just as the call gives up
	select {
	case err := <-done:
		if !errors.Is(err, ErrIdle) {
			t.Errorf("stream ended with %v, want ErrIdle", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("the stream kept sending after the call gave up on it (%d sends)", w.sends.Load())
	}
	if n := w.sends.Load(); n != 2 {
		t.Errorf("%d sends, want 2: the schema and the step pending when the call gave up", n)
	}
}

// TestIdleTimeoutWhileStepsHeld: a client that reads nothing while gRPC has
// taken its stream's steps without writing them (they hold the memory
// budget until written) leaves the stream waiting for budget, not in a send:
// the idle timeout still ends it, with Unavailable, and the budget and slot
// come back. Before, such a stream waited for its client's own deadline.
func TestIdleTimeoutWhileStepsHeld(t *testing.T) {
	for _, c := range []struct {
		name   string
		batch  int
		budget int64
	}{
		// ~100 KB steps: gRPC takes the first (its write quota) and cannot
		// write it; the second waits for budget the first holds.
		{"one step held, the next waits for budget", 1 << 12, 150 << 10},
		// The next step fits: its send is what waits (as before).
		{"the next send waits", 1 << 12, 4 << 20},
	} {
		t.Run(c.name, func(t *testing.T) {
			ts := startServer(t, viaTCP, &DemoBackend{NumRows: 1 << 30}, []Option{WithMaxStreams(2),
				WithIdleTimeout(200 * time.Millisecond), WithMemoryBudget(c.budget), WithPrefetch(2)})
			req := baseRequest()
			req.GlobalBatchSize, req.NumSlices, req.Slices, req.Epochs = c.batch, 1, []int{0}, 0
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			s, err := ts.client.DoGet(ctx, ticket(t, req))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Header(); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			time.Sleep(time.Second) // read nothing
			var last error
			for last == nil {
				_, last = s.Recv()
			}
			t.Logf("stream ended after %v: %v", time.Since(start).Round(time.Millisecond), last)
			if status.Code(last) != codes.Unavailable {
				t.Fatalf("a stream whose client read nothing ended with %v, want Unavailable (the idle timeout)", last)
			}
			waitFor(t, "budget and slot returned", func() bool {
				runtime.GC()
				m := ts.srv.Metrics()
				return m.BudgetInUse == 0 && m.StreamsActive == 0
			})
		})
	}
}
