package main

import (
	"context"
	"testing"

	"github.com/meshfeed/meshfeed/loader"
	"github.com/meshfeed/meshfeed/objstore/objstoretest"
)

// s3Env points the standard AWS chain at a FakeS3 (and at nothing else:
// no shared files, no instance role).
func s3Env(t *testing.T, fake *objstoretest.FakeS3) {
	t.Setenv("AWS_ENDPOINT_URL_S3", fake.URL)
	t.Setenv("AWS_ACCESS_KEY_ID", objstoretest.FakeS3AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", objstoretest.FakeS3SecretKey)
	t.Setenv("AWS_REGION", "us-east-1")
	t.Setenv("AWS_CONFIG_FILE", "/nonexistent")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
}

// TestRunGenS3 writes a dataset to the in-process S3 emulator, found through
// AWS_ENDPOINT_URL_S3, and reads it back through the loader.
func TestRunGenS3(t *testing.T) {
	fake := objstoretest.NewFakeS3(t, "bucket")
	s3Env(t, fake)
	genCaptureStdout(t)
	ctx := context.Background()
	args := []string{"--out", "s3://bucket/ds", "--rows", "1000", "--files", "2", "--row-group-rows", "300", "--features", "8"}
	if err := runGen(ctx, args); err != nil {
		t.Fatal(err)
	}
	ds, err := loader.Open(ctx, fake.Store(t), []string{"s3://bucket/ds/*.parquet"})
	if err != nil {
		t.Fatal(err)
	}
	if ds.NumRows() != 1000 || len(ds.Files) != 2 {
		t.Errorf("read back %d rows in %d files, want 1000 in 2", ds.NumRows(), len(ds.Files))
	}
}
