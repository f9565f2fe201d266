package feed

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"

	"github.com/meshfeed/meshfeed/internal/datagen"
	"github.com/meshfeed/meshfeed/transport"
)

// escapeTree writes a dataset inside root/data and one outside the root, and
// the symlinks of every way out (see loader's roots_test.go for the same
// tree at the loader level). It returns the root.
func escapeTree(t *testing.T) string {
	t.Helper()
	base := t.TempDir()
	root, outside := filepath.Join(base, "root"), filepath.Join(base, "outside")
	spec := pipeSpec()
	for _, d := range []string{filepath.Join(root, "data"), filepath.Join(outside, "dir")} {
		if _, err := datagen.Write(context.Background(), datagen.LocalCreator{}, d, spec); err != nil {
			t.Fatal(err)
		}
	}
	files, _ := filepath.Glob(filepath.Join(outside, "dir", "*.parquet"))
	in, _ := filepath.Glob(filepath.Join(root, "data", "*.parquet"))
	b, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "secret.parquet"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"chain", "expand", "expand2"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, l := range [][2]string{
		{"../outside", "linkdir"},
		{"../outside/secret.parquet", "secret.parquet"},
		{in[0], "abs.parquet"},
		{"../hop2.parquet", "chain/hop.parquet"},
		{"../outside/secret.parquet", "hop2.parquet"},
		{"../../outside/dir", "expand/out"},
		{"../../outside/secret.parquet", "expand2/leak.parquet"},
		{"data", "inside"},
	} {
		if err := os.Symlink(l[0], filepath.Join(root, l[1])); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// TestRootsHoldOverFlight: a pipeline server on TCP with TLS and a token,
// --allow ROOT, asked with the right token for each way out of ROOT, refuses
// with PermissionDenied naming the path and the root, for GetFlightInfo and
// DoGet; a symlink that stays inside the root is served.
func TestRootsHoldOverFlight(t *testing.T) {
	root := escapeTree(t)
	dir := t.TempDir()
	cert, key := writeCert(t, dir)
	tok := filepath.Join(dir, "token")
	if err := os.WriteFile(tok, []byte("tok\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	pemBytes, err := os.ReadFile(cert)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pemBytes)
	creds := credentials.NewTLS(&tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12})
	p, err := NewPipeline(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	ts := startServer(t, viaTCP, p, []transport.Option{transport.WithTLS(cert, key), transport.WithTokenFile(tok), transport.WithAllowedRoots(root)},
		credsMarker{grpc.WithTransportCredentials(creds)})
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer tok")

	req := func(uri string) *transport.Request {
		r := pipeRequest(root, 10, 2, []int{0, 1}, transport.LastBatchPad)
		r.Datasets, r.Epochs = []string{uri}, 1
		return r
	}
	for _, tc := range []struct{ name, rel, names string }{
		{"symlinked dir to outside, by path", "linkdir/secret.parquet", "linkdir/secret.parquet"},
		{"symlinked dir to outside, as a directory", "linkdir", "linkdir"},
		{"symlinked file to outside", "secret.parquet", "secret.parquet"},
		{"glob through a symlinked dir", "linkdir/*.parquet", "linkdir"},
		{"glob matching a symlinked file", "*.parquet", "abs.parquet"}, // the first of abs.parquet, secret.parquet
		{"directory expansion meets a symlinked file leading out", "expand2", "expand2/leak.parquet"},
		{"directory expansion meets a symlinked dir leading out", "expand", "expand/out"},
		{"absolute symlink", "abs.parquet", "abs.parquet"},
		{"symlink chain that ends outside", "chain/hop.parquet", "chain/hop.parquet"},
		{"symlink chain that ends outside, by glob", "chain/*", "chain/hop.parquet"},
	} {
		uri := root + "/" + tc.rel
		msg := []string{root + "/" + tc.names, "outside the allowed roots", "root " + root}
		_, err := ts.Client.GetFlightInfo(ctx, cmdDescriptor(t, req(uri)))
		checkStatus(t, tc.name+": GetFlightInfo", err, codes.PermissionDenied, msg)
		steps, err := readSteps(t, ctx, ts.Client, req(uri), false)
		checkStatus(t, tc.name+": DoGet", err, codes.PermissionDenied, msg)
		if len(steps) != 0 {
			t.Errorf("%s: DoGet streamed %d steps", tc.name, len(steps))
		}
	}
	// ".." never reaches the store: the server refuses it lexically.
	_, err = readSteps(t, ctx, ts.Client, req(root+"/data/../../outside/secret.parquet"), false)
	checkStatus(t, "dot-dot: DoGet", err, codes.PermissionDenied, []string{".."})

	// Inside links are served: the same rows as the real directory.
	for _, rel := range []string{"data/*.parquet", "inside/*.parquet", "inside"} {
		steps, err := readSteps(t, ctx, ts.Client, req(root+"/"+rel), false)
		if err != nil || len(steps) != 11 { // ceil(103 / 10)
			t.Errorf("inside %s: DoGet = %d steps, %v; want 11 steps", rel, len(steps), err)
		}
	}
}

// TestPipelineRootsOnce: a Pipeline confined to roots refuses to serve a
// second server with other roots (transport.New fails), and accepts the same ones.
func TestPipelineRootsOnce(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	p, err := NewPipeline(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := transport.New(p, transport.WithLogger(discard), transport.WithAllowedRoots(a)); err != nil {
		t.Fatalf("New(roots %s) = %v", a, err)
	}
	if _, err := transport.New(p, transport.WithLogger(discard), transport.WithAllowedRoots(a)); err != nil {
		t.Errorf("New with the same roots again = %v", err)
	}
	if _, err := transport.New(p, transport.WithLogger(discard), transport.WithAllowedRoots(b)); err == nil || len(containsAll(err.Error(), "already confined", a, b)) > 0 {
		t.Errorf("New with other roots = %v; want an error naming both", err)
	}
}
