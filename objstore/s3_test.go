package objstore_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/meshfeed/meshfeed/objstore"
	"github.com/meshfeed/meshfeed/objstore/objstoretest"
)

// The S3 store on gofakes3 (objstoretest.FakeS3), in-process on 127.0.0.1.

func TestS3StoreConformance(t *testing.T) {
	objstoretest.Conformance(t, func(t *testing.T) (objstore.Store, string) {
		return objstoretest.NewFakeS3(t, "suite").Store(t), "s3://suite/data"
	}, nil)
}

// TestS3StoreConformanceServerPut puts the objects straight into the
// emulator's backend: what the store lists and reads is what another writer
// made.
func TestS3StoreConformanceServerPut(t *testing.T) {
	var fake *objstoretest.FakeS3
	objstoretest.Conformance(t, func(t *testing.T) (objstore.Store, string) {
		fake = objstoretest.NewFakeS3(t, "server")
		return fake.Store(t), "s3://server/data"
	}, func(t testing.TB, store objstore.Store, uri string, data []byte) objstore.Object {
		return fake.Put(t, store, uri, data)
	})
}

func TestS3MuxSuite(t *testing.T) {
	fake := objstoretest.NewFakeS3(t, "mux")
	m, err := objstore.NewStore(context.Background(), objstore.WithS3Options(objstoretest.FakeS3Options(fake.URL)...))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	objstoretest.Conformance(t, func(t *testing.T) (objstore.Store, string) { return m, "s3://mux/root" }, nil)
	if r := m.Stats().Reads.Load(); r == 0 {
		t.Errorf("Mux stats count no reads: the S3 store does not share the Mux's counters")
	}
}

// s3FaultSetup starts a FakeS3 with one object of size bytes and a store
// that reaches it through a FaultFront faulting ranged GETs.
func s3FaultSetup(t *testing.T, size int, policy objstore.RetryPolicy) (*objstoretest.FaultFront, *objstore.S3Store, objstore.Object, []byte, *objstoretest.FakeS3) {
	t.Helper()
	fake := objstoretest.NewFakeS3(t, "faults")
	data := randBytes(newRand(t), size)
	obj := objstoretest.PutObject(t, fake.Store(t), "s3://faults/obj.bin", data)
	proxy := objstoretest.NewFaultFrontFor(t, fake.URL, objstoretest.IsRangedGet)
	store := objstoretest.NewS3Store(t, proxy.URL(), objstore.WithS3Retry(policy))
	return proxy, store, obj, data, fake
}

// fastPolicy: small waits, a 2 s budget, a 300 ms stall timeout.
func fastPolicy(attempts int) objstore.RetryPolicy {
	return objstore.RetryPolicy{MaxAttempts: attempts, MaxDuration: 2 * time.Second,
		InitialWait: 5 * time.Millisecond, MaxWait: 50 * time.Millisecond, StallTimeout: 300 * time.Millisecond}
}

// remoteFaultCase is one row of a store's fault matrix: a fault armed for
// some ranged GETs, after which the read recovers with the given requests,
// retries and resumes.
type remoteFaultCase struct {
	name                      string
	kind                      objstoretest.FaultKind
	status                    int
	at                        int64
	n                         int
	requests, retries, resume int64
}

// remoteRecoveries is the part of the fault matrix every HTTP store
// recovers from (a 50 kB read at offset 1000 of a 100 kB object).
var remoteRecoveries = []remoteFaultCase{
	{"503SlowDownBurst", objstoretest.FaultStatus, http.StatusServiceUnavailable, 0, 3, 4, 3, 0},
	{"429Throttled", objstoretest.FaultStatus, http.StatusTooManyRequests, 0, 2, 3, 2, 0},
	{"500Burst", objstoretest.FaultStatus, http.StatusInternalServerError, 0, 3, 4, 3, 0},
	{"ResetMidBody", objstoretest.FaultReset, 0, 7000, 2, 3, 2, 2},
	{"TruncatedBody", objstoretest.FaultCut, 0, 1000, 3, 4, 3, 3},
	{"StallMidBody", objstoretest.FaultStall, 0, 500, 1, 2, 1, 1},
}

// checkRecovery arms c on proxy, reads [1000, 51000) of obj and checks the
// bytes, the ranges asked for and the counters.
func checkRecovery(t *testing.T, c remoteFaultCase, proxy *objstoretest.FaultFront, store objstore.Store, obj objstore.Object, data []byte) {
	t.Helper()
	const off, n = 1000, 50_000
	proxy.Arm(c.kind, c.status, c.at, c.n)
	checkRead(t, store, obj, data, off, n)
	reqs, ranges := proxy.Seen()
	st := store.(objstore.StatsReporter).Stats()
	if int64(reqs) != c.requests || st.Retries.Load() != c.retries || st.Resumes.Load() != c.resume {
		t.Errorf("%s: %d requests, %d retries, %d resumes; want %d, %d, %d (ranges %q)",
			c.name, reqs, st.Retries.Load(), st.Resumes.Load(), c.requests, c.retries, c.resume, ranges)
	}
	if c.kind == objstoretest.FaultCut {
		// Each cut delivers exactly at bytes, so attempt i starts at off+i*at.
		var want []string
		for i := range int(c.requests) {
			want = append(want, fmt.Sprintf("bytes=%d-%d", off+int64(i)*c.at, off+n-1))
		}
		if !slices.Equal(ranges, want) {
			t.Errorf("%s: ranges requested = %q, want %q", c.name, ranges, want)
		}
	}
}

func TestS3FaultRecovery(t *testing.T) {
	for _, c := range remoteRecoveries {
		t.Run(c.name, func(t *testing.T) {
			proxy, store, obj, data, _ := s3FaultSetup(t, 100_000, fastPolicy(5))
			checkRecovery(t, c, proxy, store, obj, data)
		})
	}
}

func TestS3GivesUp(t *testing.T) {
	const attempts = 4
	for _, c := range []struct {
		name string
		kind objstoretest.FaultKind
		code int
	}{
		{"503", objstoretest.FaultStatus, 503}, {"KillAtByte0", objstoretest.FaultCut, 0}, {"StallAtByte0", objstoretest.FaultStall, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			proxy, store, obj, _, _ := s3FaultSetup(t, 10_000, fastPolicy(attempts))
			proxy.Arm(c.kind, c.code, 0, -1)
			start := time.Now()
			err := store.ReadAt(context.Background(), obj, make([]byte, 5000), 100)
			reqs, _ := proxy.Seen()
			if !errors.Is(err, objstore.ErrUnavailable) || !strings.Contains(err.Error(), obj.URI) {
				t.Errorf("ReadAt = %v, want ErrUnavailable naming %s", err, obj.URI)
			}
			if reqs != attempts {
				t.Errorf("%d requests, want %d (the attempt budget)", reqs, attempts)
			}
			if el := time.Since(start); el > 3*time.Second {
				t.Errorf("gave up after %v, budget 2s", el)
			}
		})
	}
}

func TestS3PermanentErrors(t *testing.T) {
	ctx := context.Background()
	proxy, store, obj, _, fake := s3FaultSetup(t, 1000, fastPolicy(5))

	proxy.Arm(objstoretest.FaultStatus, http.StatusForbidden, 0, 1)
	err := store.ReadAt(ctx, obj, make([]byte, 10), 0)
	if !errors.Is(err, objstore.ErrPermission) || !errors.Is(err, fs.ErrPermission) || !strings.Contains(err.Error(), obj.URI) {
		t.Errorf("ReadAt with 403 = %v, want ErrPermission naming %s", err, obj.URI)
	}
	if n, _ := proxy.Seen(); n != 1 {
		t.Errorf("403: %d requests, want 1", n)
	}

	for _, uri := range []string{"s3://faults/missing.bin", "s3://nobucket/x.bin"} {
		err = store.ReadAt(ctx, objstore.Object{URI: uri}, make([]byte, 10), 0)
		if !errors.Is(err, objstore.ErrNotFound) || !strings.Contains(err.Error(), uri) {
			t.Errorf("ReadAt(%s) = %v, want ErrNotFound naming it", uri, err)
		}
		if _, err := store.Stat(ctx, uri); !errors.Is(err, objstore.ErrNotFound) {
			t.Errorf("Stat(%s) = %v, want ErrNotFound", uri, err)
		}
	}
	if n, _ := proxy.Seen(); n != 2 {
		t.Errorf("404: %d requests, want 2", n)
	}
	if r := store.Stats().Retries.Load(); r != 0 {
		t.Errorf("retries = %d, want 0", r)
	}

	// Wrong credentials: every call fails with ErrPermission, unretried.
	bad := objstoretest.NewS3Store(t, fake.URL, objstore.WithS3Retry(fastPolicy(5)),
		objstore.WithS3Credentials(credentials.NewStaticCredentialsProvider("WRONGKEY", "x", "")))
	if _, err := bad.List(ctx, "s3://faults/"); !errors.Is(err, objstore.ErrPermission) || !strings.Contains(err.Error(), "s3://faults/") {
		t.Errorf("List with wrong credentials = %v, want ErrPermission naming the prefix", err)
	}
	if _, err := bad.Stat(ctx, obj.URI); !errors.Is(err, objstore.ErrPermission) {
		t.Errorf("Stat with wrong credentials = %v, want ErrPermission", err)
	}
	if err := bad.ReadAt(ctx, obj, make([]byte, 10), 0); !errors.Is(err, objstore.ErrPermission) || bad.Stats().Retries.Load() != 0 {
		t.Errorf("ReadAt with wrong credentials = %v (%d retries), want ErrPermission, no retry", err, bad.Stats().Retries.Load())
	}
	if _, err := objstore.Match(ctx, bad, []string{"s3://faults/*.bin"}); !errors.Is(err, objstore.ErrPermission) {
		t.Errorf("Match with wrong credentials = %v, want ErrPermission", err)
	}
}

// TestS3ReplacedMidEpoch: an object listed, then replaced by another writer,
// is an error naming it when read, whether its size changed or not.
func TestS3ReplacedMidEpoch(t *testing.T) {
	ctx := context.Background()
	_, store, obj, data, fake := s3FaultSetup(t, 10_000, fastPolicy(5))
	checkRead(t, store, obj, data, 0, 100)
	other := append([]byte(nil), data...)
	other[5000] ^= 0xff // same size, other bytes
	fake.Put(t, store, obj.URI, other)
	err := store.ReadAt(ctx, obj, make([]byte, 100), 0)
	if !errors.Is(err, objstore.ErrNotFound) || !strings.Contains(err.Error(), obj.URI) || !strings.Contains(err.Error(), "changed") {
		t.Errorf("ReadAt(replaced %s) = %v, want ErrNotFound naming it and saying it changed", obj.URI, err)
	}
}

func TestS3Endpoint(t *testing.T) {
	fake := objstoretest.NewFakeS3(t, "env")
	data := []byte("hello, s3")
	objstoretest.PutObject(t, fake.Store(t), "s3://env/a.txt", data)
	t.Setenv("AWS_ENDPOINT_URL_S3", fake.URL)
	t.Setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1") // the S3-specific one wins
	t.Setenv("AWS_ACCESS_KEY_ID", objstoretest.FakeS3AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", objstoretest.FakeS3SecretKey)
	t.Setenv("AWS_REGION", "us-east-1")
	t.Setenv("AWS_CONFIG_FILE", "/nonexistent")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
	m, err := objstore.NewStore(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	obj, err := m.Stat(context.Background(), "s3://env/a.txt")
	if err != nil || obj.Size != int64(len(data)) || obj.ETag == "" {
		t.Fatalf("Stat through AWS_ENDPOINT_URL_S3 = %+v, %v", obj, err)
	}
	checkRead(t, m, obj, data, 0, int64(len(data)))

	for _, bad := range []string{"127.0.0.1:9000", "ftp://x"} {
		if _, err := objstore.NewS3Store(context.Background(), objstore.WithS3Endpoint(bad)); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("NewS3Store(endpoint %q) = %v, want an error naming it", bad, err)
		}
	}
	for in, want := range map[string]objstore.PathStyle{"auto": objstore.PathStyleAuto, "path": objstore.PathStyleOn, "virtual": objstore.PathStyleOff} {
		if got, err := objstore.ParsePathStyle(in); err != nil || got != want {
			t.Errorf("ParsePathStyle(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	if _, err := objstore.ParsePathStyle("vhost"); err == nil {
		t.Errorf("ParsePathStyle(%q) = nil error", "vhost")
	}
}

// TestS3StatRetries: Stat and List retry 5xx, throttling and stalls within
// the store's budget, then fail with ErrUnavailable.
func TestS3StatRetries(t *testing.T) {
	ctx := context.Background()
	fake := objstoretest.NewFakeS3(t, "meta")
	obj := objstoretest.PutObject(t, fake.Store(t), "s3://meta/a.bin", []byte("abc"))
	proxy := objstoretest.NewFaultFrontFor(t, fake.URL, func(r *http.Request) bool { return r.Method == http.MethodHead || r.URL.Query().Has("list-type") })
	store := objstoretest.NewS3Store(t, proxy.URL(), objstore.WithS3Retry(fastPolicy(4)))

	proxy.Arm(objstoretest.FaultStatus, http.StatusServiceUnavailable, 0, 2)
	if got, err := store.Stat(ctx, obj.URI); err != nil || got.ETag != obj.ETag {
		t.Errorf("Stat after two 503s = %+v, %v; want the object", got, err)
	}
	proxy.Arm(objstoretest.FaultStatus, http.StatusTooManyRequests, 0, 2)
	if got, err := store.List(ctx, "s3://meta/"); err != nil || len(got) != 1 {
		t.Errorf("List after two 429s = %v, %v; want the object", got, err)
	}
	// A listing page that stalls is cut off by the stall timeout and asked again.
	proxy.Arm(objstoretest.FaultStall, 0, 10, 1)
	if got, err := store.List(ctx, "s3://meta/"); err != nil || len(got) != 1 {
		t.Errorf("List after a stalled page = %v, %v; want the object", got, err)
	}
	proxy.Seen()
	proxy.Arm(objstoretest.FaultStatus, http.StatusServiceUnavailable, 0, -1)
	_, err := store.Stat(ctx, obj.URI)
	if !errors.Is(err, objstore.ErrUnavailable) || !strings.Contains(err.Error(), obj.URI) {
		t.Errorf("Stat under a 503 outage = %v, want ErrUnavailable naming %s", err, obj.URI)
	}
	if n, _ := proxy.Seen(); n != 4 {
		t.Errorf("Stat under a 503 outage: %d requests, want 4 (the attempt budget)", n)
	}
}

// TestS3Anonymous: with aws.AnonymousCredentials the store sends unsigned
// requests (no Authorization header), which FakeS3, like a private bucket,
// refuses with 403.
func TestS3Anonymous(t *testing.T) {
	fake := objstoretest.NewFakeS3(t, "anon")
	objstoretest.PutObject(t, fake.Store(t), "s3://anon/a.bin", []byte("abc"))
	up, _ := url.Parse(fake.URL)
	var mu sync.Mutex
	var auth []string
	rp := httputil.NewSingleHostReverseProxy(up)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		auth = append(auth, r.Header.Get("Authorization"))
		mu.Unlock()
		rp.ServeHTTP(w, r)
	}))
	defer front.Close()
	s, err := objstore.NewS3Store(context.Background(), objstore.WithS3Endpoint(front.URL), objstore.WithS3Region("us-east-1"),
		objstore.WithS3Credentials(aws.AnonymousCredentials{}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Stat(context.Background(), "s3://anon/a.bin"); !errors.Is(err, objstore.ErrPermission) {
		t.Errorf("anonymous Stat = %v, want ErrPermission", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(auth) == 0 || slices.ContainsFunc(auth, func(a string) bool { return a != "" }) {
		t.Errorf("anonymous requests carried Authorization headers %q, want none", auth)
	}
}
