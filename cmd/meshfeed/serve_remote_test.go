package main

import (
	"context"
	"encoding/json"
	"flag"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/meshfeed/meshfeed/internal/datagen"
	"github.com/meshfeed/meshfeed/objstore/objstoretest"
)

// TestServeRemoteStores runs `meshfeed serve --s3-endpoint` over the S3
// emulator (credentials from the environment, as the standard chain finds
// them) and a loopback HTTP file server, and checks that the steps read
// from s3://, http:// and local disk are identical, and that URIs outside
// the --allow roots are refused.
func TestServeRemoteStores(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server subprocess")
	}
	ctx := context.Background()
	spec := datagen.DefaultSpec()
	spec.Rows, spec.Files, spec.RowGroupRows, spec.Features = 200, 2, 30, 4
	fake := objstoretest.NewFakeS3(t, "bucket")
	s3Env(t, fake)
	t.Setenv("AWS_ENDPOINT_URL_S3", "") // the flag names the endpoint
	web := objstoretest.NewFakeHTTP(t, false)
	local := t.TempDir()
	var names []string
	for _, dir := range []string{filepath.Join(local, "ds"), filepath.Join(web.Dir, "train/ds")} {
		res, err := datagen.Write(ctx, datagen.LocalCreator{}, dir, spec)
		if err != nil {
			t.Fatal(err)
		}
		names = names[:0]
		for _, f := range res.Files {
			names = append(names, filepath.Base(f.URI))
		}
	}
	if _, err := datagen.Write(ctx, fake.Store(t), "s3://bucket/train/ds", spec); err != nil {
		t.Fatal(err)
	}
	fs := startFuzzServer(t, local, 8<<30, "--allow", "s3://bucket/train", "--allow", web.URI("train"), "--s3-endpoint", fake.URL)
	ticket := func(dir string) []byte {
		var uris []string
		for _, n := range names {
			uris = append(uris, dir+"/"+n)
		}
		b, _ := json.Marshal(map[string]any{"version": 1, "datasets": uris, "global_batch_size": 8, "num_slices": 2,
			"slices": []int{0, 1}, "last_batch": "pad", "epochs": 1, "seed": 3, "shuffle": map[string]any{"enabled": true}})
		return b
	}
	want, err := readSums(ctx, fs.client, ticket(filepath.Join(local, "ds")), 0)
	if err != nil || len(want) == 0 {
		t.Fatalf("local: %d steps, %v", len(want), err)
	}
	for _, dir := range []string{"s3://bucket/train/ds", web.URI("train/ds")} {
		got, err := readSums(ctx, fs.client, ticket(dir), 0)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("%s: %d steps, %v; want the %d steps read from local disk", dir, len(got), err, len(want))
		}
	}
	for _, dir := range []string{"s3://bucket/other", "s3://elsewhere/train/ds", web.URI("other")} {
		_, err := readSums(ctx, fs.client, ticket(dir), 0)
		if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), dir) {
			t.Errorf("%s: %v, want PermissionDenied naming it", dir, err)
		}
	}
}

func TestServeRemoteFlags(t *testing.T) {
	fset := flag.NewFlagSet("serve", flag.ContinueOnError)
	fset.SetOutput(io.Discard)
	r := newRemoteFlags(fset)
	if err := fset.Parse([]string{"--s3-path-style", "sideways"}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.muxOptions(); err == nil || !strings.Contains(err.Error(), "sideways") {
		t.Errorf("--s3-path-style sideways: %v, want an error naming it", err)
	}
	if err := runServe(context.Background(), []string{"--allow", t.TempDir(), "--s3-path-style", "sideways"}); err == nil || !strings.Contains(err.Error(), "sideways") {
		t.Errorf("serve --s3-path-style sideways = %v, want an error naming it", err)
	}
}
