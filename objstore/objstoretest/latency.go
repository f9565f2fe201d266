package objstoretest

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// LatencyFront is a reverse proxy in front of an HTTP object-store emulator
// (FakeGCS, an S3 or Azure emulator, an HTTP range server) that makes it
// behave like a remote store: every request waits Latency before its first
// byte, and response bodies share one aggregate bandwidth. It counts the
// requests and body bytes it forwards, so that tests can prove what a cache
// or a manifest spared.
//
// Listing and metadata requests pay the latency too; only bodies pay the
// bandwidth. Everything it starts is stopped by t.Cleanup.
type LatencyFront struct {
	// Latency is added before each request is forwarded.
	Latency time.Duration
	// BytesPerSec bounds the bytes per second of all response bodies
	// together; 0 means unbounded.
	BytesPerSec int64

	upstream  *url.URL
	transport *http.Transport
	srv       *httptest.Server

	requests atomic.Int64
	bytes    atomic.Int64

	mu   sync.Mutex
	next time.Time // when the shared link is free again
}

// NewLatencyFront starts a LatencyFront on a random port of 127.0.0.1 that
// forwards to upstream ("http://127.0.0.1:PORT").
func NewLatencyFront(t testing.TB, upstream string, latency time.Duration, bytesPerSec int64) *LatencyFront {
	t.Helper()
	u, err := url.Parse(upstream)
	if err != nil || u.Scheme == "" || u.Host == "" {
		t.Fatalf("objstoretest: NewLatencyFront(%q): want an http://host:port URL (%v)", upstream, err)
	}
	if latency < 0 || bytesPerSec < 0 {
		t.Fatalf("objstoretest: NewLatencyFront: latency %v and bandwidth %d must not be negative", latency, bytesPerSec)
	}
	f := &LatencyFront{
		Latency:     latency,
		BytesPerSec: bytesPerSec,
		upstream:    u,
		transport:   &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: 256},
	}
	f.srv = httptest.NewServer(f)
	t.Cleanup(func() {
		f.srv.CloseClientConnections()
		f.srv.Close()
		f.transport.CloseIdleConnections()
	})
	return f
}

// URL returns the front's base URL, "http://127.0.0.1:PORT".
func (f *LatencyFront) URL() string { return f.srv.URL }

// Requests returns the requests forwarded since the start.
func (f *LatencyFront) Requests() int64 { return f.requests.Load() }

// BodyBytes returns the response body bytes forwarded since the start.
func (f *LatencyFront) BodyBytes() int64 { return f.bytes.Load() }

// ServeHTTP waits the latency, forwards r, and copies the response body at
// the shared bandwidth.
func (f *LatencyFront) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.requests.Add(1)
	select {
	case <-time.After(f.Latency):
	case <-r.Context().Done():
		return
	}
	out := r.Clone(r.Context())
	out.RequestURI = ""
	out.URL.Scheme, out.URL.Host, out.Host = f.upstream.Scheme, f.upstream.Host, f.upstream.Host
	out.Header.Del("Accept-Encoding")
	resp, err := f.transport.RoundTrip(out)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	if resp.ContentLength >= 0 {
		w.Header().Set("Content-Length", fmt.Sprint(resp.ContentLength))
	}
	w.WriteHeader(resp.StatusCode)
	buf := make([]byte, 64<<10)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			f.pace(r, n)
			f.bytes.Add(int64(n)) // before the write: a client done reading sees the count
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err == io.EOF {
			return
		}
		if err != nil {
			panic(http.ErrAbortHandler)
		}
	}
}

// pace reserves n bytes of the shared link and sleeps until they have been
// "sent".
func (f *LatencyFront) pace(r *http.Request, n int) {
	if f.BytesPerSec <= 0 {
		return
	}
	d := time.Duration(float64(n) / float64(f.BytesPerSec) * float64(time.Second))
	f.mu.Lock()
	now := time.Now()
	if f.next.Before(now) {
		f.next = now
	}
	f.next = f.next.Add(d)
	until := f.next
	f.mu.Unlock()
	select {
	case <-time.After(time.Until(until)):
	case <-r.Context().Done():
	}
}
