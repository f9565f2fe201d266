package feed

import (
	"context"
	"io"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/meshfeed/meshfeed/transport"
	"github.com/meshfeed/meshfeed/transport/transporttest"
	"google.golang.org/grpc"
)

// Short names for the shared server helpers, as the tests moved here from
// package transport use them.
type testServer struct{ *transporttest.Server }

const (
	viaBufconn = transporttest.Bufconn
	viaUnix    = transporttest.Unix
	viaTCP     = transporttest.TCP
)

var (
	discard         = transporttest.Discard
	ticket          = transporttest.Ticket
	waitFor         = transporttest.WaitFor
	checkGoroutines = transporttest.CheckGoroutines
	checkedMem      = transporttest.CheckedMem
	containsAll     = transporttest.ContainsAll
	checkStatus     = transporttest.CheckStatus
	writeCert       = transporttest.WriteCert
)

// credsMarker marks dial options that carry transport credentials (they
// replace transporttest.Start's insecure default).
type credsMarker struct{ grpc.DialOption }

// startServer is transporttest.Start; the server joins steps from the
// backend's allocator when it has one (as `meshfeed serve` does).
func startServer(t testing.TB, kind transporttest.Net, backend transport.Backend, opts []transport.Option, dialOpts ...grpc.DialOption) *testServer {
	if a, ok := backend.(interface{ Allocator() memory.Allocator }); ok {
		opts = append([]transport.Option{transport.WithAllocator(a.Allocator())}, opts...)
	}
	ts := transporttest.Start(t, kind, backend, opts, dialOpts...)
	return &testServer{ts}
}

func runtimeNumGoroutine() int { return runtime.NumGoroutine() }

// multiFrames counts the steps sent as virtual concatenations of slices.
func multiFrames() int64 { _, m := transport.Frames(); return m }

// tracking wraps a Backend and counts its streams' Next and Close calls.
type tracking struct {
	transport.Backend
	nexts, closed atomic.Int64
}

func (b *tracking) Open(ctx context.Context, req *transport.Request) (transport.Stream, error) {
	st, err := b.Backend.Open(ctx, req)
	if err != nil {
		return nil, err
	}
	return &trackedStream{Stream: st, b: b}, nil
}

type trackedStream struct {
	transport.Stream
	b *tracking
}

func (s *trackedStream) Next(ctx context.Context) (transport.Step, error) {
	s.b.nexts.Add(1)
	return s.Stream.Next(ctx)
}

func (s *trackedStream) Close() error {
	s.b.closed.Add(1)
	return s.Stream.Close()
}

func cmdDescriptor(t testing.TB, req *transport.Request) *flight.FlightDescriptor {
	b, err := req.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return &flight.FlightDescriptor{Type: flight.DescriptorCMD, Cmd: b}
}

// repeatBackend streams one prebuilt record, steps times: it measures the
// transport alone, not the building of records.
type repeatBackend struct {
	rec   arrow.RecordBatch
	steps atomic.Int64
}

func (b *repeatBackend) Info(context.Context, *transport.Request) (*transport.PlanInfo, error) {
	return &transport.PlanInfo{Schema: b.rec.Schema()}, nil
}

func (b *repeatBackend) Open(context.Context, *transport.Request) (transport.Stream, error) {
	return &repeatStream{b: b, left: b.steps.Load()}, nil
}

type repeatStream struct {
	b    *repeatBackend
	left int64
	step int
}

func (s *repeatStream) Schema() *arrow.Schema { return s.b.rec.Schema() }

func (s *repeatStream) Next(ctx context.Context) (transport.Step, error) {
	if err := ctx.Err(); err != nil {
		return transport.Step{}, err
	}
	if s.left == 0 {
		return transport.Step{}, io.EOF
	}
	s.left--
	s.step++
	s.b.rec.Retain()
	return transport.Step{Slices: []arrow.RecordBatch{s.b.rec}, Meta: transport.StepMeta{Step: s.step - 1, Slices: []int{0}, RealRows: []int{int(s.b.rec.NumRows())}}}, nil
}

func (s *repeatStream) Close() error { return nil }

func runtimeGoroutines() int {
	// Let goroutines of finished calls exit before taking the baseline.
	time.Sleep(50 * time.Millisecond)
	return runtimeNumGoroutine()
}
