package feed

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/flight"
	"google.golang.org/grpc/codes"

	"github.com/meshfeed/meshfeed/loader"
	"github.com/meshfeed/meshfeed/transport"
)

// TestHostileSizes: tickets of ~200 bytes whose sizes would make the
// server allocate without bound are refused before anything is allocated,
// by GetFlightInfo and DoGet alike, with the documented code and the
// numbers; after each, the server serves a good request exactly as before.
func TestHostileSizes(t *testing.T) {
	spec := pipeSpec()
	spec.Tokens, spec.TokensMin, spec.TokensMax = true, 1, 3
	dir := writeDataset(t, spec)
	p, err := NewPipeline(context.Background(), WithCacheTTL(0),
		WithLoaderOptions(loader.WithDecodeWorkers(2)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	const budget = 64 << 20
	ts := startServer(t, viaTCP, p, []transport.Option{transport.WithAllowedRoots(dir), transport.WithMemoryBudget(budget)})

	good := pipeRequest(dir, 8, 2, []int{0, 1}, transport.LastBatchPad)
	good.Epochs = 1
	want, err := stepSums(context.Background(), ts.Client, good, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	all := func(n int) []int {
		s := make([]int, n)
		for i := range s {
			s[i] = i
		}
		return s
	}
	for _, c := range []struct {
		name string
		mut  func(r *transport.Request)
		code codes.Code
		msg  []string
	}{
		{"B and D 2^40", func(r *transport.Request) { r.GlobalBatchSize, r.NumSlices = 1<<40, 1<<40 },
			codes.InvalidArgument, []string{"num_slices 1099511627776 is over the limit of 65536"}},
		{"D 2^26", func(r *transport.Request) { r.GlobalBatchSize, r.NumSlices = 1<<26, 1<<26 },
			codes.InvalidArgument, []string{"num_slices 67108864 is over the limit of 65536"}},
		{"elastic from 2^40", func(r *transport.Request) {
			r.GlobalBatchSize = 1 << 40
			r.Elastic = &transport.Elastic{FromSlices: 1 << 40, Epoch: 0, Step: 0}
		}, codes.InvalidArgument, []string{"elastic.from_slices 1099511627776 is over the limit of 65536"}},
		{"pad batch of 2^62 rows", func(r *transport.Request) { r.GlobalBatchSize = 1 << 62 },
			codes.InvalidArgument, []string{"global_batch_size 4611686018427387904 is over the limit of 2147483647"}},
		{"pad batch of 2^31-1 rows", func(r *transport.Request) { r.GlobalBatchSize, r.NumSlices, r.Slices = 1<<31-1, 1, []int{0} },
			codes.ResourceExhausted, []string{"max message size", "2147483647 rows"}},
		{"length 2^31-1", func(r *transport.Request) {
			r.LastBatch = transport.LastBatchDrop
			r.Columns = []transport.Column{{Name: "tokens", Length: 1<<31 - 1}}
		}, codes.ResourceExhausted, []string{"max message size", "2 slices of 4 rows"}},
		{"length 10^6", func(r *transport.Request) {
			r.LastBatch = transport.LastBatchDrop
			r.GlobalBatchSize = 96
			r.Columns = []transport.Column{{Name: "tokens", Length: 1000000}}
		}, codes.ResourceExhausted, []string{"max message size"}},
		{"length 10^5 past the budget", func(r *transport.Request) {
			r.LastBatch = transport.LastBatchDrop
			r.GlobalBatchSize = 64
			r.Columns = []transport.Column{{Name: "tokens", Length: 100000}}
		}, codes.ResourceExhausted, []string{"memory budget of 67108864 bytes", "2 slices of 32 rows"}},
		{"4000 slices of one row", func(r *transport.Request) {
			r.GlobalBatchSize, r.NumSlices, r.Slices = 4000, 4000, all(4000)
		}, codes.ResourceExhausted, []string{"memory budget of 67108864 bytes", "4000 slices x 1048576 bytes"}},
		{"packing past the message size", func(r *transport.Request) {
			r.LastBatch = transport.LastBatchDrop
			r.GlobalBatchSize = 64
			r.Columns = []transport.Column{{Name: "tokens", Length: 1 << 30, PackRatio: 2}}
		}, codes.ResourceExhausted, []string{"max message size", "2 slices of 16 rows"}},
	} {
		r := pipeRequest(dir, 8, 2, []int{0, 1}, transport.LastBatchPad)
		r.Epochs = 1
		c.mut(r)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err := ts.Client.GetFlightInfo(ctx, cmdDescriptor(t, r))
		checkStatus(t, "GetFlightInfo("+c.name+")", err, c.code, c.msg)
		_, err = stepSums(ctx, ts.Client, r, 0, nil)
		checkStatus(t, "DoGet("+c.name+")", err, c.code, c.msg)
		cancel()
		got, err := stepSums(context.Background(), ts.Client, good, 0, nil)
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("after %s: good request = %d steps, %v; want the %d steps of an undisturbed run", c.name, len(got), err, len(want))
		}
	}
	waitFor(t, "memory account empty", func() bool { return ts.Srv.Metrics().BudgetInUse == 0 })
}

// TestManyBadFilesMessage: a dataset of many empty files fails with
// FailedPrecondition whose message names the count and the first files,
// short enough for gRPC's metadata limits (not ResourceExhausted or a reset
// stream about metadata size).
func TestManyBadFilesMessage(t *testing.T) {
	root := t.TempDir()
	files := map[string][]byte{}
	for i := range 200 {
		files[fmt.Sprintf("part-%05d.parquet", i)] = nil
	}
	dir := badDir(t, root, "empty", files)
	ts := startPipeline(t, nil, []string{root})
	r := pipeRequest(dir, 8, 2, []int{0, 1}, transport.LastBatchPad)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, err := ts.Client.GetFlightInfo(ctx, cmdDescriptor(t, r))
	checkStatus(t, "GetFlightInfo(200 empty files)", err, codes.FailedPrecondition,
		[]string{"200 of 200 files failed to open", "part-00000.parquet", "part-00002.parquet"})
	if err != nil && len(err.Error()) > 2*transport.MaxStatusMessage {
		t.Errorf("error of %d bytes, want at most about %d", len(err.Error()), transport.MaxStatusMessage)
	}
	if strings.Contains(fmt.Sprint(err), "part-00150.parquet") {
		t.Errorf("error names every file: %.200s...", err)
	}
	_, err = stepSums(ctx, ts.Client, r, 0, nil)
	checkStatus(t, "DoGet(200 empty files)", err, codes.FailedPrecondition, []string{"200 of 200 files failed to open"})
}

var _ = flight.DescriptorCMD

// TestReservationWaitBounded: a stream whose memory does not fit beside
// the streams that hold the server's budget waits for them, for at most the
// idle timeout, then fails with ResourceExhausted (retry later) naming the
// bytes; the stream holding the budget goes on undisturbed, and once it
// ends, the same request is served.
func TestReservationWaitBounded(t *testing.T) {
	dir := writeDataset(t, pipeSpec())
	p, err := NewPipeline(context.Background(), WithCacheTTL(0),
		WithLoaderOptions(loader.WithDecodeWorkers(2)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	// Two slices: a stream reserves a little over 2 MiB; two do not fit.
	const budget = 3 << 20
	ts := startServer(t, viaTCP, p, []transport.Option{transport.WithAllowedRoots(dir), transport.WithMemoryBudget(budget),
		transport.WithIdleTimeout(500 * time.Millisecond)})
	holder := pipeRequest(dir, 8, 2, []int{0, 1}, transport.LastBatchDrop)
	holder.Epochs = 0
	hctx, hcancel := context.WithCancel(context.Background())
	defer hcancel()
	hs, err := ts.Client.DoGet(hctx, ticket(t, holder))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hs.Recv(); err != nil { // admitted and reserved
		t.Fatal(err)
	}
	read := make(chan int, 1)
	go func() { // the holder keeps reading
		n := 0
		for {
			if _, err := hs.Recv(); err != nil {
				read <- n
				return
			}
			n++
		}
	}()
	second := pipeRequest(dir, 8, 2, []int{0, 1}, transport.LastBatchDrop)
	second.Epochs = 1
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	_, err = stepSums(ctx, ts.Client, second, 0, nil)
	checkStatus(t, "DoGet(second stream)", err, codes.ResourceExhausted, []string{"memory budget of 3145728 bytes", "idle timeout", "retry later"})
	if d := time.Since(start); d < 400*time.Millisecond {
		t.Errorf("second stream refused after %v, want a wait of about the idle timeout (500ms)", d)
	}
	hcancel()
	if n := <-read; n == 0 {
		t.Error("the holding stream read no step while the second waited")
	}
	waitFor(t, "budget free", func() bool { return ts.Srv.Metrics().BudgetInUse == 0 })
	if sums, err := stepSums(ctx, ts.Client, second, 0, nil); err != nil || len(sums) == 0 {
		t.Errorf("second stream alone: %d steps, %v", len(sums), err)
	}
}
