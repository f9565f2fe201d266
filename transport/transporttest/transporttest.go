package transporttest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/meshfeed/meshfeed/transport"
)

// Discard is a logger that drops everything (no log noise in tests).
var Discard = slog.New(slog.NewTextHandler(io.Discard, nil))

// Net is how a test reaches its server.
type Net string

const (
	Bufconn Net = "bufconn"
	Unix    Net = "unix"
	TCP     Net = "tcp"
)

// Server is a running server and a Flight client connected to it.
type Server struct {
	Srv    *transport.Server
	Client flight.Client
	Conn   *grpc.ClientConn
	Target string
	done   chan error
	once   sync.Once
}

// Start runs a server over backend, reached through kind, and stops it (and
// the client) at cleanup. The server logs nothing and allows the roots
// "/data" and "gs://bucket/train" unless opts say otherwise; dialOpts are
// added to the client's (insecure credentials unless creds are given).
func Start(t testing.TB, kind Net, backend transport.Backend, opts []transport.Option, dialOpts ...grpc.DialOption) *Server {
	t.Helper()
	var lis net.Listener
	var target string
	base := []transport.Option{transport.WithLogger(Discard), transport.WithAllowedRoots("/data", "gs://bucket/train")}
	switch kind {
	case Bufconn:
		bl := bufconn.Listen(1 << 20)
		lis = bl
		target = "passthrough:///bufnet"
		dialOpts = append(dialOpts, grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			return bl.DialContext(ctx)
		}))
	case Unix:
		// Socket paths are limited to ~108 bytes: t.TempDir can be long.
		sock := filepath.Join(t.TempDir(), "s.sock")
		if len(sock) > 100 {
			t.Fatalf("socket path %q too long", sock)
		}
		base = append(base, transport.WithAddress("unix://"+sock))
		target = "unix://" + sock
	case TCP:
		base = append(base, transport.WithAddress("127.0.0.1:0"))
	}
	srv, err := transport.New(backend, append(base, opts...)...)
	if err != nil {
		t.Fatalf("transport.New: %v", err)
	}
	if lis == nil {
		if lis, err = srv.Listen(); err != nil {
			t.Fatalf("Listen: %v", err)
		}
		if kind == TCP {
			target = lis.Addr().String()
		}
	}
	ts := &Server{Srv: srv, done: make(chan error, 1), Target: target}
	go func() { ts.done <- srv.Serve(lis) }()
	dialOpts = append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, dialOpts...)
	dialOpts = append(dialOpts, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(transport.DefaultMaxMessageSize)))
	conn, err := grpc.NewClient(target, dialOpts...)
	if err != nil {
		t.Fatalf("NewClient(%q): %v", target, err)
	}
	ts.Conn = conn
	ts.Client = flight.NewClientFromConn(conn, nil)
	t.Cleanup(func() { ts.Stop(t) })
	return ts
}

// Stop closes the client and shuts the server down, once.
func (ts *Server) Stop(t testing.TB) {
	ts.once.Do(func() {
		ts.Conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := ts.Srv.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if err := <-ts.done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
}

// Ticket encodes req.
func Ticket(t testing.TB, req *transport.Request) *flight.Ticket {
	t.Helper()
	b, err := req.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return &flight.Ticket{Ticket: b}
}

// WaitFor polls cond for up to 10 s.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// CheckGoroutines waits until the goroutine count is back to at most base
// (+slack), and fails with a dump of the goroutines if it does not get there.
func CheckGoroutines(t testing.TB, base, slack int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n := runtime.NumGoroutine()
		if n <= base+slack {
			return
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			t.Fatalf("goroutines: %d, want <= %d + %d; stacks:\n%s", n, base, slack, buf)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// CheckedMem returns a checked allocator that must be empty at cleanup
// (registered before the server's cleanup, so it runs after it).
func CheckedMem(t *testing.T) *memory.CheckedAllocator {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	t.Cleanup(func() { mem.AssertSize(t, 0) })
	return mem
}

// ContainsAll returns the substrings of subs that s lacks.
func ContainsAll(s string, subs ...string) []string {
	var missing []string
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			missing = append(missing, sub)
		}
	}
	return missing
}

// CheckStatus fails unless err is a status error with code whose message
// holds every string of msg.
func CheckStatus(t *testing.T, call string, err error, code codes.Code, msg []string) {
	t.Helper()
	if status.Code(err) != code {
		t.Errorf("%s: error = %v, want code %v", call, err, code)
		return
	}
	if missing := ContainsAll(status.Convert(err).Message(), msg...); len(missing) > 0 {
		t.Errorf("%s: message %q lacks %q", call, status.Convert(err).Message(), missing)
	}
}

// WriteCert writes a self-signed certificate for 127.0.0.1 and its key into
// dir, for servers with TLS, and returns their paths.
func WriteCert(t testing.TB, dir string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "meshfeed test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
		IsCA:                  true,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}
