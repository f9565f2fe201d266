package transport

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/flight"
)

// stuckWriter passes the schema message and then blocks every Send until ctx
// is done: a client that stopped reading.
type stuckWriter struct {
	ctx  context.Context
	sent int
}

func (w *stuckWriter) Send(*flight.FlightData) error {
	w.sent++
	if w.sent == 1 {
		return nil
	}
	<-w.ctx.Done()
	return w.ctx.Err()
}

// TestBackpressure checks that a client that stops reading stops the reads:
// the producer runs ahead by the prefetch depth, or by the memory budget,
// and no further.
func TestBackpressure(t *testing.T) {
	req := baseRequest()
	req.Epochs = 0
	// The size of one step's record, measured on the demo backend itself.
	probe, err := (&DemoBackend{NumRows: 1000}).Open(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	step, err := probe.Next(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	rec := step.Slices[0]
	size := recordBytes(rec)
	rec.Release()

	cases := []struct {
		name      string
		prefetch  int
		budget    int64
		wantNexts int64
	}{
		// One step blocked in Send, prefetch steps queued, one more read and
		// waiting for room in the queue.
		{"prefetch 2", 2, 0, 2 + 2},
		{"prefetch 0", 0, 0, 0 + 2},
		// One step in Send and one queued hold the whole budget; the third is
		// read and waits for budget.
		{"budget of 2 steps", 10, 2 * size, 3},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			mem := checkedMem(t)
			tb := &tracking{Backend: &DemoBackend{NumRows: 1000, Mem: mem}}
			s, cancel, done := streamToStuckClient(t, tb, req, tc.prefetch, tc.budget)
			waitFor(t, "producer to stall", func() bool { return tb.nexts.Load() >= tc.wantNexts })
			time.Sleep(100 * time.Millisecond) // it must not read further
			if got := tb.nexts.Load(); got != tc.wantNexts {
				t.Errorf("Next called %d times while the client is stuck, want %d", got, tc.wantNexts)
			}
			if tc.budget > 0 {
				if got := s.budget.inUse(); got > tc.budget {
					t.Errorf("budget in use %d > limit %d", got, tc.budget)
				}
			}
			cancel()
			select {
			case err := <-done:
				if !errors.Is(err, context.Canceled) {
					t.Errorf("stream = %v, want context.Canceled", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("stream did not return after cancel")
			}
			if tb.closed.Load() != 1 || s.budget.inUse() != 0 {
				t.Errorf("closed %d, budget in use %d; want 1, 0", tb.closed.Load(), s.budget.inUse())
			}
		})
	}
}

// TestBudgetShared checks that the budget is shared: a second acquire waits
// until the first releases, and a request larger than the whole budget is
// admitted alone.
func TestBudgetShared(t *testing.T) {
	b := newBudget(100)
	ctx := context.Background()
	if err := b.acquire(ctx, 60); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() { got <- b.acquire(ctx, 60) }()
	select {
	case err := <-got:
		t.Fatalf("acquire(60) with 60 of 100 held = %v, want it to wait", err)
	case <-time.After(50 * time.Millisecond):
	}
	b.release(60)
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	b.release(60)
	if err := b.acquire(ctx, 1000); err != nil {
		t.Fatalf("acquire(1000) on an empty budget of 100 = %v, want admitted", err)
	}
	cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if err := b.acquire(cctx, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("acquire on a spent budget = %v, want DeadlineExceeded", err)
	}
	b.release(1000)
	if b.inUse() != 0 {
		t.Errorf("inUse = %d, want 0", b.inUse())
	}
}

// streamToStuckClient starts s.stream for req over a Server with the given
// prefetch and memory budget, writing to a client that never reads; cancel
// ends it, and done receives its result.
func streamToStuckClient(t *testing.T, tb *tracking, req *Request, prefetch int, budget int64) (*Server, context.CancelFunc, <-chan error) {
	t.Helper()
	s, err := New(tb, WithLogger(discard), WithAllowedRoots("/data"), WithPrefetch(prefetch), WithMemoryBudget(budget))
	if err != nil {
		t.Fatal(err)
	}
	st, err := tb.Open(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := s.stream(ctx, st, &stuckWriter{ctx: ctx}, &idleClock{})
		done <- err
	}()
	return s, cancel, done
}
