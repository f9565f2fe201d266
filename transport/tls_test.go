package transport

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/flight"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
)

// writeCert writes a self-signed certificate for 127.0.0.1 and its key into
// dir and returns their paths.
func writeCert(t testing.TB, dir string) (certFile, keyFile string) {
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

func TestTLSAndToken(t *testing.T) {
	dir := t.TempDir()
	cert, key := writeCert(t, dir)
	tok := filepath.Join(dir, "token")
	if err := os.WriteFile(tok, []byte("right-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	pemBytes, err := os.ReadFile(cert)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pemBytes)
	creds := credentials.NewTLS(&tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12})
	ts := startServer(t, viaTCP, &DemoBackend{NumRows: 10}, []Option{WithTLS(cert, key), WithTokenFile(tok)},
		credsMarker{grpc.WithTransportCredentials(creds)})

	withToken := func(v string) context.Context {
		return metadata.AppendToOutgoingContext(context.Background(), "authorization", v)
	}
	cases := []struct {
		name string
		ctx  context.Context
		code codes.Code
		msg  string
	}{
		{"right token", withToken("Bearer right-token"), codes.OK, ""},
		{"wrong token", withToken("Bearer wrong-token"), codes.Unauthenticated, "wrong token"},
		{"token without Bearer", withToken("right-token"), codes.Unauthenticated, "wrong token"},
		{"missing token", context.Background(), codes.Unauthenticated, "missing"},
	}
	for _, tc := range cases {
		_, steps, err := readAll(t, tc.ctx, ts.client, ticket(t, baseRequest()))
		if tc.code == codes.OK {
			if err != nil || len(steps) != 3 {
				t.Errorf("%s: DoGet = %d steps, %v; want 3 steps", tc.name, len(steps), err)
			}
		} else {
			checkStatus(t, tc.name+": DoGet", err, tc.code, []string{tc.msg})
		}
		_, err = ts.client.GetFlightInfo(tc.ctx, cmdDescriptor(t, baseRequest()))
		if tc.code == codes.OK {
			if err != nil {
				t.Errorf("%s: GetFlightInfo = %v", tc.name, err)
			}
		} else {
			checkStatus(t, tc.name+": GetFlightInfo", err, tc.code, []string{tc.msg})
		}
	}
	// Health probes need no token.
	resp, err := healthpb.NewHealthClient(ts.conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil || resp.Status != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health Check without token = %v, %v; want SERVING", resp, err)
	}

	// A client without TLS cannot talk to the server at all.
	conn, err := grpc.NewClient(ts.target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	plain := flight.NewClientFromConn(conn, nil)
	if _, err := plain.GetFlightInfo(withToken("Bearer right-token"), cmdDescriptor(t, baseRequest())); err == nil {
		t.Errorf("plaintext client reached a TLS server")
	}
}
