package objstoretest

import (
	"context"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshfeed/meshfeed/objstore"
)

// HTTPMode is how a FakeHTTP misbehaves; the zero value serves files as a
// well-behaved static file server does (Range, HEAD, a strong ETag,
// Last-Modified, conditional requests: http.ServeContent).
type HTTPMode struct {
	// IgnoreRange answers every GET with 200 and the whole file, as a server
	// without range support does.
	IgnoreRange bool
	// NoETag leaves out the ETag header (Last-Modified alone identifies).
	NoETag bool
	// WeakETag sends a weak ETag ("W/...").
	WeakETag bool
	// NoLastModified leaves out Last-Modified.
	NoLastModified bool
	// NoHEAD answers HEAD with 405 Method Not Allowed.
	NoHEAD bool
}

// FakeHTTP is a static file server on 127.0.0.1 over a directory, with
// range support (http.ServeContent), an ETag from each file's modification
// time and size, and Last-Modified; optionally over TLS with a certificate
// that stores made by Store trust. Everything it starts is stopped by
// t.Cleanup.
type FakeHTTP struct {
	// URL is the base URL, "http://127.0.0.1:PORT" or "https://127.0.0.1:PORT".
	URL string
	// Dir is the directory served: URL/name is Dir/name.
	Dir string
	// RootCAs trusts the server's certificate (nil without TLS).
	RootCAs *x509.CertPool

	mu   sync.Mutex
	mode HTTPMode
}

// NewFakeHTTP starts a FakeHTTP over a new temporary directory, over TLS
// when tls is set.
func NewFakeHTTP(t testing.TB, tls bool) *FakeHTTP {
	t.Helper()
	f := &FakeHTTP{Dir: t.TempDir()}
	var srv *httptest.Server
	if tls {
		srv = httptest.NewTLSServer(f)
		f.RootCAs = x509.NewCertPool()
		f.RootCAs.AddCert(srv.Certificate())
	} else {
		srv = httptest.NewServer(f)
	}
	t.Cleanup(srv.Close)
	f.URL = srv.URL
	return f
}

// SetMode changes how the server behaves from the next request on.
func (f *FakeHTTP) SetMode(m HTTPMode) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mode = m
}

// ServeHTTP serves the file at the request's path.
func (f *FakeHTTP) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	mode := f.mode
	f.mu.Unlock()
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	if mode.NoHEAD && r.Method == http.MethodHead {
		http.Error(w, "no HEAD here", http.StatusMethodNotAllowed)
		return
	}
	name := path.Clean("/" + r.URL.Path)[1:]
	root, err := os.OpenRoot(f.Dir)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	defer root.Close()
	file, err := root.Open(filepath.FromSlash(name))
	if err != nil {
		http.NotFound(w, r)
		return
	}
	defer file.Close()
	info, err := file.Stat()
	if err != nil || !info.Mode().IsRegular() {
		http.NotFound(w, r)
		return
	}
	etag := fmt.Sprintf(`"%x-%x"`, info.ModTime().UnixNano(), info.Size())
	if mode.WeakETag {
		etag = "W/" + etag
	}
	if !mode.NoETag {
		w.Header().Set("ETag", etag)
	}
	mtime := info.ModTime()
	if mode.NoLastModified {
		mtime = time.Time{}
	}
	if mode.IgnoreRange {
		if !mtime.IsZero() {
			w.Header().Set("Last-Modified", mtime.UTC().Format(http.TimeFormat))
		}
		w.Header().Set("Content-Length", fmt.Sprint(info.Size()))
		w.WriteHeader(http.StatusOK)
		if r.Method == http.MethodGet {
			io.Copy(w, file)
		}
		return
	}
	http.ServeContent(w, r, name, mtime, file)
}

// Store returns an HTTPSStore that trusts the server, closed at the end of
// the test. opts come after the trust option.
func (f *FakeHTTP) Store(t testing.TB, opts ...objstore.HTTPSOption) *objstore.HTTPSStore {
	t.Helper()
	s := objstore.NewHTTPSStore(append(f.Options(), opts...)...)
	t.Cleanup(func() { s.Close() })
	return s
}

// Options are the options of a store that trusts the server.
func (f *FakeHTTP) Options() []objstore.HTTPSOption {
	if f.RootCAs == nil {
		return nil
	}
	return []objstore.HTTPSOption{objstore.WithHTTPSRootCAs(f.RootCAs)}
}

// URI returns the URL of name ("a/b.parquet") on the server.
func (f *FakeHTTP) URI(name string) string { return f.URL + "/" + name }

// Write writes data at name in the served directory, replacing the file
// there by a rename, with a modification time at least a second after the
// previous file's (Last-Modified has one-second resolution, so a
// replacement is always visible).
func (f *FakeHTTP) Write(t testing.TB, name string, data []byte) {
	t.Helper()
	p := filepath.Join(f.Dir, filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	mtime := time.Now()
	if old, err := os.Stat(p); err == nil && !mtime.After(old.ModTime().Add(time.Second)) {
		mtime = old.ModTime().Add(time.Second)
	}
	tmp := p + ".tmp-write"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(tmp, mtime, mtime); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, p); err != nil {
		t.Fatal(err)
	}
}

// Put writes data at uri (a URL on this server) and returns the object as
// store's Stat reports it afterwards. It is a PutFunc for Conformance.
func (f *FakeHTTP) Put(t testing.TB, store objstore.Store, uri string, data []byte) objstore.Object {
	t.Helper()
	name, ok := strings.CutPrefix(uri, f.URL+"/")
	if !ok {
		t.Fatalf("objstoretest: Put(%q): not a URL on %s", uri, f.URL)
	}
	f.Write(t, name, data)
	obj, err := store.Stat(context.Background(), uri)
	if err != nil {
		t.Fatalf("objstoretest: Put(%q): stat after write: %v", uri, err)
	}
	if obj.Size != int64(len(data)) {
		t.Fatalf("objstoretest: Put(%q): stat size %d, wrote %d bytes", uri, obj.Size, len(data))
	}
	return obj
}
