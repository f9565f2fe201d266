package transport

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
)

// discard is a logger that drops everything (no log noise in tests).
var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

// netKind is how a test reaches its server.
type netKind string

const (
	viaBufconn netKind = "bufconn"
	viaUnix    netKind = "unix"
	viaTCP     netKind = "tcp"
)

var allKinds = []netKind{viaBufconn, viaUnix, viaTCP}

// testServer is a running server and a Flight client connected to it.
type testServer struct {
	srv    *Server
	client flight.Client
	conn   *grpc.ClientConn
	done   chan error
	target string
}

// startServer runs a server over backend, reached through kind, and stops it
// (and the client) at cleanup. dialOpts are added to the client's.
func startServer(t testing.TB, kind netKind, backend Backend, opts []Option, dialOpts ...grpc.DialOption) *testServer {
	t.Helper()
	var lis net.Listener
	var target string
	base := []Option{WithLogger(discard), WithAllowedRoots("/data", "gs://bucket/train")}
	switch kind {
	case viaBufconn:
		bl := bufconn.Listen(1 << 20)
		lis = bl
		target = "passthrough:///bufnet"
		dialOpts = append(dialOpts, grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			return bl.DialContext(ctx)
		}))
	case viaUnix:
		// Socket paths are limited to ~108 bytes: t.TempDir can be long.
		dir := t.TempDir()
		sock := filepath.Join(dir, "s.sock")
		if len(sock) > 100 {
			t.Fatalf("socket path %q too long", sock)
		}
		base = append(base, WithAddress("unix://"+sock))
		target = "unix://" + sock
	case viaTCP:
		base = append(base, WithAddress("127.0.0.1:0"))
	}
	srv, err := New(backend, append(base, opts...)...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if lis == nil {
		if lis, err = srv.Listen(); err != nil {
			t.Fatalf("Listen: %v", err)
		}
		if kind == viaTCP {
			target = lis.Addr().String()
		}
	}
	ts := &testServer{srv: srv, done: make(chan error, 1)}
	go func() { ts.done <- srv.Serve(lis) }()
	if !hasCreds(dialOpts) {
		dialOpts = append(dialOpts, grpc.WithTransportCredentials(insecure.NewCredentials()))
	}
	dialOpts = append(dialOpts, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(DefaultMaxMessageSize)))
	conn, err := grpc.NewClient(target, dialOpts...)
	if err != nil {
		t.Fatalf("NewClient(%q): %v", target, err)
	}
	ts.conn = conn
	ts.target = target
	ts.client = flight.NewClientFromConn(conn, nil)
	t.Cleanup(func() { ts.stop(t) })
	return ts
}

// credsMarker marks dial options that carry transport credentials.
type credsMarker struct{ grpc.DialOption }

func hasCreds(opts []grpc.DialOption) bool {
	for _, o := range opts {
		if _, ok := o.(credsMarker); ok {
			return true
		}
	}
	return false
}

var stopOnce sync.Map

// stop closes the client and shuts the server down (once).
func (ts *testServer) stop(t testing.TB) {
	if _, loaded := stopOnce.LoadOrStore(ts, true); loaded {
		return
	}
	ts.conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := ts.srv.Shutdown(ctx); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	if err := <-ts.done; err != nil {
		t.Errorf("Serve: %v", err)
	}
}

// ticket encodes req.
func ticket(t testing.TB, req *Request) *flight.Ticket {
	t.Helper()
	b, err := req.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return &flight.Ticket{Ticket: b}
}

// baseRequest is a valid request over the demo backend.
func baseRequest() *Request {
	return &Request{
		Version:         Version,
		Datasets:        []string{"/data/demo/*.parquet"},
		GlobalBatchSize: 4,
		NumSlices:       2,
		Slices:          []int{0, 1},
		LastBatch:       LastBatchPad,
		Epochs:          1,
	}
}

// tracking wraps a Backend and counts opened and closed streams; each Next
// first sleeps delay and can be made to fail after failAfter steps.
type tracking struct {
	Backend
	opened, closed, nexts atomic.Int64
	delay                 time.Duration
	failAfter             int64 // > 0: Next fails with failErr after this many steps
	failErr               error
	closeDelay            atomic.Int64 // nanoseconds each Close sleeps first
}

func (b *tracking) Open(ctx context.Context, req *Request) (Stream, error) {
	st, err := b.Backend.Open(ctx, req)
	if err != nil {
		return nil, err
	}
	b.opened.Add(1)
	return &trackedStream{Stream: st, b: b}, nil
}

type trackedStream struct {
	Stream
	b      *tracking
	n      int64
	closed atomic.Bool
}

func (s *trackedStream) Next(ctx context.Context) (Step, error) {
	s.b.nexts.Add(1)
	if s.b.delay > 0 {
		select {
		case <-time.After(s.b.delay):
		case <-ctx.Done():
			return Step{}, ctx.Err()
		}
	}
	if s.b.failAfter > 0 && s.n >= s.b.failAfter {
		return Step{}, s.b.failErr
	}
	s.n++
	return s.Stream.Next(ctx)
}

func (s *trackedStream) Close() error {
	if s.closed.Swap(true) {
		panic("Close called twice")
	}
	time.Sleep(time.Duration(s.b.closeDelay.Load()))
	s.b.closed.Add(1)
	return s.Stream.Close()
}

// waitFor polls cond for up to 10 s.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// checkGoroutines waits until the goroutine count is back to at most base
// (+slack), and fails with a dump of the goroutines if it does not get there.
func checkGoroutines(t testing.TB, base, slack int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n := runtime.NumGoroutine()
		if n <= base+slack {
			return
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			t.Fatalf("goroutines: %d, want <= %d + %d; stacks:\n%s", n, base, slack, buf)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// checkedMem returns a checked allocator that must be empty at cleanup
// (registered before the server's cleanup, so it runs after it).
func checkedMem(t *testing.T) *memory.CheckedAllocator {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	t.Cleanup(func() { mem.AssertSize(t, 0) })
	return mem
}

// step is one received step.
type step struct {
	meta map[string]any // app_metadata as generic JSON, to check field names
	ids  []int64
	x    [][4]float32
	mask []bool
}

// readAll reads a DoGet stream to its end.
func readAll(t testing.TB, ctx context.Context, c flight.Client, tkt *flight.Ticket) (*arrow.Schema, []step, error) {
	t.Helper()
	stream, err := c.DoGet(ctx, tkt)
	if err != nil {
		return nil, nil, err
	}
	rdr, err := flight.NewRecordReader(stream)
	if err != nil {
		return nil, nil, err
	}
	defer rdr.Release()
	var steps []step
	for rdr.Next() {
		steps = append(steps, decodeStep(t, rdr.RecordBatch(), rdr.LatestAppMetadata()))
	}
	if err := rdr.Err(); err != nil && !errors.Is(err, io.EOF) {
		return rdr.Schema(), steps, err
	}
	return rdr.Schema(), steps, nil
}

func decodeStep(t testing.TB, rec arrow.RecordBatch, meta []byte) step {
	t.Helper()
	var s step
	if err := json.Unmarshal(meta, &s.meta); err != nil {
		t.Fatalf("app_metadata %q: %v", meta, err)
	}
	for i, f := range rec.Schema().Fields() {
		switch col := rec.Column(i).(type) {
		case interface{ Int64Values() []int64 }:
			s.ids = append(s.ids, col.Int64Values()...)
		case interface{ ListValues() arrow.Array }:
			vals := col.ListValues().(interface{ Float32Values() []float32 }).Float32Values()
			for r := 0; r < int(rec.NumRows()); r++ {
				var v [4]float32
				copy(v[:], vals[4*r:4*r+4])
				s.x = append(s.x, v)
			}
		case interface{ Value(int) bool }:
			for r := 0; r < col.(arrow.Array).Len(); r++ {
				s.mask = append(s.mask, col.Value(r))
			}
		default:
			t.Fatalf("unexpected column %q of type %v", f.Name, f.Type)
		}
	}
	return s
}

func containsAll(s string, subs ...string) []string {
	var missing []string
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			missing = append(missing, sub)
		}
	}
	return missing
}

func runtimeNumGoroutine() int { return runtime.NumGoroutine() }
