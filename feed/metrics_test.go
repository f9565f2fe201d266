package feed

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/meshfeed/meshfeed/loader"
	"github.com/meshfeed/meshfeed/objstore"
	"github.com/meshfeed/meshfeed/transport"
)

// countingStore counts the bytes of the reads it passes to a LocalStore, and
// reports the LocalStore's own counters.
type countingStore struct {
	*objstore.LocalStore
	n atomic.Int64
}

func (s *countingStore) ReadAt(ctx context.Context, obj objstore.Object, p []byte, off int64) error {
	err := s.LocalStore.ReadAt(ctx, obj, p, off)
	if err == nil {
		s.n.Add(int64(len(p)))
	}
	return err
}

// scrapeStorage reads the meshfeed_storage_* counters from a server's
// /metrics, as text.
func scrapeStorage(t *testing.T, ts *testServer) map[string]float64 {
	t.Helper()
	waitFor(t, "the metrics endpoint", func() bool { return ts.Srv.MetricsAddr() != nil })
	resp, err := http.Get(fmt.Sprintf("http://%s/metrics", ts.Srv.MetricsAddr()))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		name, v, ok := strings.Cut(sc.Text(), " ")
		if !ok || !strings.HasPrefix(name, "meshfeed_storage_") {
			continue
		}
		if out[name], err = strconv.ParseFloat(v, 64); err != nil {
			t.Fatalf("%q: %v", sc.Text(), err)
		}
	}
	return out
}

// TestPrometheusPipeline: over the pipeline backend, the server's
// meshfeed_storage_* metrics count the bytes the store read (at least the
// data of every row group, exactly what the store was asked for) and the
// store's retries and resumes; a missing dataset is NotFound.
func TestPrometheusPipeline(t *testing.T) {
	spec := pipeSpec()
	spec.Rows = 105 // 7 steps of B=15, every row group read
	dir := writeDataset(t, spec)
	store := &countingStore{LocalStore: objstore.NewLocalStore()}
	p, err := NewPipeline(context.Background(), WithStore(store),
		WithLoaderOptions(loader.WithReadAhead(4<<10), loader.WithDecodeWorkers(2)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	ts := startServer(t, viaTCP, p, []transport.Option{transport.WithAllowedRoots(dir), transport.WithMetricsAddress("127.0.0.1:0")})
	ctx := context.Background()
	if got := scrapeStorage(t, ts); got["meshfeed_storage_read_bytes_total"] != 0 || got["meshfeed_storage_retries_total"] != 0 {
		t.Errorf("before any stream: %v, want zeros", got)
	}
	req := pipeRequest(dir, 15, 1, []int{0}, transport.LastBatchDrop)
	req.Epochs = 1
	steps, err := readSteps(t, ctx, ts.Client, req, false)
	if err != nil || len(steps) != 7 {
		t.Fatalf("DoGet = %d steps, %v; want 7", len(steps), err)
	}
	missing := pipeRequest(dir, 15, 1, []int{0}, transport.LastBatchDrop)
	missing.Datasets = []string{dir + "/nothing-*.parquet"}
	_, err = readSteps(t, ctx, ts.Client, missing, false)
	checkStatus(t, "DoGet(missing)", err, codes.NotFound, []string{"nothing-*.parquet"})
	store.Stats().Retries.Add(2)
	store.Stats().Resumes.Add(1)

	ds, err := loader.Open(ctx, objstore.NewLocalStore(), []string{dir + "/*.parquet"})
	if err != nil {
		t.Fatal(err)
	}
	var data int64
	for _, r := range ds.RowGroups() {
		data += r.Bytes
	}
	waitFor(t, "streams closed", func() bool { return ts.Srv.Metrics().StreamsActive == 0 })
	got := scrapeStorage(t, ts)
	if got["meshfeed_storage_read_bytes_total"] != float64(store.n.Load()) || got["meshfeed_storage_retries_total"] != 2 ||
		got["meshfeed_storage_resumes_total"] != 1 {
		t.Errorf("storage metrics %v, want read bytes %d (what the store served), retries 2, resumes 1", got, store.n.Load())
	}
	if got["meshfeed_storage_read_bytes_total"] < float64(data) {
		t.Errorf("meshfeed_storage_read_bytes_total = %v, want >= %d (the row groups' column chunks)", got["meshfeed_storage_read_bytes_total"], data)
	}
}
