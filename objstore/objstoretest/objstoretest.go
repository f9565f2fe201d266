package objstoretest

import (
	"bytes"
	"context"
	"net/url"
	"testing"

	"github.com/fsouza/fake-gcs-server/fakestorage"
	"github.com/meshfeed/meshfeed/objstore"
)

// FakeGCS is a running fake GCS server.
type FakeGCS struct {
	// URL is the server's base URL, "http://127.0.0.1:PORT"; pass it to
	// objstore.WithGCSEndpoint, or put a proxy in front of it.
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
		t.Fatalf("objstoretest: start fake GCS: %v", err)
	}
	t.Cleanup(srv.Stop)
	u, err := url.Parse(srv.URL())
	if err != nil || u.Hostname() != "127.0.0.1" {
		t.Fatalf("objstoretest: fake GCS listens on %q (%v), want 127.0.0.1", srv.URL(), err)
	}
	for _, b := range buckets {
		srv.CreateBucketWithOpts(fakestorage.CreateBucketOpts{Name: b})
	}
	return &FakeGCS{URL: srv.URL(), Server: srv}
}

// Store returns a GCSStore talking to the fake server, closed at the end of
// the test. opts come after the endpoint option.
func (f *FakeGCS) Store(t testing.TB, opts ...objstore.GCSOption) *objstore.GCSStore {
	t.Helper()
	return NewStore(t, f.URL, opts...)
}

// NewStore returns a GCSStore talking to an emulator (or a proxy in front of
// one) at endpoint, closed at the end of the test.
func NewStore(t testing.TB, endpoint string, opts ...objstore.GCSOption) *objstore.GCSStore {
	t.Helper()
	s, err := objstore.NewGCSStore(context.Background(), append([]objstore.GCSOption{objstore.WithGCSEndpoint(endpoint)}, opts...)...)
	if err != nil {
		t.Fatalf("objstoretest: GCS store at %s: %v", endpoint, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// StartFakeGCS starts a fake GCS server with bucket and returns a store on
// it. Server and store are stopped at the end of the test. Use URI(bucket,
// name) or "gs://bucket/..." for the objects.
func StartFakeGCS(t testing.TB, bucket string, opts ...objstore.GCSOption) *objstore.GCSStore {
	t.Helper()
	return NewFakeGCS(t, bucket).Store(t, opts...)
}

// PutObject writes data at uri through store (which must implement
// objstore.Creator: LocalStore, GCSStore, Mux) and returns the object as Stat
// reports it afterwards.
func PutObject(t testing.TB, store objstore.Store, uri string, data []byte) objstore.Object {
	t.Helper()
	ctx := context.Background()
	c, ok := store.(objstore.Creator)
	if !ok {
		t.Fatalf("objstoretest: PutObject(%q): %T cannot create objects", uri, store)
	}
	w, err := c.Create(ctx, uri)
	if err != nil {
		t.Fatalf("objstoretest: PutObject(%q): %v", uri, err)
	}
	if _, err := bytes.NewReader(data).WriteTo(w); err != nil {
		w.Close()
		t.Fatalf("objstoretest: PutObject(%q): write: %v", uri, err)
	}
	if err := w.Close(); err != nil {
		t.Fatalf("objstoretest: PutObject(%q): close: %v", uri, err)
	}
	obj, err := store.Stat(ctx, uri)
	if err != nil {
		t.Fatalf("objstoretest: PutObject(%q): stat after write: %v", uri, err)
	}
	if obj.Size != int64(len(data)) {
		t.Fatalf("objstoretest: PutObject(%q): stat size %d, wrote %d bytes", uri, obj.Size, len(data))
	}
	return obj
}

// URI returns "gs://bucket/name".
func URI(bucket, name string) string { return "gs://" + bucket + "/" + name }

// Put writes data at uri ("gs://bucket/name") straight into the fake server,
// as another writer would, replacing any object there, and returns the
// object as store's Stat reports it afterwards. It is a PutFunc for
// Conformance.
func (f *FakeGCS) Put(t testing.TB, store objstore.Store, uri string, data []byte) objstore.Object {
	t.Helper()
	bucket, name, err := objstore.ParseGCSURI(uri)
	if err != nil || name == "" {
		t.Fatalf("objstoretest: Put(%q): not an object URI (%v)", uri, err)
	}
	f.Server.CreateObject(fakestorage.Object{
		ObjectAttrs: fakestorage.ObjectAttrs{BucketName: bucket, Name: name},
		Content:     data,
	})
	obj, err := store.Stat(context.Background(), uri)
	if err != nil {
		t.Fatalf("objstoretest: Put(%q): stat after write: %v", uri, err)
	}
	if obj.Size != int64(len(data)) {
		t.Fatalf("objstoretest: Put(%q): stat size %d, wrote %d bytes", uri, obj.Size, len(data))
	}
	return obj
}
