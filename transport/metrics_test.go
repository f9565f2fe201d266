package transport

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/flight"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc/codes"
)

// scrape fetches http://<metrics address>/metrics and parses it.
func scrape(t *testing.T, srv *Server) map[string]*dto.MetricFamily {
	t.Helper()
	waitFor(t, "metrics address", func() bool { return srv.MetricsAddr() != nil })
	res, err := http.Get("http://" + srv.MetricsAddr().String() + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("GET /metrics = %s, Content-Type %q; want 200 text/plain", res.Status, res.Header.Get("Content-Type"))
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(res.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return fams
}

// metricValue returns the value of the sample of family name whose labels
// are labels (name, value pairs): a counter's or gauge's value, a histogram's
// sample count. ok is false when there is no such sample.
func metricValue(fams map[string]*dto.MetricFamily, name string, labels ...string) (v float64, ok bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
next:
	for _, m := range f.GetMetric() {
		if len(m.GetLabel())*2 != len(labels) {
			continue
		}
		for i, l := range m.GetLabel() {
			if l.GetName() != labels[2*i] || l.GetValue() != labels[2*i+1] {
				continue next
			}
		}
		switch f.GetType() {
		case dto.MetricType_COUNTER:
			return m.GetCounter().GetValue(), true
		case dto.MetricType_GAUGE:
			return m.GetGauge().GetValue(), true
		case dto.MetricType_HISTOGRAM:
			return float64(m.GetHistogram().GetSampleCount()), true
		}
	}
	return 0, false
}

// wantMetrics checks unlabelled samples against want (name -> value).
func wantMetrics(t *testing.T, fams map[string]*dto.MetricFamily, want map[string]float64) {
	t.Helper()
	for name, w := range want {
		checkMetric(t, fams, w, name)
	}
}

func checkMetric(t *testing.T, fams map[string]*dto.MetricFamily, want float64, name string, labels ...string) {
	t.Helper()
	got, ok := metricValue(fams, name, labels...)
	if !ok || got != want {
		t.Errorf("metric %s%v = %v (present %v), want %v", name, labels, got, ok, want)
	}
}

// received is what a client counted on one DoGet stream.
type received struct{ steps, rows int64 }

// sizing wraps a Backend and adds up the buffer bytes of the records its
// streams return (the client cannot: the IPC writer leaves out validity
// bitmaps of columns without nulls).
type sizing struct {
	Backend
	bytes atomic.Int64
	stats *StorageStats
}

// StorageStats passes on the backend's storage counters, or the fixed ones
// of stats when set; false when there are none (the server then serves no
// meshfeed_storage_* metrics).
func (b *sizing) StorageStats() (StorageStats, bool) {
	if b.stats != nil {
		return *b.stats, true
	}
	if r, ok := b.Backend.(StatsReporter); ok {
		return r.StorageStats()
	}
	return StorageStats{}, false
}

func (b *sizing) Open(ctx context.Context, req *Request) (Stream, error) {
	st, err := b.Backend.Open(ctx, req)
	if err != nil {
		return nil, err
	}
	return &sizedStream{Stream: st, b: b}, nil
}

type sizedStream struct {
	Stream
	b *sizing
}

func (s *sizedStream) Next(ctx context.Context) (Step, error) {
	step, err := s.Stream.Next(ctx)
	if err == nil {
		for _, rec := range step.Slices {
			s.b.bytes.Add(recordBytes(rec))
		}
	}
	return step, err
}

// drain reads a DoGet stream to its end, counting steps and rows.
func drain(ctx context.Context, c flight.Client, req *Request) (received, error) {
	var n received
	tkt, err := req.Encode()
	if err != nil {
		return n, err
	}
	stream, err := c.DoGet(ctx, &flight.Ticket{Ticket: tkt})
	if err != nil {
		return n, err
	}
	rdr, err := flight.NewRecordReader(stream)
	if err != nil {
		return n, err
	}
	defer rdr.Release()
	for rdr.Next() {
		n.steps++
		n.rows += rdr.RecordBatch().NumRows()
	}
	if err := rdr.Err(); err != nil && !errors.Is(err, io.EOF) {
		return n, err
	}
	return n, nil
}

// TestPrometheusDemo: /metrics over HTTP counts exactly what a client of the
// demo backend received, and a refused request by its code.
func TestPrometheusDemo(t *testing.T) {
	be := &sizing{Backend: &DemoBackend{NumRows: 10}}
	ts := startServer(t, viaTCP, be, []Option{WithMetricsAddress("127.0.0.1:0")})
	ctx := context.Background()

	fams := scrape(t, ts.srv)
	wantMetrics(t, fams, map[string]float64{
		"meshfeed_sent_steps_total": 0, "meshfeed_sent_rows_total": 0, "meshfeed_streams_total": 0,
		"meshfeed_step_send_seconds": 0,
	})
	if _, ok := fams["meshfeed_storage_read_bytes_total"]; ok {
		t.Errorf("meshfeed_storage_read_bytes_total is served for the demo backend, which reads no storage")
	}

	// N=10, B=4, pad: ceil(10/4) = 3 steps of 4 rows.
	got, err := drain(ctx, ts.client, baseRequest())
	if err != nil || got.steps != 3 || got.rows != 12 {
		t.Fatalf("DoGet = %+v, %v; want 3 steps, 12 rows", got, err)
	}
	bad := baseRequest()
	bad.Columns = []Column{{Name: "nope"}}
	_, err = drain(ctx, ts.client, bad)
	checkStatus(t, "DoGet(column nope)", err, codes.InvalidArgument, []string{`"nope"`})

	waitFor(t, "streams closed", func() bool { return ts.srv.Metrics().StreamsActive == 0 })
	fams = scrape(t, ts.srv)
	wantMetrics(t, fams, map[string]float64{
		"meshfeed_sent_steps_total": float64(got.steps),
		"meshfeed_sent_rows_total":  float64(got.rows),
		"meshfeed_sent_bytes_total": float64(be.bytes.Load()),
		// The refused stream was opened too (the backend refused it).
		"meshfeed_streams_total":              2,
		"meshfeed_streams_active":             0,
		"meshfeed_queue_steps":                0,
		"meshfeed_memory_budget_in_use_bytes": 0,
		// One observation per step sent.
		"meshfeed_step_send_seconds": float64(got.steps),
		"meshfeed_step_wait_seconds": float64(got.steps),
	})
	checkMetric(t, fams, 1, "meshfeed_errors_total", "code", "InvalidArgument")
	if _, ok := metricValue(fams, "meshfeed_errors_total", "code", "NotFound"); ok {
		t.Errorf("meshfeed_errors_total{code=\"NotFound\"} is served, but no call failed with NotFound")
	}
	for _, f := range fams {
		if strings.HasPrefix(f.GetName(), "meshfeed_") && f.GetHelp() == "" {
			t.Errorf("metric %s has no help text", f.GetName())
		}
	}
	if _, ok := fams["go_goroutines"]; !ok {
		t.Errorf("go_goroutines is not served")
	}
}

// TestPrometheusStorage: the storage counters a backend reports are served
// as meshfeed_storage_*, as they are at scrape time (package feed checks that
// its Pipeline reports its store's).
func TestPrometheusStorage(t *testing.T) {
	stats := &StorageStats{}
	be := &sizing{Backend: &DemoBackend{NumRows: 100}, stats: stats}
	ts := startServer(t, viaTCP, be, []Option{WithMetricsAddress("127.0.0.1:0")})
	wantMetrics(t, scrape(t, ts.srv), map[string]float64{"meshfeed_storage_read_bytes_total": 0, "meshfeed_storage_retries_total": 0})
	*stats = StorageStats{BytesRead: 12345, Reads: 7, Retries: 2, Resumes: 1,
		CacheHits: 11, CacheMisses: 5, CacheBytesSaved: 4096, CacheEvictions: 3, CacheCorrupt: 2, CacheWriteErrors: 1}
	wantMetrics(t, scrape(t, ts.srv), map[string]float64{
		"meshfeed_storage_read_bytes_total":         12345,
		"meshfeed_storage_reads_total":              7,
		"meshfeed_storage_retries_total":            2,
		"meshfeed_storage_resumes_total":            1,
		"meshfeed_storage_cache_hits_total":         11,
		"meshfeed_storage_cache_misses_total":       5,
		"meshfeed_storage_cache_saved_bytes_total":  4096,
		"meshfeed_storage_cache_evictions_total":    3,
		"meshfeed_storage_cache_corrupt_total":      2,
		"meshfeed_storage_cache_write_errors_total": 1,
	})
	// The JSON snapshot carries the same counters.
	if got := ts.srv.Metrics().Storage; got == nil || *got != *stats {
		t.Errorf("Metrics().Storage = %+v, want %+v", got, *stats)
	}
	if _, ok := scrape(t, startServer(t, viaTCP, &DemoBackend{NumRows: 100}, []Option{WithMetricsAddress("127.0.0.1:0")}).srv)["meshfeed_storage_read_bytes_total"]; ok {
		t.Errorf("meshfeed_storage_read_bytes_total is served for a backend that reports no storage counters")
	}
}

// TestQueueDepthGauge: while the client is stuck, the gauge counts every step
// read from the backend and not yet sent (the one in Send, the prefetched
// ones, and the one waiting for room in the queue), but not a step still
// waiting for memory budget; it returns to 0 when the stream ends.
func TestQueueDepthGauge(t *testing.T) {
	req := baseRequest()
	req.Epochs = 0
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
	probe.Close()

	for _, tc := range []struct {
		name      string
		prefetch  int
		budget    int64
		wantNexts int64
		wantQueue int64
	}{
		{"prefetch 2", 2, 0, 4, 4},
		// The third step read waits for budget: it is not queued.
		{"budget of 2 steps", 10, 2 * size, 3, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tb := &tracking{Backend: &DemoBackend{NumRows: 1000}}
			s, cancel, done := streamToStuckClient(t, tb, req, tc.prefetch, tc.budget)
			waitFor(t, "producer to stall", func() bool { return tb.nexts.Load() >= tc.wantNexts })
			time.Sleep(50 * time.Millisecond)
			if got := s.Metrics().QueuedSteps; got != tc.wantQueue {
				t.Errorf("queued steps while stuck = %d, want %d", got, tc.wantQueue)
			}
			cancel()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("stream did not return after cancel")
			}
			if got := s.Metrics().QueuedSteps; got != 0 {
				t.Errorf("queued steps after the stream = %d, want 0", got)
			}
		})
	}
}
