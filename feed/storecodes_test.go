package feed

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/meshfeed/meshfeed/objstore"
	"github.com/meshfeed/meshfeed/objstore/objstoretest"
	"github.com/meshfeed/meshfeed/transport"
)

// codeFor maps err with a backend's table, as the server does for errors
// that wrap none of transport's own sentinels; Internal when none matches.
func codeFor(table []transport.ErrorCode, err error) codes.Code {
	for _, r := range table {
		if errors.Is(err, r.Target) {
			return r.Code
		}
	}
	return codes.Internal
}

// Storage failures a request can provoke carry the codes docs/PROTOCOL.md
// gives them, not Internal: a malformed glob, a NUL byte and a pattern past
// the glob limits are INVALID_ARGUMENT, a symlink swapped in during the open
// (leading out, or looping) and an object the credentials may not read
// (docs/RELIABILITY.md) are PERMISSION_DENIED, a file truncated under the
// map cache is NOT_FOUND.
func TestStorageErrorCodes(t *testing.T) {
	ctx := context.Background()
	p, err := NewPipeline(ctx, WithCacheTTL(0))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	table := p.ErrorCodes()

	base := t.TempDir()
	root, outside := filepath.Join(base, "root"), filepath.Join(base, "outside")
	for _, d := range []string{root, outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(path string, n int) {
		t.Helper()
		if err := os.WriteFile(path, make([]byte, n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(root, "a.bin"), 10)
	write(filepath.Join(root, "b.bin"), 10)
	if err := os.MkdirAll(filepath.Join(root, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	write(filepath.Join(root, "sub", "c.bin"), 10)
	write(filepath.Join(outside, "secret"), 10)
	rooted := objstore.NewLocalStore(objstore.WithRoots(root), objstore.WithMapCache(1<<30))
	defer rooted.Close()

	swapped := func(target string) error {
		t.Helper()
		f := filepath.Join(root, "swap.bin")
		write(f, 10)
		obj, err := rooted.Stat(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		tmp := filepath.Join(root, ".tmp")
		if err := os.Symlink(target, tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, f); err != nil {
			t.Fatal(err)
		}
		defer os.Remove(f)
		return rooted.ReadAt(ctx, obj, make([]byte, 4), 0)
	}
	truncated := func() error {
		t.Helper()
		f := filepath.Join(root, "big.bin")
		write(f, 1<<20)
		obj, err := rooted.Stat(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		_, release, err := rooted.Map(ctx, obj, 0, 10)
		if err != nil {
			t.Fatal(err)
		}
		release()
		if err := os.Truncate(f, 100); err != nil {
			t.Fatal(err)
		}
		_, _, err = rooted.Map(ctx, obj, 512<<10, 10)
		return err
	}
	forbidden := func() error {
		t.Helper()
		fake := objstoretest.NewFakeGCS(t, "codes")
		obj := objstoretest.PutObject(t, fake.Store(t), "gs://codes/o.bin", make([]byte, 100))
		proxy := objstoretest.NewFaultFront(t, fake.URL)
		proxy.Arm(objstoretest.FaultStatus, http.StatusForbidden, 0, 1)
		return objstoretest.NewStore(t, proxy.URL()).ReadAt(ctx, obj, make([]byte, 10), 0)
	}
	matchErr := func(pat string, opts ...objstore.MatchOption) error {
		_, err := objstore.Match(ctx, rooted, []string{pat}, opts...)
		return err
	}
	infoErr := func(dataset string) error {
		_, err := p.Info(ctx, &transport.Request{Version: transport.Version, Datasets: []string{dataset}, GlobalBatchSize: 2,
			NumSlices: 1, Slices: []int{0}, LastBatch: transport.LastBatchPad})
		return err
	}
	for _, tc := range []struct {
		name string
		err  error
		want codes.Code
	}{
		{"malformed glob", matchErr(root + "/[x"), codes.InvalidArgument},
		{"malformed glob, through the pipeline", infoErr(root + "/[x"), codes.InvalidArgument},
		{"NUL byte", matchErr(root + "/a\x00.bin"), codes.InvalidArgument},
		{"NUL byte, through the pipeline", infoErr(root + "/a\x00.bin"), codes.InvalidArgument},
		{"too many matches", matchErr(root+"/*.bin", objstore.WithMaxMatches(1)), codes.InvalidArgument},
		{"too deep", matchErr(root+"/**", objstore.WithMaxGlobDepth(1)), codes.InvalidArgument},
		{"symlink swapped in, leading out", swapped("../outside/secret"), codes.PermissionDenied},
		{"symlink swapped in, looping", swapped("swap.bin"), codes.PermissionDenied},
		{"truncated under the map cache", truncated(), codes.NotFound},
		{"GCS 403", forbidden(), codes.PermissionDenied},
	} {
		if tc.err == nil {
			t.Errorf("%s: no error", tc.name)
			continue
		}
		if got := codeFor(table, tc.err); got != tc.want {
			t.Errorf("%s: %v maps to %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}
