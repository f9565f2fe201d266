// Package loadertest runs an in-process fake GCS (fake-gcs-server) on
// 127.0.0.1 for tests, so a suite written against loader.Store can run on GCS
// as well as on local disk, with no Docker and no network.
//
// Everything it starts is stopped by t.Cleanup.
package loadertest

import (
	"bytes"
	"context"
	"net/url"
	"testing"

	"github.com/fsouza/fake-gcs-server/fakestorage"
	"github.com/meshfeed/meshfeed/loader"
)

// FakeGCS is a running fake GCS server.
type FakeGCS struct {
	// URL is the server's base URL, "http://127.0.0.1:PORT"; pass it to
	// loader.WithGCSEndpoint, or put a proxy in front of it.
	URL string
	// Server is the underlying fake server.
	Server *fakestorage.Server
}

// NewFakeGCS starts a fake GCS server on a random port of 127.0.0.1, creates
// the given buckets (with object versioning off, like a default bucket), and
// stops the server at the end of the test.
func NewFakeGCS(t testing.TB, buckets ...string) *FakeGCS {
	t.Helper()
	srv, err := fakestorage.NewServerWithOptions(fakestorage.Options{
		Scheme: "http",
		Host:   "127.0.0.1",
	})
	if err != nil {
		t.Fatalf("loadertest: start fake GCS: %v", err)
	}
	t.Cleanup(srv.Stop)
	u, err := url.Parse(srv.URL())
	if err != nil || u.Hostname() != "127.0.0.1" {
		t.Fatalf("loadertest: fake GCS listens on %q (%v), want 127.0.0.1", srv.URL(), err)
	}
	for _, b := range buckets {
		srv.CreateBucketWithOpts(fakestorage.CreateBucketOpts{Name: b})
	}
	return &FakeGCS{URL: srv.URL(), Server: srv}
}

// Store returns a GCSStore talking to the fake server, closed at the end of
// the test. opts come after the endpoint option.
func (f *FakeGCS) Store(t testing.TB, opts ...loader.GCSOption) *loader.GCSStore {
	t.Helper()
	return NewStore(t, f.URL, opts...)
}

// NewStore returns a GCSStore talking to an emulator (or a proxy in front of
// one) at endpoint, closed at the end of the test.
func NewStore(t testing.TB, endpoint string, opts ...loader.GCSOption) *loader.GCSStore {
	t.Helper()
	s, err := loader.NewGCSStore(context.Background(), append([]loader.GCSOption{loader.WithGCSEndpoint(endpoint)}, opts...)...)
	if err != nil {
		t.Fatalf("loadertest: GCS store at %s: %v", endpoint, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// StartFakeGCS starts a fake GCS server with bucket and returns a store on
// it. Server and store are stopped at the end of the test. Use URI(bucket,
// name) or "gs://bucket/..." for the objects.
func StartFakeGCS(t testing.TB, bucket string, opts ...loader.GCSOption) *loader.GCSStore {
	t.Helper()
	return NewFakeGCS(t, bucket).Store(t, opts...)
}

// PutObject writes data at uri through store (which must implement
// loader.Creator: LocalStore, GCSStore, Mux) and returns the object as Stat
// reports it afterwards.
func PutObject(t testing.TB, store loader.Store, uri string, data []byte) loader.Object {
	t.Helper()
	ctx := context.Background()
	c, ok := store.(loader.Creator)
	if !ok {
		t.Fatalf("loadertest: PutObject(%q): %T cannot create objects", uri, store)
	}
	w, err := c.Create(ctx, uri)
	if err != nil {
		t.Fatalf("loadertest: PutObject(%q): %v", uri, err)
	}
	if _, err := bytes.NewReader(data).WriteTo(w); err != nil {
		w.Close()
		t.Fatalf("loadertest: PutObject(%q): write: %v", uri, err)
	}
	if err := w.Close(); err != nil {
		t.Fatalf("loadertest: PutObject(%q): close: %v", uri, err)
	}
	obj, err := store.Stat(ctx, uri)
	if err != nil {
		t.Fatalf("loadertest: PutObject(%q): stat after write: %v", uri, err)
	}
	if obj.Size != int64(len(data)) {
		t.Fatalf("loadertest: PutObject(%q): stat size %d, wrote %d bytes", uri, obj.Size, len(data))
	}
	return obj
}

// URI returns "gs://bucket/name".
func URI(bucket, name string) string { return "gs://" + bucket + "/" + name }
