package objstoretest

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
	"github.com/meshfeed/meshfeed/objstore"
)

// FakeS3AccessKey and FakeS3SecretKey are the credentials a FakeS3 accepts.
const (
	FakeS3AccessKey = "MESHFEEDTESTKEY"
	FakeS3SecretKey = "meshfeed-test-secret"
)

// FakeS3 is a running in-process S3 emulator (gofakes3 on an in-memory
// backend) behind an httptest server on 127.0.0.1, addressed by path.
//
// gofakes3 does not check request signatures; FakeS3 checks the access key
// named in each request's Authorization header (or X-Amz-Credential query
// parameter) and answers 403 InvalidAccessKeyId to any other, so that wrong
// credentials fail as they do on S3. The secret key is not checked.
type FakeS3 struct {
	// URL is the server's base URL, "http://127.0.0.1:PORT"; pass it to
	// objstore.WithS3Endpoint, or put a proxy in front of it.
	URL string
	// Backend holds the objects.
	Backend *s3mem.Backend
}

// NewFakeS3 starts a FakeS3 on a random port of 127.0.0.1 with the given
// buckets, stopped at the end of the test.
func NewFakeS3(t testing.TB, buckets ...string) *FakeS3 {
	t.Helper()
	be := s3mem.New()
	faker := gofakes3.New(be, gofakes3.WithLogger(gofakes3.DiscardLog()))
	h := faker.Server()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if key := accessKey(r); key != FakeS3AccessKey {
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusForbidden)
			fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>InvalidAccessKeyId</Code><Message>The AWS Access Key Id %q you provided does not exist in our records.</Message></Error>`, key)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	for _, b := range buckets {
		if err := be.CreateBucket(b); err != nil {
			t.Fatalf("objstoretest: fake S3 bucket %q: %v", b, err)
		}
	}
	return &FakeS3{URL: srv.URL, Backend: be}
}

// accessKey returns the access key a SigV4 request is signed with.
func accessKey(r *http.Request) string {
	cred := r.URL.Query().Get("X-Amz-Credential")
	if a := r.Header.Get("Authorization"); a != "" {
		_, c, _ := strings.Cut(a, "Credential=")
		cred = c
	}
	key, _, _ := strings.Cut(cred, "/")
	return key
}

// Store returns an S3Store on the fake server with its credentials, closed
// at the end of the test. opts come after the endpoint and credentials.
func (f *FakeS3) Store(t testing.TB, opts ...objstore.S3Option) *objstore.S3Store {
	t.Helper()
	return NewS3Store(t, f.URL, opts...)
}

// NewS3Store returns an S3Store talking to an emulator (or a proxy in front
// of one) at endpoint with FakeS3's credentials and region us-east-1, closed
// at the end of the test.
func NewS3Store(t testing.TB, endpoint string, opts ...objstore.S3Option) *objstore.S3Store {
	t.Helper()
	s, err := objstore.NewS3Store(context.Background(), append(FakeS3Options(endpoint), opts...)...)
	if err != nil {
		t.Fatalf("objstoretest: S3 store at %s: %v", endpoint, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// FakeS3Options are the options of a store on a FakeS3 at endpoint:
// the endpoint, the fake's credentials and region us-east-1 (nothing is
// read from the environment, the shared files or an instance role).
func FakeS3Options(endpoint string) []objstore.S3Option {
	return []objstore.S3Option{
		objstore.WithS3Endpoint(endpoint),
		objstore.WithS3Region("us-east-1"),
		objstore.WithS3Credentials(credentials.NewStaticCredentialsProvider(FakeS3AccessKey, FakeS3SecretKey, "")),
	}
}

// Put writes data at uri ("s3://bucket/key") straight into the fake's
// backend, as another writer would, replacing any object there, and returns
// the object as store's Stat reports it afterwards. It is a PutFunc for
// Conformance.
func (f *FakeS3) Put(t testing.TB, store objstore.Store, uri string, data []byte) objstore.Object {
	t.Helper()
	bucket, key, err := objstore.ParseS3URI(uri)
	if err != nil || key == "" {
		t.Fatalf("objstoretest: Put(%q): not an object URI (%v)", uri, err)
	}
	meta := map[string]string{"Last-Modified": time.Now().UTC().Format(http.TimeFormat)}
	if _, err := f.Backend.PutObject(bucket, key, meta, bytes.NewReader(data), int64(len(data)), nil); err != nil {
		t.Fatalf("objstoretest: Put(%q): %v", uri, err)
	}
	obj, err := store.Stat(context.Background(), uri)
	if err != nil {
		t.Fatalf("objstoretest: Put(%q): stat after write: %v", uri, err)
	}
	if obj.Size != int64(len(data)) {
		t.Fatalf("objstoretest: Put(%q): stat size %d, wrote %d bytes", uri, obj.Size, len(data))
	}
	return obj
}
