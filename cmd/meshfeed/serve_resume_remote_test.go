package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"testing"

	"github.com/meshfeed/meshfeed/internal/datagen"
	"github.com/meshfeed/meshfeed/objstore/objstoretest"
)

// TestServeRemoteKillResume reads a shuffled epoch from s3://, az:// and
// http:// through `meshfeed serve`, kills the server (SIGKILL) after some
// steps, starts another and resumes at the next step: the resumed steps
// (their records and metadata) equal the uninterrupted run's from there.
func TestServeRemoteKillResume(t *testing.T) {
	if testing.Short() {
		t.Skip("starts server subprocesses")
	}
	ctx := context.Background()
	spec := datagen.DefaultSpec()
	spec.Rows, spec.Files, spec.RowGroupRows, spec.Features = 240, 3, 20, 4
	fake := objstoretest.NewFakeS3(t, "bucket")
	s3Env(t, fake)
	t.Setenv("AWS_ENDPOINT_URL_S3", "") // the flag names the endpoint
	az := objstoretest.StartAzurite(t)
	az.CreateContainer(t, "data")
	t.Setenv("AZURE_STORAGE_CONNECTION_STRING", az.ConnectionString())
	web := objstoretest.NewFakeHTTP(t, false)
	local := t.TempDir()

	res, err := datagen.Write(ctx, datagen.LocalCreator{}, filepath.Join(web.Dir, "ds"), spec)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range res.Files {
		names = append(names, filepath.Base(f.URI))
	}
	if _, err := datagen.Write(ctx, fake.Store(t), "s3://bucket/ds", spec); err != nil {
		t.Fatal(err)
	}
	if _, err := datagen.Write(ctx, az.Store(t), "az://data/ds", spec); err != nil {
		t.Fatal(err)
	}
	serve := func() *fuzzServer {
		return startFuzzServer(t, local, 8<<30, "--allow", "s3://bucket/ds", "--allow", "az://data/ds",
			"--allow", web.URI("ds"), "--s3-endpoint", fake.URL)
	}
	ticket := func(dir string, step int) []byte {
		var uris []string
		for _, n := range names {
			uris = append(uris, dir+"/"+n)
		}
		b, _ := json.Marshal(map[string]any{"version": 1, "datasets": uris, "global_batch_size": 8, "num_slices": 2,
			"slices": []int{0, 1}, "last_batch": "pad", "epochs": 1, "seed": 5,
			"shuffle": map[string]any{"enabled": true, "window": 16}, "start": map[string]any{"epoch": 0, "step": step}})
		return b
	}
	const kill = 11
	for _, dir := range []string{"s3://bucket/ds", "az://data/ds", web.URI("ds")} {
		first := serve()
		want, err := readSums(ctx, first.client, ticket(dir, 0), 0)
		if err != nil || len(want) <= kill {
			t.Fatalf("%s: the uninterrupted epoch: %d steps, %v", dir, len(want), err)
		}
		got, err := readSums(ctx, first.client, ticket(dir, 0), kill)
		if err != nil || !slices.Equal(got, want[:kill]) {
			t.Fatalf("%s: the first %d steps before the kill differ (%d read, %v)", dir, kill, len(got), err)
		}
		if err := first.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		first.exited <- <-first.exited // dead: the cleanup need not wait for it
		second := serve()
		rest, err := readSums(ctx, second.client, ticket(dir, kill), 0)
		if err != nil || !slices.Equal(rest, want[kill:]) {
			t.Errorf("%s: resumed at step %d after a SIGKILL: %d steps (%v), want the uninterrupted run's %d, equal",
				dir, kill, len(rest), err, len(want)-kill)
		}
	}
}
