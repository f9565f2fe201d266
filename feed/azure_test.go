package feed

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/meshfeed/meshfeed/internal/datagen"
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
