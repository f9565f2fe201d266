package feed

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/flight"

	"github.com/meshfeed/meshfeed/internal/datagen"
	"github.com/meshfeed/meshfeed/loader"
	"github.com/meshfeed/meshfeed/objstore"
	"github.com/meshfeed/meshfeed/transport"
)

// concatDataset writes a dataset whose steps are virtual concatenations:
// 64 features (256 bytes a row, so each slice's features are borrowed by
// gRPC), row groups that slices straddle.
func concatDataset(t *testing.T) (datagen.Spec, string) {
	spec := datagen.DefaultSpec()
	spec.Rows, spec.Files, spec.RowGroupRows, spec.Features, spec.Seed = 5000, 2, 700, 64, 9
	return spec, writeDataset(t, spec)
}

// TestPipelineVirtualConcat streams a pipeline with several slices per step
// (mask of b%8 == 0 rows under pad) through the zero-copy writer and checks
// every step against the same stream with the slices concatenated, and
// against the stock (zstd) writer; every record is freed afterwards.
func TestPipelineVirtualConcat(t *testing.T) {
	spec, dir := concatDataset(t)
	for _, policy := range []transport.LastBatch{transport.LastBatchDrop, transport.LastBatchPad} {
		for _, sh := range []transport.Shuffle{{}, {Enabled: true, Window: 300}} {
			t.Run(fmt.Sprintf("%s/window=%d", policy, sh.Window), func(t *testing.T) {
				mem := checkedMem(t)
				ts := startPipeline(t, mem, []string{dir})
				zmem := checkedMem(t)
				p, err := NewPipeline(context.Background(), WithAllocator(zmem))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { p.Close() })
				zs := startServer(t, viaBufconn, p, []transport.Option{transport.WithAllowedRoots(dir), transport.WithZstd(true)})
				req := pipeRequest(dir, 1024, 4, []int{0, 1, 2, 3}, policy) // b = 256
				req.Shuffle = sh
				before := multiFrames()
				virtual, err := readSteps(t, context.Background(), ts.Client, req, true)
				if err != nil {
					t.Fatal(err)
				}
				sent := multiFrames() - before
				restore := transport.ForceConcat(true)
				built, err := readSteps(t, context.Background(), ts.Client, req, true)
				restore()
				if err != nil {
					t.Fatal(err)
				}
				stock, err := readSteps(t, context.Background(), zs.Client, req, true)
				if err != nil {
					t.Fatal(err)
				}
				wantSteps := 2 * int(spec.Rows/1024)
				if policy == transport.LastBatchPad {
					wantSteps = 2 * int((spec.Rows+1023)/1024)
				}
				if len(virtual) != wantSteps || len(built) != wantSteps || len(stock) != wantSteps {
					t.Fatalf("%d, %d and %d steps (virtual, concatenated, stock writer), want %d", len(virtual), len(built), len(stock), wantSteps)
				}
				if sent != int64(wantSteps) {
					t.Errorf("%d of %d steps sent as virtual concatenations", sent, wantSteps)
				}
				for i := range virtual {
					if !array.RecordEqual(virtual[i].rec, built[i].rec) || !array.RecordEqual(stock[i].rec, built[i].rec) {
						t.Fatalf("step %d differs between the virtual, the built concatenation and the stock writer", i)
					}
					if fmt.Sprint(virtual[i].meta) != fmt.Sprint(built[i].meta) {
						t.Fatalf("step %d: meta %+v, want %+v", i, virtual[i].meta, built[i].meta)
					}
					for r, id := range virtual[i].ids {
						if virtual[i].mask == nil || virtual[i].mask[r] {
							checkRow(t, spec, virtual[i], r, id)
						}
					}
				}
				waitFor(t, "records freed", func() bool { return mem.CurrentAlloc() == 0 && zmem.CurrentAlloc() == 0 })
				waitFor(t, "budget released", func() bool { return ts.Srv.Metrics().BudgetInUse == 0 })
			})
		}
	}
}

// TestPipelineVirtualConcatCancel cancels a client that stopped reading
// while gRPC holds virtual steps it has not written: the slices, and the
// row groups they view, are freed when gRPC drops them.
func TestPipelineVirtualConcatCancel(t *testing.T) {
	_, dir := concatDataset(t)
	mem := checkedMem(t)
	p, err := NewPipeline(context.Background(), WithAllocator(mem),
		WithLoaderOptions(loader.WithReadAhead(1<<20), loader.WithDecodeWorkers(2)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	tb := &tracking{Backend: p}
	ts := startServer(t, viaUnix, tb, []transport.Option{transport.WithAllowedRoots(dir), transport.WithPrefetch(4)})
	req := pipeRequest(dir, 2048, 4, []int{0, 1, 2, 3}, transport.LastBatchPad)
	req.Epochs = 0 // unbounded
	if _, err := ts.Client.GetFlightInfo(context.Background(), cmdDescriptor(t, req)); err != nil {
		t.Fatal(err)
	}
	base := runtimeNumGoroutine()
	before := multiFrames()
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := ts.Client.DoGet(ctx, ticket(t, req))
	if err != nil {
		t.Fatal(err)
	}
	rdr, err := flight.NewRecordReader(stream)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if !rdr.Next() {
			t.Fatalf("stream ended at step %d: %v", i, rdr.Err())
		}
	}
	waitFor(t, "server blocked on the client", func() bool { return tb.nexts.Load() >= 8 })
	if multiFrames() == before {
		t.Error("no step sent as a virtual concatenation")
	}
	if mem.CurrentAlloc() == 0 {
		t.Fatal("no record held while the stream is blocked")
	}
	cancel()
	for rdr.Next() {
	}
	rdr.Release()
	waitFor(t, "stream closed", func() bool { return tb.closed.Load() == 1 })
	waitFor(t, "records freed", func() bool { return mem.CurrentAlloc() == 0 })
	waitFor(t, "budget released", func() bool { return ts.Srv.Metrics().BudgetInUse == 0 })
	checkGoroutines(t, base, 0)
}

// failFile is an objstore.Store whose reads of the data (not the footer) of
// the objects whose URI contains name fail.
type failFile struct {
	objstore.Store
	name string
}

var errInjected = errors.New("injected read failure")

func (s *failFile) ReadAt(ctx context.Context, obj objstore.Object, p []byte, off int64) error {
	if strings.Contains(obj.URI, s.name) && off < obj.Size/2 {
		return errInjected
	}
	return s.Store.ReadAt(ctx, obj, p, off)
}

// TestPipelineSliceErrorReleases: when one slice of a step fails (its
// file's reads fail) after others were cut, Next returns that slice's error
// and every slice cut is released.
func TestPipelineSliceErrorReleases(t *testing.T) {
	_, dir := concatDataset(t)
	files, err := filepath.Glob(dir + "/*.parquet")
	if err != nil || len(files) != 2 {
		t.Fatalf("dataset files %v, %v; want 2", files, err)
	}
	mem := checkedMem(t)
	store, err := objstore.NewStore(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	p, err := NewPipeline(context.Background(), WithAllocator(mem),
		WithStore(&failFile{Store: store, name: filepath.Base(files[1])}))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	// Streams 0 and 1 read the first file, 2 and 3 the second.
	st, err := p.Open(context.Background(), pipeRequest(dir, 1024, 4, []int{0, 1, 2, 3}, transport.LastBatchDrop))
	if err != nil {
		t.Fatal(err)
	}
	step, err := st.Next(context.Background())
	step.Release()
	if !errors.Is(err, errInjected) || !strings.Contains(err.Error(), "step 0 slice 2") {
		t.Errorf("Next = %v, want the injected failure of step 0 slice 2", err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the pipeline's allocator to be empty", func() bool { return mem.CurrentAlloc() == 0 })
}
