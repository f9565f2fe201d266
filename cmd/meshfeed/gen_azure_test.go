package main

import (
	"context"
	"testing"

	"github.com/meshfeed/meshfeed/loader"
	"github.com/meshfeed/meshfeed/objstore/objstoretest"
)

// TestRunGenAzure writes a dataset to Azurite through az:// (credentials
// from AZURE_STORAGE_CONNECTION_STRING, as a user would give them) and reads
// it back through abfs://.
func TestRunGenAzure(t *testing.T) {
	az := objstoretest.StartAzurite(t)
	c := az.Container(t)
	t.Setenv("AZURE_STORAGE_CONNECTION_STRING", az.ConnectionString())
	genCaptureStdout(t)
	ctx := context.Background()
	if err := runGen(ctx, []string{"--out", "az://" + c + "/ds", "--rows", "1000", "--files", "2", "--row-group-rows", "300", "--features", "8"}); err != nil {
		t.Fatal(err)
	}
	ds, err := loader.Open(ctx, az.Store(t), []string{"abfs://" + c + "/ds/*.parquet"})
	if err != nil {
		t.Fatal(err)
	}
	if ds.NumRows() != 1000 || len(ds.Files) != 2 {
		t.Errorf("read back %d rows in %d files, want 1000 in 2", ds.NumRows(), len(ds.Files))
	}
}
