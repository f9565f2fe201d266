package transport

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
)

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
