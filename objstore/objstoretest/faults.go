package objstoretest

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
)

// FaultKind is a fault a FaultFront injects into media (object data)
// requests.
type FaultKind int

const (
	// FaultNone injects nothing: every request passes through. Arming it
	// disarms the front.
	FaultNone FaultKind = iota
	// FaultStatus answers with an HTTP error status and a JSON error body,
	// without asking the upstream.
	FaultStatus
	// FaultCut sends the response head and the first at body bytes, then
	// closes the connection cleanly (FIN): the client reads an early EOF.
	FaultCut
	// FaultReset sends the response head and the first at body bytes, then
	// resets the connection (RST, SO_LINGER 0): the client reads ECONNRESET.
	FaultReset
	// FaultStall sends the response head and the first at body bytes, then
	// sends nothing more until the client gives up (or the test ends).
	FaultStall
)

// String returns the kind's name, "FaultStatus" and so on.
func (k FaultKind) String() string {
	switch k {
	case FaultNone:
		return "FaultNone"
	case FaultStatus:
		return "FaultStatus"
	case FaultCut:
		return "FaultCut"
	case FaultReset:
		return "FaultReset"
	case FaultStall:
		return "FaultStall"
	}
	return fmt.Sprintf("FaultKind(%d)", int(k))
}

// FaultFront is a deterministic fault-injecting HTTP reverse proxy on
// 127.0.0.1 in front of a GCS emulator (such as FakeGCS). The armed fault
// applies to the next n media requests (NewFaultFront: GET with alt=media; NewFaultFrontFor: its isMedia), then the front
// passes requests through again; n < 0 faults every media request, a
// permanent outage. Listing, stat and upload requests always pass through.
//
// Byte offsets count the identity-encoded body: the front strips the
// client's Accept-Encoding before forwarding. All methods are safe for
// concurrent use. Everything it starts is stopped by t.Cleanup, which also
// releases requests held by FaultStall.
type FaultFront struct {
	t         testing.TB
	upstream  *url.URL
	transport *http.Transport
	srv       *httptest.Server
	closing   chan struct{}
	isMedia   func(*http.Request) bool

	mu       sync.Mutex
	kind     FaultKind
	status   int
	at       int64 // body bytes sent before a cut, reset or stall
	n        int   // media requests still to fault (< 0: all)
	media    int   // media requests seen since the start
	injected int   // faults injected since the start
	log      int   // media requests seen since the last Seen
	ranges   []string
}

// NewFaultFront starts a FaultFront on a random port of 127.0.0.1 that
// forwards to upstream ("http://127.0.0.1:PORT", e.g. FakeGCS.URL), with no
// fault armed.
func NewFaultFront(t testing.TB, upstream string) *FaultFront {
	t.Helper()
	return NewFaultFrontFor(t, upstream, IsGCSMedia)
}

// IsGCSMedia reports whether r reads an object's bytes from the GCS JSON API
// (GET with alt=media).
func IsGCSMedia(r *http.Request) bool { return r.URL.Query().Get("alt") == "media" }

// IsRangedGet reports whether r is a GET with a Range header: how the S3,
// Azure Blob and HTTPS stores read an object's bytes.
func IsRangedGet(r *http.Request) bool {
	return r.Method == http.MethodGet && r.Header.Get("Range") != ""
}

// IsAzureRangedGet reports whether r is a ranged GET of Azure Blob Storage:
// the Go SDK (azblob) sends its range as x-ms-range, not Range.
func IsAzureRangedGet(r *http.Request) bool {
	return r.Method == http.MethodGet && (r.Header.Get("Range") != "" || r.Header.Get("X-Ms-Range") != "")
}

// NewFaultFrontFor is NewFaultFront for any HTTP object store: isMedia says
// which requests read object bytes (IsGCSMedia, IsRangedGet, or the store's
// own rule); only those are counted and faulted.
func NewFaultFrontFor(t testing.TB, upstream string, isMedia func(*http.Request) bool) *FaultFront {
	t.Helper()
	u, err := url.Parse(upstream)
	if err != nil || u.Scheme == "" || u.Host == "" {
		t.Fatalf("objstoretest: NewFaultFront(%q): want an http://host:port URL (%v)", upstream, err)
	}
	f := &FaultFront{
		t:         t,
		upstream:  u,
		transport: &http.Transport{DisableCompression: true},
		closing:   make(chan struct{}),
		isMedia:   isMedia,
	}
	f.srv = httptest.NewServer(f) // listens on 127.0.0.1
	t.Cleanup(func() {
		close(f.closing) // release stalled handlers
		f.srv.CloseClientConnections()
		f.srv.Close()
		f.transport.CloseIdleConnections()
	})
	return f
}

// URL returns the front's base URL, "http://127.0.0.1:PORT"; pass it to
// objstore.WithGCSEndpoint or NewStore.
func (f *FaultFront) URL() string { return f.srv.URL }

// Arm replaces the armed fault: the next n media requests (n < 0: all of
// them) get kind. status is the HTTP status FaultStatus answers with and is
// ignored by the other kinds; at is the number of body bytes FaultCut,
// FaultReset and FaultStall send before the fault, and is ignored by
// FaultStatus. Arm(FaultNone, 0, 0, 0) disarms the front. Invalid arguments
// fail the test.
func (f *FaultFront) Arm(kind FaultKind, status int, at int64, n int) {
	switch {
	case kind < FaultNone || kind > FaultStall:
		f.t.Errorf("objstoretest: FaultFront.Arm(%v): unknown fault kind", kind)
		return
	case kind == FaultStatus && (status < 100 || status > 999):
		f.t.Errorf("objstoretest: FaultFront.Arm(%v, %d): not an HTTP status", kind, status)
		return
	case at < 0:
		f.t.Errorf("objstoretest: FaultFront.Arm(%v, at=%d): negative byte offset", kind, at)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.kind, f.status, f.at, f.n = kind, status, at, n
}

// Counts returns the media requests seen and the faults injected since the
// front started. Seen does not reset them.
func (f *FaultFront) Counts() (media, injected int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.media, f.injected
}

// Seen returns the media requests seen since the previous call to Seen (or
// since the start) and their Range headers (x-ms-range where Range is
// absent) in arrival order ("" where a request had neither), and starts a
// new log.
func (f *FaultFront) Seen() (requests int, ranges []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	requests, ranges = f.log, f.ranges
	f.log, f.ranges = 0, nil
	return requests, ranges
}

// ServeHTTP forwards r to the upstream, injecting the armed fault into media
// requests.
func (f *FaultFront) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	kind, code, at := FaultNone, 0, int64(0)
	if f.isMedia(r) {
		f.mu.Lock()
		f.media++
		f.log++
		rg := r.Header.Get("Range")
		if rg == "" {
			rg = r.Header.Get("X-Ms-Range") // Azure Blob Storage's own spelling
		}
		f.ranges = append(f.ranges, rg)
		if f.kind != FaultNone && f.n != 0 {
			if f.n > 0 {
				f.n--
			}
			f.injected++
			kind, code, at = f.kind, f.status, f.at
		}
		f.mu.Unlock()
	}
	if kind == FaultStatus {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		fmt.Fprintf(w, `{"error":{"code":%d,"message":"injected by objstoretest.FaultFront"}}`, code)
		return
	}

	out := r.Clone(r.Context())
	out.RequestURI = ""
	out.URL.Scheme, out.URL.Host, out.Host = f.upstream.Scheme, f.upstream.Host, f.upstream.Host
	out.Header.Del("Accept-Encoding") // byte counts are on the identity body
	resp, err := f.transport.RoundTrip(out)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	if kind == FaultReset {
		f.reset(w, resp, at)
		return
	}
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	if resp.ContentLength >= 0 {
		w.Header().Set("Content-Length", fmt.Sprint(resp.ContentLength))
	}
	w.WriteHeader(resp.StatusCode)
	switch kind {
	case FaultCut:
		io.CopyN(w, resp.Body, at)
		http.NewResponseController(w).Flush()
		panic(http.ErrAbortHandler) // close the connection mid-body
	case FaultStall:
		io.CopyN(w, resp.Body, at)
		http.NewResponseController(w).Flush()
		select {
		case <-r.Context().Done(): // the client gave up
		case <-f.closing: // the test ended
		}
		panic(http.ErrAbortHandler)
	default:
		io.Copy(w, resp.Body)
	}
}

// reset writes the response head and at body bytes on the raw connection,
// then resets it (SO_LINGER 0: the peer reads ECONNRESET, not a clean EOF).
func (f *FaultFront) reset(w http.ResponseWriter, resp *http.Response, at int64) {
	conn, buf, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	defer conn.Close()
	fmt.Fprintf(buf, "HTTP/1.1 %s\r\n", resp.Status)
	resp.Header.Write(buf)
	fmt.Fprintf(buf, "\r\n")
	io.CopyN(buf, resp.Body, at)
	buf.Flush()
	if tc, ok := conn.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
}
