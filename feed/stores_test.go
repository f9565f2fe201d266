package feed

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"google.golang.org/grpc/codes"

	"github.com/meshfeed/meshfeed/internal/datagen"
	"github.com/meshfeed/meshfeed/objstore"
	"github.com/meshfeed/meshfeed/objstore/objstoretest"
	"github.com/meshfeed/meshfeed/transport"
)

// TestPipelineStoresIdentical: the same dataset, written to local disk, to
// GCS, to S3 and to an HTTPS server (each an emulator on 127.0.0.1), served
// by one pipeline whose Mux routes to all four, gives byte-identical steps
// (records and step metadata) through each; and --allow roots refuse s3://
// and https:// URIs outside them.
func TestPipelineStoresIdentical(t *testing.T) {
	ctx := context.Background()
	spec := pipeSpec()
	gcs := objstoretest.NewFakeGCS(t, "gbucket")
	s3 := objstoretest.NewFakeS3(t, "sbucket")
	web := objstoretest.NewFakeHTTP(t, true)
	m, err := objstore.NewStore(ctx,
		objstore.WithGCSOptions(objstore.WithGCSEndpoint(gcs.URL)),
		objstore.WithS3Options(objstoretest.FakeS3Options(s3.URL)...),
		objstore.WithHTTPSOptions(web.Options()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })

	local := t.TempDir()
	dirs := map[string]string{
		"local": local + "/train/ds",
		"gs":    "gs://gbucket/train/ds",
		"s3":    "s3://sbucket/train/ds",
		"https": web.URI("train/ds"),
	}
	roots := []string{local + "/train", "gs://gbucket/train", "s3://sbucket/train", web.URI("train")}
	files := map[string][]string{}
	for name, dir := range dirs {
		var c datagen.Creator = m
		if name == "https" {
			c, dir = datagen.LocalCreator{}, web.Dir+"/train/ds" // the server's files, written on its disk
		}
		res, err := datagen.Write(ctx, c, dir, spec)
		if err != nil {
			t.Fatalf("datagen.Write(%s): %v", dir, err)
		}
		for _, f := range res.Files {
			// HTTP cannot list: every store gets the same explicit file list.
			files[name] = append(files[name], dirs[name]+"/"+f.URI[strings.LastIndex(f.URI, "/")+1:])
		}
	}
	mem := checkedMem(t)
	ts := startPipeline(t, mem, roots, WithStore(m))
	request := func(uris []string) *transport.Request {
		req := pipeRequest("", 8, 2, []int{0, 1}, transport.LastBatchPad)
		req.Datasets = uris
		req.Shuffle = transport.Shuffle{Enabled: true, Window: 5}
		return req
	}
	want, err := readSteps(t, ctx, ts.Client, request(files["local"]), true)
	if err != nil || len(want) == 0 {
		t.Fatalf("local: %d steps, %v", len(want), err)
	}
	for _, name := range []string{"gs", "s3", "https"} {
		got, err := readSteps(t, ctx, ts.Client, request(files[name]), true)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(got) != len(want) {
			t.Fatalf("%s: %d steps, local gave %d", name, len(got), len(want))
		}
		for i := range want {
			if !array.RecordEqual(got[i].rec, want[i].rec) || !sameMeta(got[i].meta, want[i].meta) {
				t.Fatalf("%s: step %d differs from local (ids %v, want %v)", name, i, got[i].ids, want[i].ids)
			}
		}
	}
	if st := m.Stats(); st.Reads.Load() == 0 {
		t.Errorf("no remote reads counted")
	}

	outside := []string{
		"s3://sbucket/other/part-00000.parquet",
		"s3://other/train/ds/part-00000.parquet",
		"s3://sbucket/train/../other/x.parquet",
		web.URI("other/part-00000.parquet"),
		web.URI("train/%2e%2e/other/x.parquet"),
		strings.Replace(web.URI("train/ds/part-00000.parquet"), "127.0.0.1", "localhost", 1),
	}
	for _, uri := range outside {
		_, err := readSteps(t, ctx, ts.Client, request([]string{uri}), false)
		checkStatus(t, fmt.Sprintf("DoGet(%s)", uri), err, codes.PermissionDenied, []string{uri})
	}
	// Inside the roots, a glob over https is refused with what to do.
	_, err = readSteps(t, ctx, ts.Client, request([]string{web.URI("train/ds/*.parquet")}), false)
	if err == nil || !strings.Contains(err.Error(), "name each file") {
		t.Errorf("DoGet(https glob) = %v, want an error saying to name each file", err)
	}
	if !slices.Equal(files["https"][:1], []string{web.URI("train/ds/part-00000.parquet")}) {
		t.Errorf("https files = %q", files["https"])
	}
}

// sameMeta compares step metadata, ignoring nothing: the same step of the
// same plan carries the same metadata whichever store the bytes came from.
func sameMeta(a, b transport.StepMeta) bool { return fmt.Sprintf("%+v", a) == fmt.Sprintf("%+v", b) }
