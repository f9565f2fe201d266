package feed

import (
	"context"
	"net/http"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/meshfeed/meshfeed/internal/datagen"
	"github.com/meshfeed/meshfeed/loader"
	"github.com/meshfeed/meshfeed/objstore"
	"github.com/meshfeed/meshfeed/objstore/objstoretest"
	"github.com/meshfeed/meshfeed/transport"
)

// TestPipelineAzureMatchesLocal: the same dataset written to a local
// directory and to Azurite, read through az://, abfs:// and the local path by
// one server (its Mux routing each scheme), gives byte-identical steps (a
// SHA-256 per step of app_metadata and record); az:// URIs outside the
// allowed roots are refused.
func TestPipelineAzureMatchesLocal(t *testing.T) {
	ctx := context.Background()
	az := objstoretest.StartAzurite(t)
	c := az.Container(t)
	spec := faultSpec()
	dir := writeDataset(t, spec)
	if _, err := datagen.Write(ctx, az.Store(t), "az://"+c+"/train/ds", spec); err != nil {
		t.Fatalf("datagen.Write to Azurite: %v", err)
	}
	store, err := objstore.NewStore(ctx, objstore.WithAzureOptions(
		objstore.WithAzureEndpoint(az.URL), objstore.WithAzureSharedKey(objstoretest.AzuriteAccount, objstoretest.AzuriteKey)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	p, err := NewPipeline(ctx, WithAllocator(checkedMem(t)), WithStore(store))
	if err != nil {
		t.Fatalf("NewPipeline: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	ts := startServer(t, viaTCP, p, []transport.Option{transport.WithAllowedRoots(dir, "az://"+c+"/train")})

	sums := func(dataset string) []string {
		t.Helper()
		req := faultRequest()
		req.Datasets = []string{dataset}
		s, err := stepSums(ctx, ts.Client, req, 0, nil)
		if err != nil {
			t.Fatalf("%s: %v", dataset, err)
		}
		return s
	}
	want := sums(dir + "/*.parquet")
	if n := int((spec.Rows + 63) / 64); len(want) != n {
		t.Fatalf("local: %d steps, want %d", len(want), n)
	}
	compareSums(t, "az://", sums("az://"+c+"/train/ds/*.parquet"), want)
	compareSums(t, "abfs://", sums("abfs://"+c+"/train/ds"), want)
	if st := store.Stats(); st.Reads.Load() == 0 || st.BytesRead.Load() == 0 {
		t.Errorf("store stats: %d reads, %d bytes; want the Azure reads counted", st.Reads.Load(), st.BytesRead.Load())
	}

	for _, outside := range []string{
		"az://" + c + "/secret/*.parquet",
		"az://" + c + "/train/../secret/x.parquet",
		"az://other/train/ds/*.parquet",
		"abfs://" + c + "@" + objstoretest.AzuriteAccount + ".dfs.core.windows.net/train/ds/*.parquet",
	} {
		req := faultRequest()
		req.Datasets = []string{outside}
		_, err := ts.Client.GetFlightInfo(ctx, cmdDescriptor(t, req))
		checkStatus(t, "GetFlightInfo("+outside+")", err, codes.PermissionDenied, []string{outside})
	}
	req := faultRequest()
	req.Datasets = []string{"az://" + c + "/train/none/*.parquet"}
	_, err = ts.Client.GetFlightInfo(ctx, cmdDescriptor(t, req))
	checkStatus(t, "GetFlightInfo(missing az:// glob)", err, codes.NotFound, []string{"az://" + c + "/train/none"})
}

// TestFaultsAzure: the fault rows of TestFaultsTransient and
// TestFaultsPermanent through az://, with a FaultFront between the loader and
// Azurite: transient faults leave the epoch byte-identical to a fault-free
// run, a permanent outage mid-epoch ends the stream with Unavailable naming
// the object.
func TestFaultsAzure(t *testing.T) {
	ctx := context.Background()
	az := objstoretest.StartAzurite(t)
	c := az.Container(t)
	if _, err := datagen.Write(ctx, az.Store(t), "az://"+c+"/train/ds", faultSpec()); err != nil {
		t.Fatalf("datagen.Write to Azurite: %v", err)
	}
	root, dataset := "az://"+c+"/train", "az://"+c+"/train/ds/*.parquet"
	serve := func(t *testing.T, endpoint string) (*testServer, *objstore.AzureStore) {
		store := objstoretest.NewAzureStoreAt(t, endpoint+"/"+objstoretest.AzuriteAccount,
			objstore.WithAzureRetryBudget(4, 2*time.Second),
			objstore.WithAzureRetryBackoff(5*time.Millisecond, 40*time.Millisecond),
			objstore.WithAzureStallTimeout(300*time.Millisecond))
		p, err := NewPipeline(ctx, WithAllocator(checkedMem(t)), WithStore(store), WithCacheTTL(0),
			WithReadAhead(32<<10), WithLoaderOptions(loader.WithFooterCache(nil)))
		if err != nil {
			t.Fatalf("NewPipeline: %v", err)
		}
		t.Cleanup(func() { p.Close() })
		return startServer(t, viaTCP, p, []transport.Option{transport.WithAllowedRoots(root)}), store
	}
	req := faultRequest()
	req.Datasets = []string{dataset}
	ts, _ := serve(t, az.Base)
	want, err := stepSums(ctx, ts.Client, req, 0, nil)
	if err != nil || len(want) != int((faultSpec().Rows+63)/64) {
		t.Fatalf("fault-free run: %d steps, %v", len(want), err)
	}
	for _, tc := range []struct {
		name      string
		kind      objstoretest.FaultKind
		status, n int
		at        int64
	}{
		{"503 throttling burst", objstoretest.FaultStatus, http.StatusServiceUnavailable, 3, 0},
		{"500 burst", objstoretest.FaultStatus, http.StatusInternalServerError, 3, 0},
		{"truncated body after 1000 bytes", objstoretest.FaultCut, 0, 6, 1000},
		{"reset after 777 bytes", objstoretest.FaultReset, 0, 6, 777},
		{"stall after 500 bytes", objstoretest.FaultStall, 0, 1, 500},
	} {
		t.Run(tc.name, func(t *testing.T) {
			front := objstoretest.NewFaultFrontFor(t, az.Base, objstoretest.IsAzureRangedGet)
			ts, store := serve(t, front.URL())
			front.Arm(tc.kind, tc.status, tc.at, tc.n)
			got, err := stepSums(ctx, ts.Client, req, 0, nil)
			if err != nil {
				t.Fatalf("DoGet under %s: %v", tc.name, err)
			}
			compareSums(t, tc.name, got, want)
			if _, injected := front.Counts(); injected != tc.n || store.Stats().Retries.Load() < int64(tc.n) {
				t.Errorf("%d faults injected (want %d), %d retries counted", injected, tc.n, store.Stats().Retries.Load())
			}
		})
	}
	t.Run("503 forever", func(t *testing.T) {
		front := objstoretest.NewFaultFrontFor(t, az.Base, objstoretest.IsAzureRangedGet)
		ts, _ := serve(t, front.URL())
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		got, err := stepSums(cctx, ts.Client, req, 3, func() { front.Arm(objstoretest.FaultStatus, http.StatusServiceUnavailable, 0, -1) })
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("DoGet during an outage = %v, want Unavailable", err)
		}
		msg := status.Convert(err).Message()
		if missing := containsAll(msg, "az://"+c+"/train/ds/", "storage unavailable", "gave up after"); len(missing) > 0 {
			t.Errorf("message %q lacks %q", msg, missing)
		}
		if len(got) < 3 || len(got) >= len(want) {
			t.Fatalf("%d steps before the error, want between 3 and %d", len(got), len(want)-1)
		}
		compareSums(t, "steps before the outage", got, want[:len(got)])
	})
}
