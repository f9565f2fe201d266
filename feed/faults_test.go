package feed

// End-to-end storage fault tests: a Pipeline reading a dataset from the
// in-process GCS emulator through a fault-injecting HTTP front
// (objstoretest.FaultFront: connection resets and clean cuts after exactly N
// body bytes, 429/503/500 bursts, stalls, a connection that dies at byte 0 on
// every reopen) or through an in-process toxiproxy (latency, bandwidth), all
// over real loopback TCP. Under every transient fault an epoch's steps are
// byte-identical to a fault-free run (a SHA-256 per step) and the store counts
// its retries; a permanent outage or stall ends the stream with Unavailable
// within the retry budget.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/Shopify/toxiproxy/v2"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/meshfeed/meshfeed/internal/datagen"
	"github.com/meshfeed/meshfeed/loader"
	"github.com/meshfeed/meshfeed/objstore"
	"github.com/meshfeed/meshfeed/objstore/objstoretest"
	"github.com/meshfeed/meshfeed/transport"
)

// faultSpec is the dataset of the fault tests: 1200 rows in 2 files of
// 100-row row groups with 32 features (about 13 KB per row group), so that
// every ranged read is far longer than the byte offsets where faults cut.
func faultSpec() datagen.Spec {
	s := datagen.DefaultSpec()
	// 48 row groups, 12 per stream: reading one piece of a row group at a
	// time per slice (WithReadAhead below), the outage armed after step 3
	// always finds row groups still to read.
	s.Rows, s.Files, s.RowGroupRows, s.Features, s.Seed = 4800, 2, 100, 8, 3
	return s
}

// faultRetry is a small retry budget: 4 attempts without progress, 2 s, short
// backoff, 300 ms stall timeout.
func faultRetry() []objstore.GCSOption {
	return []objstore.GCSOption{
		objstore.WithRetryBudget(4, 2*time.Second),
		objstore.WithRetryBackoff(5*time.Millisecond, 40*time.Millisecond),
		objstore.WithStallTimeout(300 * time.Millisecond),
	}
}

// faultEnv is an emulator holding faultSpec's dataset under
// gs://bucket/train/ds.
type faultEnv struct {
	fake *objstoretest.FakeGCS
}

func newFaultEnv(t *testing.T) *faultEnv {
	t.Helper()
	fake := objstoretest.NewFakeGCS(t, "bucket")
	if _, err := datagen.Write(context.Background(), fake.Store(t), "gs://bucket/train/ds", faultSpec()); err != nil {
		t.Fatalf("datagen.Write to fake GCS: %v", err)
	}
	return &faultEnv{fake: fake}
}

// serve starts a Pipeline over a GCSStore at endpoint (footer cache off, so
// that footers too are read through the faults) and returns the server and
// the store.
func (e *faultEnv) serve(t *testing.T, endpoint string, opts ...objstore.GCSOption) (*testServer, *objstore.GCSStore) {
	t.Helper()
	store := objstoretest.NewStore(t, endpoint, opts...)
	p, err := NewPipeline(context.Background(),
		WithAllocator(checkedMem(t)),
		WithStore(store),
		WithCacheTTL(0),
		WithReadAhead(32<<10), // 8 KiB per slice: pieces of 16 rows, one at a time: reading spans the epoch
		WithLoaderOptions(loader.WithFooterCache(nil)))
	if err != nil {
		t.Fatalf("NewPipeline: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	return startServer(t, viaTCP, p, []transport.Option{transport.WithAllowedRoots("gs://bucket/train")}), store
}

// faultRequest streams one shuffled, windowed epoch of every slice.
func faultRequest() *transport.Request {
	return &transport.Request{Version: transport.Version, Datasets: []string{"gs://bucket/train/ds/*.parquet"}, GlobalBatchSize: 64,
		NumSlices: 4, Slices: []int{0, 1, 2, 3}, LastBatch: transport.LastBatchPad, Epochs: 1, Seed: 7,
		Shuffle: transport.Shuffle{Enabled: true, Window: 50}}
}

// stepSums reads a DoGet stream to its end and returns, per step, the
// SHA-256 of its app_metadata and its record serialized as Arrow IPC. after
// (if set) runs once afterN steps were received. Safe to call from any
// goroutine: problems are returned, not reported through a testing.T.
func stepSums(ctx context.Context, c flight.Client, req *transport.Request, afterN int, after func()) ([]string, error) {
	tkt, err := req.Encode()
	if err != nil {
		return nil, err
	}
	return stepSumsRaw(ctx, c, tkt, afterN, after)
}

// stepSumsRaw is stepSums for a ticket given as bytes (possibly invalid).
func stepSumsRaw(ctx context.Context, c flight.Client, tkt []byte, afterN int, after func()) ([]string, error) {
	stream, err := c.DoGet(ctx, &flight.Ticket{Ticket: tkt})
	if err != nil {
		return nil, err
	}
	rdr, err := flight.NewRecordReader(stream)
	if err != nil {
		return nil, err
	}
	defer rdr.Release()
	var sums []string
	for rdr.Next() {
		h := sha256.New()
		h.Write(rdr.LatestAppMetadata())
		w := ipc.NewWriter(h, ipc.WithSchema(rdr.Schema()), ipc.WithAllocator(memory.NewGoAllocator()))
		if err := w.Write(rdr.RecordBatch()); err != nil {
			return sums, fmt.Errorf("step %d: IPC write: %w", len(sums), err)
		}
		w.Close()
		sums = append(sums, hex.EncodeToString(h.Sum(nil)))
		if after != nil && len(sums) == afterN {
			after()
		}
	}
	if err := rdr.Err(); err != nil && err != io.EOF {
		return sums, err
	}
	return sums, nil
}

// referenceSums reads faultRequest from the emulator directly, fault-free.
func (e *faultEnv) referenceSums(t *testing.T) []string {
	t.Helper()
	ts, _ := e.serve(t, e.fake.URL)
	sums, err := stepSums(context.Background(), ts.Client, faultRequest(), 0, nil)
	if err != nil {
		t.Fatalf("fault-free run: %v", err)
	}
	spec := faultSpec()
	if want := int((spec.Rows + 63) / 64); len(sums) != want {
		t.Fatalf("fault-free run: %d steps, want %d", len(sums), want)
	}
	return sums
}

func compareSums(t *testing.T, what string, got, want []string) {
	t.Helper()
	if err := sameSums(got, want); err != nil {
		t.Fatalf("%s: %v (the fault-free run's)", what, err)
	}
}

// sameSums compares per-step checksums.
func sameSums(got, want []string) error {
	if len(got) != len(want) {
		return fmt.Errorf("%d steps, want %d", len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			return fmt.Errorf("step %d checksum %s, want %s", i, got[i][:12], want[i][:12])
		}
	}
	return nil
}

// TestFaultsTransient: under each transient fault the epoch is byte-identical
// to the fault-free run, the front injected the fault, and the store counted
// the retries (and resumes, for faults after body bytes).
func TestFaultsTransient(t *testing.T) {
	env := newFaultEnv(t)
	want := env.referenceSums(t)
	cases := []struct {
		name    string
		kind    objstoretest.FaultKind
		status  int
		at      int64
		n       int
		resumes bool // the retries resume after bytes arrived
	}{
		{"503 burst", objstoretest.FaultStatus, http.StatusServiceUnavailable, 0, 3, false},
		{"429 burst", objstoretest.FaultStatus, http.StatusTooManyRequests, 0, 3, false},
		{"500 burst", objstoretest.FaultStatus, http.StatusInternalServerError, 0, 3, false},
		{"clean cut after 1000 bytes", objstoretest.FaultCut, 0, 1000, 6, true},
		{"reset after 777 bytes", objstoretest.FaultReset, 0, 777, 6, true},
		{"reset at byte 0", objstoretest.FaultReset, 0, 0, 3, false},
		{"dies at byte 0 on 3 reopens", objstoretest.FaultCut, 0, 0, 3, false},
		{"stall after 500 bytes", objstoretest.FaultStall, 0, 500, 1, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			front := objstoretest.NewFaultFront(t, env.fake.URL)
			ts, store := env.serve(t, front.URL(), faultRetry()...)
			front.Arm(c.kind, c.status, c.at, c.n)
			got, err := stepSums(context.Background(), ts.Client, faultRequest(), 0, nil)
			if err != nil {
				t.Fatalf("DoGet under %s: %v", c.name, err)
			}
			compareSums(t, c.name, got, want)
			media, injected := front.Counts()
			st := store.Stats()
			t.Logf("%d media requests, %d faults, %d retries, %d resumes", media, injected, st.Retries.Load(), st.Resumes.Load())
			if injected != c.n {
				t.Errorf("%d faults injected, want %d", injected, c.n)
			}
			// A burst of n on one read is n retries; faults spread over reads
			// running at once are as many retries in all.
			if r := st.Retries.Load(); r < int64(c.n) {
				t.Errorf("store counted %d retries for %d injected faults", r, c.n)
			}
			if c.resumes && st.Resumes.Load() == 0 {
				t.Errorf("no resume counted after faults past byte 0")
			}
		})
	}
}

// TestFaultsPermanent: a permanent outage starting mid-epoch ends the stream
// with Unavailable naming the object, within the retry budget, never a hang;
// the steps received before it equal the fault-free run's.
func TestFaultsPermanent(t *testing.T) {
	env := newFaultEnv(t)
	want := env.referenceSums(t)
	const budget = 2 * time.Second // faultRetry's time budget
	cases := []struct {
		name   string
		kind   objstoretest.FaultKind
		status int
		at     int64
		limit  time.Duration // from the outage to the error
	}{
		{"503 forever", objstoretest.FaultStatus, http.StatusServiceUnavailable, 0, budget},
		{"dies at byte 0 on every reopen", objstoretest.FaultCut, 0, 0, budget},
		{"reset at byte 0 on every reopen", objstoretest.FaultReset, 0, 0, budget},
		{"stall forever", objstoretest.FaultStall, 0, 0, budget + 300*time.Millisecond},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			front := objstoretest.NewFaultFront(t, env.fake.URL)
			ts, store := env.serve(t, front.URL(), faultRetry()...)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var outage time.Time
			got, err := stepSums(ctx, ts.Client, faultRequest(), 3, func() {
				front.Arm(c.kind, c.status, c.at, -1)
				outage = time.Now()
			})
			el := time.Since(outage)
			t.Logf("after %d steps, %v: %v (%d retries)", len(got), el, err, store.Stats().Retries.Load())
			if status.Code(err) != codes.Unavailable {
				t.Fatalf("DoGet during %s = %v, want Unavailable", c.name, err)
			}
			msg := status.Convert(err).Message()
			if missing := containsAll(msg, "gs://bucket/train/ds/", "storage unavailable", "gave up after"); len(missing) > 0 {
				t.Errorf("message %q lacks %q", msg, missing)
			}
			// Reads in flight when the outage began and the read-ahead may
			// each spend a budget: allow two budgets plus scheduling slack.
			if el > 2*c.limit+time.Second {
				t.Errorf("Unavailable %v after the outage began, budget %v", el, c.limit)
			}
			if len(got) < 3 || len(got) >= len(want) {
				t.Fatalf("%d steps before the error, want between 3 and %d", len(got), len(want)-1)
			}
			compareSums(t, c.name+" (steps before the error)", got, want[:len(got)])
		})
	}
}

// startToxiproxy runs a toxiproxy proxy in-process on 127.0.0.1 in front of
// upstream ("host:port") with the given toxics (toxiproxy's JSON form) and
// returns its address.
func startToxiproxy(t *testing.T, upstream string, toxics ...string) string {
	t.Helper()
	zerolog.SetGlobalLevel(zerolog.Disabled) // toxics log through zerolog's global logger
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	p := toxiproxy.NewProxy(srv, "gcs", "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		t.Fatalf("toxiproxy: %v", err)
	}
	t.Cleanup(p.Stop)
	for _, tx := range toxics {
		if _, err := p.Toxics.AddToxicJson(strings.NewReader(tx)); err != nil {
			t.Fatalf("toxiproxy: add %s: %v", tx, err)
		}
	}
	return p.Listen
}

// TestFaultsToxiproxy: latency and a bandwidth limit between the loader and
// the emulator (toxiproxy, in-process) slow the epoch down but change none of
// its bytes, and need no retry.
func TestFaultsToxiproxy(t *testing.T) {
	env := newFaultEnv(t)
	want := env.referenceSums(t)
	up := strings.TrimPrefix(env.fake.URL, "http://")
	cases := []struct {
		name   string
		toxics []string
		min    time.Duration // the epoch cannot be faster than this
	}{
		{"latency 15ms", []string{
			`{"name":"lat_down","type":"latency","stream":"downstream","attributes":{"latency":15,"jitter":5}}`,
			`{"name":"lat_up","type":"latency","stream":"upstream","attributes":{"latency":15}}`,
		}, 30 * time.Millisecond},
		// The epoch reads about 300 KB; each connection is limited to
		// 200 KB/s, and at most 8 are open at once (4 slices, each reading
		// at most two row groups ahead): at least 190 ms.
		{"bandwidth 200KB/s", []string{
			`{"name":"bw","type":"bandwidth","stream":"downstream","attributes":{"rate":200}}`,
		}, 150 * time.Millisecond},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			addr := startToxiproxy(t, up, c.toxics...)
			ts, store := env.serve(t, "http://"+addr, objstore.WithRetryBudget(4, 10*time.Second), objstore.WithStallTimeout(5*time.Second))
			start := time.Now()
			got, err := stepSums(context.Background(), ts.Client, faultRequest(), 0, nil)
			el := time.Since(start)
			if err != nil {
				t.Fatalf("DoGet through toxiproxy (%s): %v", c.name, err)
			}
			compareSums(t, c.name, got, want)
			if el < c.min {
				t.Errorf("epoch took %v through %s, less than %v: the toxic was not applied", el, c.name, c.min)
			}
			if st := store.Stats(); st.Retries.Load() != 0 || st.BytesRead.Load() == 0 {
				t.Errorf("%d retries, %d bytes read; want 0 retries and some bytes", st.Retries.Load(), st.BytesRead.Load())
			}
			t.Logf("epoch in %v, %d bytes read", el, store.Stats().BytesRead.Load())
		})
	}
}
