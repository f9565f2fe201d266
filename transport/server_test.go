package transport

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// wantStep is an expected step, derived by hand from the contract (streams
// are contiguous, lengths differ by at most one; step s of slice d is rows
// [s*b, (s+1)*b) of stream d; padding rows have id 0 and mask false).
type wantStep struct {
	epoch, step int
	slices      []int
	realRows    []int
	ids         []int64
	mask        []bool // nil: no mask column
}

func TestDoGetSteps(t *testing.T) {
	T, F := true, false
	cases := []struct {
		name   string
		n      int64
		mutate func(*Request)
		want   []wantStep
	}{
		{
			// N=10, D=2: stream 0 = rows 0..4, stream 1 = rows 5..9; b = 2.
			name: "pad", n: 10, mutate: func(r *Request) {},
			want: []wantStep{
				{0, 0, []int{0, 1}, []int{2, 2}, []int64{0, 1, 5, 6}, []bool{T, T, T, T}},
				{0, 1, []int{0, 1}, []int{2, 2}, []int64{2, 3, 7, 8}, []bool{T, T, T, T}},
				{0, 2, []int{0, 1}, []int{1, 1}, []int64{4, 0, 9, 0}, []bool{T, F, T, F}},
			},
		},
		{
			name: "drop two epochs", n: 10, mutate: func(r *Request) { r.LastBatch = LastBatchDrop; r.Epochs = 2 },
			want: []wantStep{
				{0, 0, []int{0, 1}, []int{2, 2}, []int64{0, 1, 5, 6}, nil},
				{0, 1, []int{0, 1}, []int{2, 2}, []int64{2, 3, 7, 8}, nil},
				{1, 0, []int{0, 1}, []int{2, 2}, []int64{0, 1, 5, 6}, nil},
				{1, 1, []int{0, 1}, []int{2, 2}, []int64{2, 3, 7, 8}, nil},
			},
		},
		{
			name: "slice 1 only", n: 10, mutate: func(r *Request) { r.Slices = []int{1} },
			want: []wantStep{
				{0, 0, []int{1}, []int{2}, []int64{5, 6}, []bool{T, T}},
				{0, 1, []int{1}, []int{2}, []int64{7, 8}, []bool{T, T}},
				{0, 2, []int{1}, []int{1}, []int64{9, 0}, []bool{T, F}},
			},
		},
		{
			// N=11, D=2: stream 0 = rows 0..5 (6 rows), stream 1 = rows 6..10.
			name: "uneven streams", n: 11, mutate: func(r *Request) {},
			want: []wantStep{
				{0, 0, []int{0, 1}, []int{2, 2}, []int64{0, 1, 6, 7}, []bool{T, T, T, T}},
				{0, 1, []int{0, 1}, []int{2, 2}, []int64{2, 3, 8, 9}, []bool{T, T, T, T}},
				{0, 2, []int{0, 1}, []int{2, 1}, []int64{4, 5, 10, 0}, []bool{T, T, T, F}},
			},
		},
		{
			name: "resume at epoch 1 step 1", n: 10, mutate: func(r *Request) { r.Epochs = 2; r.Start = Position{Epoch: 1, Step: 1} },
			want: []wantStep{
				{1, 1, []int{0, 1}, []int{2, 2}, []int64{2, 3, 7, 8}, []bool{T, T, T, T}},
				{1, 2, []int{0, 1}, []int{1, 1}, []int64{4, 0, 9, 0}, []bool{T, F, T, F}},
			},
		},
	}
	for _, kind := range allKinds {
		t.Run(string(kind), func(t *testing.T) {
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					mem := checkedMem(t)
					tb := &tracking{Backend: &DemoBackend{NumRows: tc.n, Mem: mem}}
					ts := startServer(t, kind, tb, nil)
					req := baseRequest()
					tc.mutate(req)
					ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
					defer cancel()
					schema, got, err := readAll(t, ctx, ts.client, ticket(t, req))
					if err != nil {
						t.Fatalf("DoGet: %v", err)
					}
					wantFields := []string{"id", "x"}
					if req.LastBatch == LastBatchPad {
						wantFields = append(wantFields, "valid")
					}
					var gotFields []string
					for _, f := range schema.Fields() {
						gotFields = append(gotFields, f.Name)
					}
					if !reflect.DeepEqual(gotFields, wantFields) {
						t.Errorf("schema fields = %v, want %v", gotFields, wantFields)
					}
					if len(got) != len(tc.want) {
						t.Fatalf("got %d steps, want %d", len(got), len(tc.want))
					}
					for i, w := range tc.want {
						g := got[i]
						wantMeta := map[string]any{
							"epoch": float64(w.epoch), "step": float64(w.step),
							"slices": floats(w.slices), "real_rows": floats(w.realRows),
						}
						if !reflect.DeepEqual(g.meta, wantMeta) {
							t.Errorf("step %d: app_metadata = %v, want %v", i, g.meta, wantMeta)
						}
						if !reflect.DeepEqual(g.ids, w.ids) {
							t.Errorf("step %d: ids = %v, want %v", i, g.ids, w.ids)
						}
						if !reflect.DeepEqual(g.mask, w.mask) {
							t.Errorf("step %d: mask = %v, want %v", i, g.mask, w.mask)
						}
						for r, id := range w.ids {
							want := [4]float32{float32(4 * id), float32(4*id + 1), float32(4*id + 2), float32(4*id + 3)}
							if w.mask != nil && !w.mask[r] {
								want = [4]float32{}
							}
							if g.x[r] != want {
								t.Errorf("step %d row %d: x = %v, want %v", i, r, g.x[r], want)
							}
						}
					}
					ts.stop(t)
					if o, c := tb.opened.Load(), tb.closed.Load(); o != 1 || c != 1 {
						t.Errorf("streams opened %d, closed %d; want 1, 1", o, c)
					}
				})
			}
		})
	}
}

func floats(v []int) []any {
	out := make([]any, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

// oneMessage replays the first message of a DoGet stream, then io.EOF.
type oneMessage struct {
	fd   *flight.FlightData
	done bool
}

func (o *oneMessage) Recv() (*flight.FlightData, error) {
	if o.done {
		return nil, io.EOF
	}
	o.done = true
	return o.fd, nil
}

// TestSchemaFirst checks that the first DoGet message is the schema alone,
// sent before the first step is produced.
func TestSchemaFirst(t *testing.T) {
	tb := &tracking{Backend: &DemoBackend{NumRows: 10}, delay: time.Hour}
	ts := startServer(t, viaBufconn, tb, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := ts.client.DoGet(ctx, ticket(t, baseRequest()))
	if err != nil {
		t.Fatal(err)
	}
	fd, err := stream.Recv() // arrives although the first step never does
	if err != nil {
		t.Fatalf("first Recv: %v", err)
	}
	if len(fd.DataBody) != 0 || len(fd.AppMetadata) != 0 {
		t.Errorf("first message has %d body bytes and app_metadata %q, want none", len(fd.DataBody), fd.AppMetadata)
	}
	rdr, err := flight.NewRecordReader(&oneMessage{fd: fd})
	if err != nil {
		t.Fatalf("first message is not a schema: %v", err)
	}
	defer rdr.Release()
	if got := rdr.Schema().NumFields(); got != 3 {
		t.Errorf("schema has %d fields, want 3", got)
	}
	if rdr.Next() {
		t.Errorf("first message carried a record")
	}
	cancel()
	waitFor(t, "stream closed", func() bool { return tb.closed.Load() == 1 })
}

func cmdDescriptor(t testing.TB, req *Request) *flight.FlightDescriptor {
	b, err := req.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return &flight.FlightDescriptor{Type: flight.DescriptorCMD, Cmd: b}
}

func TestGetFlightInfo(t *testing.T) {
	ts := startServer(t, viaBufconn, &DemoBackend{NumRows: 10}, nil)
	ctx := context.Background()
	req := baseRequest()
	info, err := ts.client.GetFlightInfo(ctx, cmdDescriptor(t, req))
	if err != nil {
		t.Fatalf("GetFlightInfo: %v", err)
	}
	schema, err := flight.DeserializeSchema(info.Schema, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "x", Type: arrow.FixedSizeListOf(4, arrow.PrimitiveTypes.Float32)},
		{Name: "valid", Type: arrow.FixedWidthTypes.Boolean},
	}, nil)
	if !schema.Equal(want) {
		t.Errorf("schema = %v, want %v", schema, want)
	}
	var meta map[string]any
	if err := json.Unmarshal(info.AppMetadata, &meta); err != nil {
		t.Fatalf("app_metadata %q: %v", info.AppMetadata, err)
	}
	// N=10, B=4, pad: ceil(10/4) = 3 steps, 3*4-10 = 2 padding rows.
	wantMeta := map[string]any{"num_rows": 10.0, "steps_per_epoch": 3.0, "dropped_rows": 0.0, "padded_rows": 2.0}
	if !reflect.DeepEqual(meta, wantMeta) {
		t.Errorf("app_metadata = %v, want %v", meta, wantMeta)
	}
	if len(info.Endpoint) != 1 {
		t.Fatalf("%d endpoints, want 1", len(info.Endpoint))
	}
	got, err := DecodeRequest(info.Endpoint[0].Ticket.Ticket)
	if err != nil {
		t.Fatalf("endpoint ticket: %v", err)
	}
	if !reflect.DeepEqual(got, req) {
		t.Errorf("endpoint ticket = %+v, want %+v", got, req)
	}
	_, steps, err := readAll(t, ctx, ts.client, info.Endpoint[0].Ticket)
	if err != nil || len(steps) != 3 {
		t.Errorf("DoGet(endpoint ticket) = %d steps, %v; want 3 steps", len(steps), err)
	}

	// drop: floor(10/4) = 2 steps, 10 - 8 = 2 dropped rows.
	req.LastBatch = LastBatchDrop
	info, err = ts.client.GetFlightInfo(ctx, cmdDescriptor(t, req))
	if err != nil {
		t.Fatal(err)
	}
	meta = nil
	_ = json.Unmarshal(info.AppMetadata, &meta)
	wantMeta = map[string]any{"num_rows": 10.0, "steps_per_epoch": 2.0, "dropped_rows": 2.0, "padded_rows": 0.0}
	if !reflect.DeepEqual(meta, wantMeta) {
		t.Errorf("drop: app_metadata = %v, want %v", meta, wantMeta)
	}

	sr, err := ts.client.GetSchema(ctx, cmdDescriptor(t, req))
	if err != nil {
		t.Fatalf("GetSchema: %v", err)
	}
	if s, err := flight.DeserializeSchema(sr.Schema, nil); err != nil || s.NumFields() != 2 {
		t.Errorf("GetSchema = %v, %v; want 2 fields", s, err)
	}

	_, err = ts.client.GetFlightInfo(ctx, &flight.FlightDescriptor{Type: flight.DescriptorPATH, Path: []string{"/data/x"}})
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("GetFlightInfo(PATH) = %v, want InvalidArgument", err)
	}
}

// TestStatusCodes checks the code and message of every refusal, for DoGet
// (the error arrives at the first Recv) and GetFlightInfo.
func TestStatusCodes(t *testing.T) {
	errCustom := errors.New("custom sentinel")
	tb := &tracking{Backend: &DemoBackend{NumRows: 10}}
	ts := startServer(t, viaBufconn, &openErr{tb, map[string]error{
		"/data/missing":  fmt.Errorf("open %q: %w", "/data/missing", errCustom),
		"/data/internal": errors.New("something broke"),
	}}, []Option{WithErrorCode(errCustom, codes.NotFound)})

	big := baseRequest()
	big.Datasets = []string{"/data/" + strings.Repeat("a", MaxTicketBytes)}
	bigTicket, _ := big.Encode()

	cases := []struct {
		name   string
		ticket []byte
		code   codes.Code
		msg    []string
	}{
		{"not json", []byte("{"), codes.InvalidArgument, []string{"invalid request"}},
		{"unknown field", []byte(`{"version":1,"datasets":["/data/a"],"global_batch_size":4,"num_slices":2,"slices":[0],"last_batch":"pad","colums":[]}`),
			codes.InvalidArgument, []string{`unknown field "colums"`}},
		{"many problems", []byte(`{"version":1,"datasets":["/data/a"],"global_batch_size":5,"num_slices":2,"slices":[1,0,0,7],"last_batch":"sometimes","epochs":-1}`),
			codes.InvalidArgument, []string{"not a multiple of num_slices", "must be ascending", "duplicate", "out of range", `last_batch "sometimes" is unknown`, "epochs -1 is negative"}},
		{"oversized", bigTicket, codes.InvalidArgument, []string{"ticket too large"}},
		{"outside roots", mustEncode(t, withDatasets("/etc/passwd")), codes.PermissionDenied, []string{`"/etc/passwd" is not under an allowed root`}},
		{"other bucket", mustEncode(t, withDatasets("gs://other/train/a.parquet")), codes.PermissionDenied, []string{`"gs://other/train/a.parquet"`}},
		{"dotdot", mustEncode(t, withDatasets("/data/../etc/passwd")), codes.PermissionDenied, []string{`"/data/../etc/passwd" has a ".." segment`}},
		{"backend sentinel", mustEncode(t, withDatasets("/data/missing")), codes.NotFound, []string{"custom sentinel"}},
		{"backend plain error", mustEncode(t, withDatasets("/data/internal")), codes.Internal, []string{"something broke"}},
		{"raise", mustEncode(t, func() *Request { r := baseRequest(); r.LastBatch = LastBatchRaise; return r }()),
			codes.FailedPrecondition, []string{"N=10", "B=4", "remainder 2"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, _, err := readAll(t, ctx, ts.client, &flight.Ticket{Ticket: tc.ticket})
			checkStatus(t, "DoGet", err, tc.code, tc.msg)
			if len(tc.ticket) <= MaxTicketBytes && tc.name != "not json" && tc.name != "unknown field" {
				_, err = ts.client.GetFlightInfo(ctx, &flight.FlightDescriptor{Type: flight.DescriptorCMD, Cmd: tc.ticket})
				checkStatus(t, "GetFlightInfo", err, tc.code, tc.msg)
			}
		})
	}
	m := ts.srv.Metrics()
	if m.Errors["InvalidArgument"] < 4 || m.Errors["PermissionDenied"] < 3 {
		t.Errorf("errors_by_code = %v, want >= 4 InvalidArgument and >= 3 PermissionDenied", m.Errors)
	}
}

func checkStatus(t *testing.T, call string, err error, code codes.Code, msg []string) {
	t.Helper()
	if status.Code(err) != code {
		t.Errorf("%s: error = %v, want code %v", call, err, code)
		return
	}
	if missing := containsAll(status.Convert(err).Message(), msg...); len(missing) > 0 {
		t.Errorf("%s: message %q lacks %q", call, status.Convert(err).Message(), missing)
	}
}

func withDatasets(uris ...string) *Request {
	r := baseRequest()
	r.Datasets = uris
	return r
}

func mustEncode(t testing.TB, r *Request) []byte {
	b, err := r.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// openErr fails Info and Open for some dataset URIs.
type openErr struct {
	Backend
	errs map[string]error
}

func (b *openErr) Info(ctx context.Context, req *Request) (*PlanInfo, error) {
	if err := b.errs[req.Datasets[0]]; err != nil {
		return nil, err
	}
	return b.Backend.Info(ctx, req)
}

func (b *openErr) Open(ctx context.Context, req *Request) (Stream, error) {
	if err := b.errs[req.Datasets[0]]; err != nil {
		return nil, err
	}
	return b.Backend.Open(ctx, req)
}

// TestMidStreamError checks that a step's error reaches the client with its
// code after the steps before it, and that the stream is closed.
func TestMidStreamError(t *testing.T) {
	mem := checkedMem(t)
	tb := &tracking{Backend: &DemoBackend{NumRows: 100, Mem: mem}, failAfter: 2,
		failErr: fmt.Errorf("read row group 3: %w", ErrUnavailable)}
	ts := startServer(t, viaBufconn, tb, nil)
	req := baseRequest()
	req.Epochs = 0
	_, steps, err := readAll(t, context.Background(), ts.client, ticket(t, req))
	checkStatus(t, "DoGet", err, codes.Unavailable, []string{"read row group 3"})
	if len(steps) != 2 {
		t.Errorf("got %d steps before the error, want 2", len(steps))
	}
	waitFor(t, "stream closed", func() bool { return tb.closed.Load() == 1 })
}

// panicking panics in Next after the first `after` steps of its stream.
type panicking struct {
	Backend
	after int
}

func (b *panicking) Open(ctx context.Context, req *Request) (Stream, error) {
	st, err := b.Backend.Open(ctx, req)
	return &panickingStream{Stream: st, left: b.after}, err
}

type panickingStream struct {
	Stream
	left int
}

func (s *panickingStream) Next(ctx context.Context) (Step, error) {
	if s.left == 0 {
		panic("backend bug")
	}
	s.left--
	return s.Stream.Next(ctx)
}

// TestBackendPanic: a panic in a backend's Next ends that stream with an
// Internal error naming the step, after the steps before it; the stream is
// closed and the server keeps serving.
func TestBackendPanic(t *testing.T) {
	mem := checkedMem(t)
	tb := &tracking{Backend: &panicking{Backend: &DemoBackend{NumRows: 100, Mem: mem}, after: 3}}
	ts := startServer(t, viaBufconn, tb, nil)
	req := baseRequest()
	req.Epochs = 0
	_, steps, err := readAll(t, context.Background(), ts.client, ticket(t, req))
	checkStatus(t, "DoGet", err, codes.Internal, []string{"step 3", "panicked", "backend bug"})
	if len(steps) != 3 {
		t.Errorf("got %d steps before the panic, want 3", len(steps))
	}
	waitFor(t, "stream closed", func() bool { return tb.closed.Load() == 1 })
	if _, _, err := readAll(t, context.Background(), ts.client, ticket(t, baseRequest())); err == nil || status.Code(err) != codes.Internal {
		t.Errorf("second stream = %v, want the same Internal error (the server must survive the first)", err)
	}
}

func TestMaxStreams(t *testing.T) {
	tb := &tracking{Backend: &DemoBackend{NumRows: 10}}
	ts := startServer(t, viaBufconn, tb, []Option{WithMaxStreams(1)})
	req := baseRequest()
	req.Epochs = 0 // unbounded: the stream holds its slot until cancelled

	ctx1, cancel1 := context.WithCancel(context.Background())
	s1, err := ts.client.DoGet(ctx1, ticket(t, req))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s1.Recv(); err != nil {
		t.Fatalf("first stream: %v", err)
	}
	ctx := context.Background()
	_, _, err = readAll(t, ctx, ts.client, ticket(t, req))
	checkStatus(t, "second DoGet", err, codes.ResourceExhausted, []string{"limit of 1 streams"})

	cancel1()
	waitFor(t, "first stream closed", func() bool { return tb.closed.Load() == 1 })
	waitFor(t, "slot freed", func() bool { return ts.srv.Metrics().StreamsActive == 0 })
	req.Epochs = 1
	if _, steps, err := readAll(t, ctx, ts.client, ticket(t, req)); err != nil || len(steps) != 3 {
		t.Errorf("DoGet after the slot was freed = %d steps, %v; want 3 steps", len(steps), err)
	}
}

// TestCancelFreesStream cancels a stream mid-way: the stream is closed, every
// record released and the goroutines are back to their count before.
func TestCancelFreesStream(t *testing.T) {
	for _, kind := range allKinds {
		t.Run(string(kind), func(t *testing.T) {
			mem := checkedMem(t)
			tb := &tracking{Backend: &DemoBackend{NumRows: 1000, Mem: mem}}
			ts := startServer(t, kind, tb, []Option{WithPrefetch(4)})
			// Warm the connection up so its goroutines are in the baseline.
			if _, err := ts.client.GetFlightInfo(context.Background(), cmdDescriptor(t, baseRequest())); err != nil {
				t.Fatal(err)
			}
			base := runtimeGoroutines()
			req := baseRequest()
			req.Epochs = 0
			ctx, cancel := context.WithCancel(context.Background())
			stream, err := ts.client.DoGet(ctx, ticket(t, req))
			if err != nil {
				t.Fatal(err)
			}
			for range 4 {
				if _, err := stream.Recv(); err != nil {
					t.Fatal(err)
				}
			}
			cancel()
			waitFor(t, "stream closed", func() bool { return tb.closed.Load() == 1 })
			waitFor(t, "budget released", func() bool { return ts.srv.Metrics().BudgetInUse == 0 })
			checkGoroutines(t, base, 0)
			if mem.CurrentAlloc() != 0 {
				t.Errorf("%d bytes of records still allocated after cancel", mem.CurrentAlloc())
			}
		})
	}
}

// TestOpenCancelCycles opens and cancels 1,000 streams: no goroutine, stream
// or record may leak.
func TestOpenCancelCycles(t *testing.T) {
	mem := checkedMem(t)
	tb := &tracking{Backend: &DemoBackend{NumRows: 1000, Mem: mem}}
	ts := startServer(t, viaBufconn, tb, nil)
	if _, err := ts.client.GetFlightInfo(context.Background(), cmdDescriptor(t, baseRequest())); err != nil {
		t.Fatal(err)
	}
	base := runtimeGoroutines()
	req := baseRequest()
	req.Epochs = 0
	tkt := ticket(t, req)
	const cycles = 1000
	for i := range cycles {
		// Cancelled streams end on the server a little later: on a loaded
		// machine up to DefaultMaxStreams of them can be ending at once, and
		// the next DoGet would be refused (ResourceExhausted), which is the
		// limit working, not a leak.
		waitFor(t, "a free stream slot", func() bool { return ts.srv.Metrics().StreamsActive < int64(DefaultMaxStreams) })
		ctx, cancel := context.WithCancel(context.Background())
		stream, err := ts.client.DoGet(ctx, tkt)
		if err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 { // half cancel after a step, half right away
			if _, err := stream.Recv(); err != nil {
				t.Fatalf("cycle %d: %v", i, err)
			}
		}
		cancel()
	}
	waitFor(t, "every stream closed", func() bool { return tb.closed.Load() == tb.opened.Load() })
	checkGoroutines(t, base, 0)
	if got := ts.srv.Metrics().StreamsActive; got != 0 {
		t.Errorf("streams_active = %d after %d cycles, want 0", got, cycles)
	}
	if mem.CurrentAlloc() != 0 {
		t.Errorf("%d bytes of records still allocated", mem.CurrentAlloc())
	}
}

func runtimeGoroutines() int {
	// Let goroutines of finished calls exit before taking the baseline.
	time.Sleep(50 * time.Millisecond)
	return runtimeNumGoroutine()
}

func TestHealthAndMetrics(t *testing.T) {
	ts := startServer(t, viaBufconn, &DemoBackend{NumRows: 10}, []Option{WithMetricsAddress("127.0.0.1:0")})
	ctx := context.Background()
	hc := healthpb.NewHealthClient(ts.conn)
	resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || resp.Status != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health Check = %v, %v; want SERVING", resp, err)
	}
	if _, steps, err := readAll(t, ctx, ts.client, ticket(t, baseRequest())); err != nil || len(steps) != 3 {
		t.Fatalf("DoGet = %d steps, %v", len(steps), err)
	}
	waitFor(t, "metrics address", func() bool { return ts.srv.MetricsAddr() != nil })
	res, err := http.Get("http://" + ts.srv.MetricsAddr().String() + "/debug/vars")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var m map[string]any
	if err := json.NewDecoder(res.Body).Decode(&m); err != nil {
		t.Fatal(err)
	}
	// 3 steps of 4 rows; each row is 8 (id) + 16 (x) bytes + mask bits.
	if m["steps_sent"] != 3.0 || m["rows_sent"] != 12.0 || m["streams_total"] != 1.0 {
		t.Errorf("metrics = %v, want steps_sent 3, rows_sent 12, streams_total 1", m)
	}
	if b, _ := m["record_bytes_sent"].(float64); b < 3*4*24 {
		t.Errorf("record_bytes_sent = %v, want >= %d", m["record_bytes_sent"], 3*4*24)
	}
}

// TestShutdownCancelsAfterTimeout checks that Shutdown drains, and cancels an
// unbounded stream once its context expires.
func TestShutdownCancelsAfterTimeout(t *testing.T) {
	tb := &tracking{Backend: &DemoBackend{NumRows: 10}}
	ts := startServer(t, viaBufconn, tb, nil)
	req := baseRequest()
	req.Epochs = 0
	stream, err := ts.client.DoGet(context.Background(), ticket(t, req))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := ts.srv.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Shutdown = %v, want DeadlineExceeded", err)
	}
	waitFor(t, "stream closed", func() bool { return tb.closed.Load() == 1 })
	stopOnce.Store(ts, true)
	ts.conn.Close()
	if err := <-ts.done; err != nil {
		t.Errorf("Serve: %v", err)
	}
}
