package transport

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow/flight"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestDecodeRequestBounds: every size a ticket names past its bound is
// refused by the decoder, before anything is planned or allocated, with
// InvalidArgument and the numbers.
func TestDecodeRequestBounds(t *testing.T) {
	for _, c := range []struct {
		name string
		mut  func(r *Request)
		want []string
	}{
		{"B 2^40 and D 2^40", func(r *Request) { r.GlobalBatchSize, r.NumSlices = 1<<40, 1<<40 },
			[]string{"global_batch_size 1099511627776 is over the limit of 2147483647", "num_slices 1099511627776 is over the limit of 65536"}},
		{"B 2^62 (a pad batch)", func(r *Request) { r.GlobalBatchSize = 1 << 62 }, []string{"global_batch_size 4611686018427387904", "2147483647"}},
		{"D 2^26", func(r *Request) { r.GlobalBatchSize, r.NumSlices = 1<<26, 1<<26 }, []string{"num_slices 67108864 is over the limit of 65536"}},
		{"elastic from 2^40", func(r *Request) {
			r.GlobalBatchSize = 1 << 40
			r.Elastic = &Elastic{FromSlices: 1 << 40}
		}, []string{"elastic.from_slices 1099511627776 is over the limit of 65536"}},
		{"length 2^40", func(r *Request) { r.Columns = []Column{{Name: "x", Length: 1 << 40}} }, []string{`"x": length 1099511627776 is over the limit of 2147483647`}},
		{"pack_ratio 1e300", func(r *Request) { r.Columns = []Column{{Name: "x", Length: 8, PackRatio: 1e300}} }, []string{`"x": pack_ratio 1e+300 is over the limit`}},
		{"window 2^40", func(r *Request) { r.Shuffle = Shuffle{Enabled: true, Window: 1 << 40} }, []string{"shuffle.window 1099511627776 is over the limit of 2147483647"}},
	} {
		r := baseRequest()
		c.mut(r)
		raw, err := r.Encode()
		if err != nil {
			t.Fatal(err)
		}
		_, err = DecodeRequest(raw)
		if !errors.Is(err, ErrBadRequest) {
			t.Errorf("%s: DecodeRequest = %v, want ErrBadRequest", c.name, err)
			continue
		}
		if miss := containsAll(err.Error(), c.want...); len(miss) > 0 {
			t.Errorf("%s: DecodeRequest = %v, missing %q", c.name, err, miss)
		}
	}
	// At the bounds: accepted.
	r := baseRequest()
	r.GlobalBatchSize, r.NumSlices, r.Slices = MaxNumSlices, MaxNumSlices, []int{0}
	raw, _ := r.Encode()
	if _, err := DecodeRequest(raw); err != nil {
		t.Errorf("DecodeRequest(num_slices %d) = %v, want ok", MaxNumSlices, err)
	}
}

// TestCapMessage: a long message keeps its head and tail and says what was
// cut, on UTF-8 boundaries; a short one is unchanged.
func TestCapMessage(t *testing.T) {
	for _, c := range []struct {
		msg  string
		want []string
	}{
		{"short", []string{"short"}},
		{strings.Repeat("a", 10000) + "END", []string{"aaaa", "bytes cut from this message of 10003", "END"}},
		{strings.Repeat("é", 5000), []string{"é", "bytes cut from this message of 10000"}},
	} {
		got := capMessage(c.msg, 1024)
		if len(got) > 1024 {
			t.Errorf("capMessage(%d bytes) = %d bytes, want <= 1024", len(c.msg), len(got))
		}
		if !utf8.ValidString(got) {
			t.Errorf("capMessage(%d bytes) is not valid UTF-8", len(c.msg))
		}
		if miss := containsAll(got, c.want...); len(miss) > 0 {
			t.Errorf("capMessage(%d bytes) = %.80q..., missing %q", len(c.msg), got, miss)
		}
	}
}

// longErrorBackend fails every call with an error of n bytes naming
// files, as a dataset of many bad files would.
type longErrorBackend struct{ n int }

func (b longErrorBackend) err() error {
	var sb strings.Builder
	for i := 0; sb.Len() < b.n; i++ {
		fmt.Fprintf(&sb, "/data/bad/ünïcode-%06d.parquet: empty file; ", i)
	}
	return fmt.Errorf("%w: %s", ErrFailedPrecondition, sb.String())
}
func (b longErrorBackend) Info(context.Context, *Request) (*PlanInfo, error) { return nil, b.err() }
func (b longErrorBackend) Open(context.Context, *Request) (Stream, error)    { return nil, b.err() }

// TestLongErrorMessageCapped: an error of 13 MB reaches the client as its
// own status code (not a transport error about metadata size or a reset
// stream), capped to MaxStatusMessage bytes with a note of the cut, and
// the server goes on serving.
func TestLongErrorMessageCapped(t *testing.T) {
	ts := startServer(t, viaTCP, longErrorBackend{n: 13 << 20}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range 3 {
		_, err := ts.client.GetFlightInfo(ctx, &flight.FlightDescriptor{Type: flight.DescriptorCMD, Cmd: mustEncode(t, baseRequest())})
		st, _ := status.FromError(err)
		if st.Code() != codes.FailedPrecondition || len(st.Message()) > MaxStatusMessage || !strings.Contains(st.Message(), "bytes cut from this message") {
			t.Fatalf("GetFlightInfo #%d = %v (%d bytes), want FailedPrecondition of at most %d bytes noting the cut", i, st.Code(), len(st.Message()), MaxStatusMessage)
		}
		stream, err := ts.client.DoGet(ctx, ticket(t, baseRequest()))
		if err == nil {
			_, err = stream.Recv()
		}
		if st, _ := status.FromError(err); st.Code() != codes.FailedPrecondition || len(st.Message()) > MaxStatusMessage {
			t.Fatalf("DoGet #%d = %v (%d bytes), want FailedPrecondition of at most %d bytes", i, st.Code(), len(st.Message()), MaxStatusMessage)
		}
	}
}

// TestIdleTimeoutFreesSlot: a stream whose client never reads holds its
// slot only until the idle timeout: with one stream slot, a second client
// is refused while the first holds it, then served; the idle client finds
// its stream ended with Unavailable; the memory budget is all returned.
func TestIdleTimeoutFreesSlot(t *testing.T) {
	ts := startServer(t, viaTCP, &DemoBackend{NumRows: 1 << 30}, []Option{WithMaxStreams(1), WithIdleTimeout(300 * time.Millisecond)})
	big := baseRequest()
	big.GlobalBatchSize, big.NumSlices, big.Slices, big.Epochs = 1<<17, 1, []int{0}, 0 // ~3 MB steps, unbounded
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	idle, err := ts.client.DoGet(ctx, ticket(t, big))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := idle.Header(); err != nil { // the stream is admitted; now never read
		t.Fatal(err)
	}
	small := baseRequest()
	small.Start.Step = 1<<30/small.GlobalBatchSize - 2 // the epoch's last two steps
	refused, served := 0, false
	for !served && ctx.Err() == nil {
		_, _, err := readAll(t, ctx, ts.client, ticket(t, small))
		switch status.Code(err) {
		case codes.OK:
			served = true
		case codes.ResourceExhausted:
			refused++
			time.Sleep(50 * time.Millisecond)
		default:
			t.Fatalf("second client after %d refusals, %v active: %v", refused, ts.srv.Metrics().StreamsActive, err)
		}
	}
	if !served || refused == 0 {
		t.Fatalf("second client: served %v after %d refusals; want refusals while the idle stream holds the slot, then service", served, refused)
	}
	var last error
	for last == nil {
		_, last = idle.Recv()
	}
	if status.Code(last) != codes.Unavailable || !strings.Contains(last.Error(), "idle timeout") {
		t.Errorf("idle stream ended with %v, want Unavailable naming the idle timeout", last)
	}
	waitFor(t, "budget returned", func() bool { return ts.srv.Metrics().BudgetInUse == 0 && ts.srv.Metrics().StreamsActive == 0 })
}

// TestShmBadReleaseEndsConnection: a release of a slot the client does
// not hold (twice the same, or one never sent) ends that connection with
// InvalidArgument naming the slot; every region and the arena of the
// connection are unmapped after it, and the server serves the next client.
func TestShmBadReleaseEndsConnection(t *testing.T) {
	ts, path := startShm(t, &DemoBackend{NumRows: 100000})
	base := shmMappings(t)
	req := baseRequest()
	req.GlobalBatchSize, req.NumSlices, req.Slices, req.Epochs = 4096, 1, []int{0}, 1
	raw, _ := req.Encode()
	for _, bad := range []struct {
		name    string
		release func(c *shmClient, st *shmStep)
	}{
		{"twice", func(c *shmClient, st *shmStep) { c.release(st); c.release(st) }},
		{"never sent", func(c *shmClient, st *shmStep) { c.send(map[string]int{"release": st.Slot + 1, "region": st.Region}) }},
		{"unknown region", func(c *shmClient, st *shmStep) { c.send(map[string]int{"release": 0, "region": 99}) }},
		{"ack past sent", func(c *shmClient, st *shmStep) { c.send(map[string]int{"ack": 1000}) }},
	} {
		c := dialShm(t, path, shmHello{Version: ShmVersion, Ticket: raw, Slots: 2})
		var got *shmError
		for got == nil {
			f, err := c.frame()
			if err != nil {
				t.Fatalf("%s: connection ended without an error frame: %v", bad.name, err)
			}
			if f.Step != nil {
				c.ack()
				bad.release(c, f.Step)
			}
			if f.End {
				t.Fatalf("%s: stream ended without an error", bad.name)
			}
			got = f.Error
		}
		if got.Code != "INVALID_ARGUMENT" || !strings.Contains(got.Message, "protocol violation") {
			t.Errorf("%s: error %+v, want INVALID_ARGUMENT, protocol violation", bad.name, got)
		}
		c.close()
		waitFor(t, bad.name+": regions and arena unmapped", func() bool { return shmMappings(t) == base })
	}
	good := dialShm(t, path, shmHello{Version: ShmVersion, Ticket: raw, Slots: 2})
	steps := 0
	good.each(nil, func(st *shmStep) { steps++; good.ack(); good.release(st) })
	if steps == 0 {
		t.Error("the next client got no step")
	}
	waitFor(t, "budget returned", func() bool { return ts.srv.Metrics().BudgetInUse == 0 })
}

// TestShmHoldingClientBounded: a client that acknowledges every step but
// releases none gets regions only within its share of the memory budget,
// then waits (backpressure), and after the idle timeout its stream ends
// with Unavailable; its regions are unmapped and its bytes returned.
func TestShmHoldingClientBounded(t *testing.T) {
	const budget = 8 << 20
	ts, path := startShm(t, &DemoBackend{NumRows: 1 << 30},
		WithMemoryBudget(budget), WithMaxStreams(1), WithIdleTimeout(500*time.Millisecond), WithShmArena(0))
	base := shmMappings(t)
	req := baseRequest()
	req.GlobalBatchSize, req.NumSlices, req.Slices, req.Epochs = 40000, 1, []int{0}, 0 // ~1 MB steps, unbounded
	raw, _ := req.Encode()
	c := dialShm(t, path, shmHello{Version: ShmVersion, Ticket: raw, Slots: 2})
	regions, steps := 0, 0
	var regionBytes int64
	var got *shmError
	for got == nil {
		f, err := c.frame()
		if err != nil {
			t.Fatalf("connection ended without an error frame after %d steps: %v", steps, err)
		}
		if f.Region != nil {
			regions++
			regionBytes += f.Region.Bytes
		}
		if f.Step != nil {
			steps++
			c.ack()
		}
		got = f.Error
	}
	if got.Code != "UNAVAILABLE" || !strings.Contains(got.Message, "idle timeout") {
		t.Errorf("error %+v, want UNAVAILABLE naming the idle timeout", got)
	}
	if regionBytes > budget || regions > 4 {
		t.Errorf("%d regions of %d bytes in all for a client holding %d steps, want at most the budget of %d", regions, regionBytes, steps, budget)
	}
	c.close()
	waitFor(t, "regions unmapped, budget returned", func() bool {
		return shmMappings(t) == base && ts.srv.Metrics().BudgetInUse == 0
	})
}
