package objstore_test

import (
	"context"
	"errors"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/meshfeed/meshfeed/objstore"
	"github.com/meshfeed/meshfeed/objstore/objstoretest"
)

// The HTTPS store on objstoretest.FakeHTTP (http.ServeContent over a
// directory), in-process on 127.0.0.1, over TLS and plain loopback HTTP.

func httpsConformance(t *testing.T, tls bool, mode objstoretest.HTTPMode) {
	var fake *objstoretest.FakeHTTP
	objstoretest.Conformance(t, func(t *testing.T) (objstore.Store, string) {
		fake = objstoretest.NewFakeHTTP(t, tls)
		fake.SetMode(mode)
		return fake.Store(t), fake.URI("data")
	}, func(t testing.TB, store objstore.Store, uri string, data []byte) objstore.Object {
		return fake.Put(t, store, uri, data)
	})
}

func TestHTTPSStoreConformance(t *testing.T) { httpsConformance(t, true, objstoretest.HTTPMode{}) }

func TestHTTPStoreConformanceLoopback(t *testing.T) {
	httpsConformance(t, false, objstoretest.HTTPMode{})
}

// Validators and size found other ways: Last-Modified alone, a weak ETag,
// no HEAD (the size from a ranged probe).
func TestHTTPSStoreConformanceLastModifiedOnly(t *testing.T) {
	httpsConformance(t, true, objstoretest.HTTPMode{NoETag: true})
}

func TestHTTPSStoreConformanceWeakETagNoHEAD(t *testing.T) {
	httpsConformance(t, true, objstoretest.HTTPMode{WeakETag: true, NoHEAD: true})
}

func TestHTTPSMuxSuite(t *testing.T) {
	fake := objstoretest.NewFakeHTTP(t, true)
	m, err := objstore.NewStore(context.Background(), objstore.WithHTTPSOptions(fake.Options()...))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	objstoretest.Conformance(t, func(t *testing.T) (objstore.Store, string) { return m, fake.URI("mux") },
		func(t testing.TB, store objstore.Store, uri string, data []byte) objstore.Object {
			return fake.Put(t, store, uri, data)
		})
	if objstore.CanList(m, fake.URI("x")) || !objstore.CanList(m, "gs://b/x") || !objstore.CanList(m, t.TempDir()) {
		t.Errorf("Mux.CanList: want false for https://, true for gs:// and local paths")
	}
}

// httpFaultSetup serves one object of size bytes over plain loopback HTTP
// and returns a store reaching it through a FaultFront on ranged GETs.
func httpFaultSetup(t *testing.T, size int, policy objstore.RetryPolicy) (*objstoretest.FaultFront, *objstore.HTTPSStore, objstore.Object, []byte, *objstoretest.FakeHTTP) {
	t.Helper()
	fake := objstoretest.NewFakeHTTP(t, false)
	data := randBytes(newRand(t), size)
	fake.Write(t, "obj.bin", data)
	proxy := objstoretest.NewFaultFrontFor(t, fake.URL, objstoretest.IsRangedGet)
	store := objstore.NewHTTPSStore(objstore.WithHTTPSRetry(policy))
	t.Cleanup(func() { store.Close() })
	obj, err := store.Stat(context.Background(), proxy.URL()+"/obj.bin")
	if err != nil {
		t.Fatal(err)
	}
	return proxy, store, obj, data, fake
}

func TestHTTPSFaultRecovery(t *testing.T) {
	for _, c := range remoteRecoveries {
		t.Run(c.name, func(t *testing.T) {
			proxy, store, obj, data, _ := httpFaultSetup(t, 100_000, fastPolicy(5))
			checkRecovery(t, c, proxy, store, obj, data)
		})
	}
}

func TestHTTPSGivesUp(t *testing.T) {
	const attempts = 4
	for _, kind := range []objstoretest.FaultKind{objstoretest.FaultStatus, objstoretest.FaultCut, objstoretest.FaultStall} {
		t.Run(kind.String(), func(t *testing.T) {
			proxy, store, obj, _, _ := httpFaultSetup(t, 10_000, fastPolicy(attempts))
			proxy.Arm(kind, 503, 0, -1)
			err := store.ReadAt(context.Background(), obj, make([]byte, 5000), 100)
			if !errors.Is(err, objstore.ErrUnavailable) || !strings.Contains(err.Error(), obj.URI) {
				t.Errorf("ReadAt = %v, want ErrUnavailable naming %s", err, obj.URI)
			}
			if reqs, _ := proxy.Seen(); reqs != attempts {
				t.Errorf("%d requests, want %d (the attempt budget)", reqs, attempts)
			}
		})
	}
}

func TestHTTPSPermanentErrors(t *testing.T) {
	ctx := context.Background()
	proxy, store, obj, _, _ := httpFaultSetup(t, 1000, fastPolicy(5))
	for _, status := range []int{http.StatusForbidden, http.StatusUnauthorized} {
		proxy.Arm(objstoretest.FaultStatus, status, 0, 1)
		err := store.ReadAt(ctx, obj, make([]byte, 10), 0)
		if !errors.Is(err, objstore.ErrPermission) || !errors.Is(err, fs.ErrPermission) || !strings.Contains(err.Error(), obj.URI) {
			t.Errorf("ReadAt with %d = %v, want ErrPermission naming %s", status, err, obj.URI)
		}
	}
	missing := proxy.URL() + "/missing.bin"
	if err := store.ReadAt(ctx, objstore.Object{URI: missing}, make([]byte, 10), 0); !errors.Is(err, objstore.ErrNotFound) || !strings.Contains(err.Error(), missing) {
		t.Errorf("ReadAt(%s) = %v, want ErrNotFound naming it", missing, err)
	}
	if _, err := store.Stat(ctx, missing); !errors.Is(err, objstore.ErrNotFound) || !strings.Contains(err.Error(), missing) {
		t.Errorf("Stat(%s) = %v, want ErrNotFound naming it", missing, err)
	}
	if n, _ := proxy.Seen(); n != 3 {
		t.Errorf("%d ranged requests, want 3 (none retried)", n)
	}
	if r := store.Stats().Retries.Load(); r != 0 {
		t.Errorf("retries = %d, want 0", r)
	}
}

// TestHTTPSReplacedMidEpoch: a file replaced after it was stat'ed is an
// error naming it, whichever validator identifies it.
func TestHTTPSReplacedMidEpoch(t *testing.T) {
	for name, mode := range map[string]objstoretest.HTTPMode{
		"ETag": {}, "LastModified": {NoETag: true}, "WeakETag": {WeakETag: true},
	} {
		t.Run(name, func(t *testing.T) {
			fake := objstoretest.NewFakeHTTP(t, true)
			fake.SetMode(mode)
			store := fake.Store(t)
			data := randBytes(newRand(t), 10_000)
			obj := fake.Put(t, store, fake.URI("f.bin"), data)
			checkRead(t, store, obj, data, 0, 100)
			other := append([]byte(nil), data...)
			other[0] ^= 1
			fake.Write(t, "f.bin", other)
			err := store.ReadAt(context.Background(), obj, make([]byte, 100), 0)
			if !errors.Is(err, objstore.ErrNotFound) || !strings.Contains(err.Error(), obj.URI) || !strings.Contains(err.Error(), "changed") {
				t.Errorf("ReadAt(replaced %s) = %v, want ErrNotFound naming it and saying it changed", obj.URI, err)
			}
		})
	}
}

// TestHTTPSIgnoredRange: a server that answers ranged GETs with the whole
// file serves whole-file reads, and refuses partial ones naming the URL.
func TestHTTPSIgnoredRange(t *testing.T) {
	fake := objstoretest.NewFakeHTTP(t, true)
	store := fake.Store(t)
	data := randBytes(newRand(t), 5000)
	obj := fake.Put(t, store, fake.URI("f.bin"), data)
	fake.SetMode(objstoretest.HTTPMode{IgnoreRange: true})
	checkRead(t, store, obj, data, 0, 5000)
	for _, rg := range [][2]int64{{0, 100}, {100, 4900}, {4000, 10}} {
		err := store.ReadAt(context.Background(), obj, make([]byte, rg[1]), rg[0])
		if !errors.Is(err, objstore.ErrUnsupported) || !strings.Contains(err.Error(), obj.URI) || !strings.Contains(err.Error(), "Range") {
			t.Errorf("ReadAt([%d, %d)) from a server ignoring Range = %v, want an error naming the URL and Range", rg[0], rg[0]+rg[1], err)
		}
	}
	if r := store.Stats().Retries.Load(); r != 0 {
		t.Errorf("retries = %d, want 0 (retrying cannot help)", r)
	}
}

func TestHTTPSRefusals(t *testing.T) {
	ctx := context.Background()
	fake := objstoretest.NewFakeHTTP(t, true)
	fake.SetMode(objstoretest.HTTPMode{NoETag: true, NoLastModified: true})
	fake.Write(t, "f.bin", []byte("abc"))
	store := fake.Store(t)
	if _, err := store.Stat(ctx, fake.URI("f.bin")); !errors.Is(err, objstore.ErrUnsupported) || !strings.Contains(err.Error(), fake.URI("f.bin")) || !strings.Contains(err.Error(), "ETag") {
		t.Errorf("Stat(no validators) = %v, want ErrUnsupported naming the URL and ETag", err)
	}
	// Plain HTTP only to loopback; checked before anything is sent.
	for _, uri := range []string{"http://example.com/a.parquet", "http://10.1.2.3/a.parquet", "http://[2001:db8::1]/a"} {
		if _, err := store.Stat(ctx, uri); !errors.Is(err, objstore.ErrUnsupported) || !strings.Contains(err.Error(), "loopback") {
			t.Errorf("Stat(%s) = %v, want ErrUnsupported saying loopback only", uri, err)
		}
		if err := store.ReadAt(ctx, objstore.Object{URI: uri}, make([]byte, 1), 0); !errors.Is(err, objstore.ErrUnsupported) {
			t.Errorf("ReadAt(%s) = %v, want ErrUnsupported", uri, err)
		}
	}
	for _, uri := range []string{"https://user:pw@127.0.0.1/x", "https:///x"} {
		if _, err := store.Stat(ctx, uri); err == nil {
			t.Errorf("Stat(%s) = nil error", uri)
		}
	}
	// A redirect to plain HTTP elsewhere is not followed.
	redir := httptest.NewServer(http.RedirectHandler("http://192.0.2.1/a.parquet", http.StatusFound))
	defer redir.Close()
	if _, err := store.Stat(ctx, redir.URL+"/a.parquet"); !errors.Is(err, objstore.ErrUnsupported) || !strings.Contains(err.Error(), "loopback") {
		t.Errorf("Stat(redirect to http://192.0.2.1) = %v, want ErrUnsupported saying loopback only", err)
	}
}

// TestHTTPSHeader: WithHTTPSHeader's header reaches the server (a bearer
// token for a private repository).
func TestHTTPSHeader(t *testing.T) {
	fake := objstoretest.NewFakeHTTP(t, false)
	fake.Write(t, "f.bin", []byte("secret bytes"))
	guard := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok" {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		fake.ServeHTTP(w, r)
	}))
	defer guard.Close()
	ctx := context.Background()
	if _, err := objstore.NewHTTPSStore().Stat(ctx, guard.URL+"/f.bin"); !errors.Is(err, objstore.ErrPermission) {
		t.Errorf("Stat without the token = %v, want ErrPermission", err)
	}
	s := objstore.NewHTTPSStore(objstore.WithHTTPSHeader("Authorization", "Bearer tok"))
	obj, err := s.Stat(ctx, guard.URL+"/f.bin")
	if err != nil {
		t.Fatal(err)
	}
	checkRead(t, s, obj, []byte("secret bytes"), 7, 5)
}

// TestHTTPSStatRetries: Stat retries 5xx and throttling within the store's
// budget, then fails with ErrUnavailable naming the URL.
func TestHTTPSStatRetries(t *testing.T) {
	ctx := context.Background()
	fake := objstoretest.NewFakeHTTP(t, false)
	fake.Write(t, "a.bin", []byte("abc"))
	proxy := objstoretest.NewFaultFrontFor(t, fake.URL, func(r *http.Request) bool { return r.Method == http.MethodHead })
	store := objstore.NewHTTPSStore(objstore.WithHTTPSRetry(fastPolicy(4)))
	defer store.Close()
	uri := proxy.URL() + "/a.bin"
	proxy.Arm(objstoretest.FaultStatus, http.StatusTooManyRequests, 0, 2)
	if got, err := store.Stat(ctx, uri); err != nil || got.Size != 3 {
		t.Errorf("Stat after two 429s = %+v, %v; want the object", got, err)
	}
	proxy.Seen()
	proxy.Arm(objstoretest.FaultStatus, http.StatusBadGateway, 0, -1)
	if _, err := store.Stat(ctx, uri); !errors.Is(err, objstore.ErrUnavailable) || !strings.Contains(err.Error(), uri) {
		t.Errorf("Stat under a 502 outage = %v, want ErrUnavailable naming %s", err, uri)
	}
	if n, _ := proxy.Seen(); n != 4 {
		t.Errorf("Stat under a 502 outage: %d requests, want 4 (the attempt budget)", n)
	}
}

// TestHTTPSReplacedMidRead: a file replaced between a read's broken-off
// attempt and its resumption is an error naming it, never a mix of the two
// versions, also for an Object that carries no version (the read pins the
// version of its first response).
func TestHTTPSReplacedMidRead(t *testing.T) {
	ctx := context.Background()
	fake := objstoretest.NewFakeHTTP(t, false)
	data := randBytes(newRand(t), 50_000)
	var mu sync.Mutex
	gets := 0
	replacer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if objstoretest.IsRangedGet(r) {
			mu.Lock()
			gets++
			if gets == 2 {
				other := append([]byte(nil), data...)
				other[len(other)-1] ^= 1
				fake.Write(t, "f.bin", other)
			}
			mu.Unlock()
		}
		fake.ServeHTTP(w, r)
	}))
	defer replacer.Close()
	proxy := objstoretest.NewFaultFrontFor(t, replacer.URL, objstoretest.IsRangedGet)
	store := objstore.NewHTTPSStore(objstore.WithHTTPSRetry(fastPolicy(5)))
	defer store.Close()
	uri := proxy.URL() + "/f.bin"
	for _, name := range []string{"stat'ed", "bare"} {
		fake.Write(t, "f.bin", data)
		obj, err := store.Stat(ctx, uri)
		if err != nil {
			t.Fatal(err)
		}
		if name == "bare" {
			obj = objstore.Object{URI: uri}
		}
		mu.Lock()
		gets = 0
		mu.Unlock()
		proxy.Arm(objstoretest.FaultCut, 0, 1000, 1)
		err = store.ReadAt(ctx, obj, make([]byte, 40_000), 0)
		if !errors.Is(err, objstore.ErrNotFound) || !strings.Contains(err.Error(), uri) || !strings.Contains(err.Error(), "changed") {
			t.Errorf("%s: ReadAt across a replacement = %v, want ErrNotFound naming %s and saying it changed", name, err, uri)
		}
	}
}

// TestHTTPSEncodedBody: a server that compresses the body unasked is refused
// naming the URL and the encoding (its bytes are not the file's).
func TestHTTPSEncodedBody(t *testing.T) {
	fake := objstoretest.NewFakeHTTP(t, false)
	fake.Write(t, "f.bin", []byte("0123456789"))
	gz := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			w.Header().Set("Content-Encoding", "gzip")
		}
		fake.ServeHTTP(w, r)
	}))
	defer gz.Close()
	store := objstore.NewHTTPSStore()
	obj, err := store.Stat(context.Background(), gz.URL+"/f.bin")
	if err != nil {
		t.Fatal(err)
	}
	err = store.ReadAt(context.Background(), obj, make([]byte, 4), 2)
	if !errors.Is(err, objstore.ErrUnsupported) || !strings.Contains(err.Error(), obj.URI) || !strings.Contains(err.Error(), "gzip") {
		t.Errorf("ReadAt(gzip body) = %v, want ErrUnsupported naming the URL and the encoding", err)
	}
}

// TestHTTPSHeadForbidden: a server that refuses HEAD with 403 (a redirect to
// a URL signed for GET only) is asked with a ranged GET instead; one that
// refuses both is ErrPermission.
func TestHTTPSHeadForbidden(t *testing.T) {
	fake := objstoretest.NewFakeHTTP(t, false)
	data := []byte("0123456789abcdef")
	fake.Write(t, "f.bin", data)
	fake.Write(t, "private.bin", data)
	signed := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodHead || strings.HasPrefix(r.URL.Path, "/private") {
			http.Error(w, "signature does not match", http.StatusForbidden)
			return
		}
		fake.ServeHTTP(w, r)
	}))
	defer signed.Close()
	redirect := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, signed.URL+r.URL.Path, http.StatusFound)
	}))
	defer redirect.Close()
	store := objstore.NewHTTPSStore()
	ctx := context.Background()
	obj, err := store.Stat(ctx, redirect.URL+"/f.bin")
	if err != nil || obj.Size != int64(len(data)) {
		t.Fatalf("Stat(HEAD forbidden) = %+v, %v; want the size from a ranged GET", obj, err)
	}
	checkRead(t, store, obj, data, 3, 10)
	if _, err := store.Stat(ctx, redirect.URL+"/private.bin"); !errors.Is(err, objstore.ErrPermission) {
		t.Errorf("Stat(all forbidden) = %v, want ErrPermission", err)
	}
}

// TestHTTPSMatchQuery: over https, '?' starts a query, not a glob: a URL with
// one matches itself (a Hugging Face "?download=true" link).
func TestHTTPSMatchQuery(t *testing.T) {
	fake := objstoretest.NewFakeHTTP(t, true)
	fake.Write(t, "f.bin", []byte("abc"))
	store := fake.Store(t)
	uri := fake.URI("f.bin?download=true")
	got, err := objstore.Match(context.Background(), store, []string{uri})
	if err != nil || len(got) != 1 || got[0].URI != uri || got[0].Size != 3 {
		t.Errorf("Match(%q) = %+v, %v; want the one object", uri, got, err)
	}
}
