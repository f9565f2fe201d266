package transport

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestRoots(t *testing.T) {
	locs := mustParseRoots(t, "/data", "gs://bucket/train", "gs://whole")
	cases := []struct {
		uri string
		ok  bool
	}{
		{"/data", true},
		{"/data/a/*.parquet", true},
		{"/data//a/./b.parquet", true},
		{"file:///data/a.parquet", true},
		{"/database/a", false},
		{"/dat*/a", false},
		{"/etc/passwd", false},
		{"/data/../etc/passwd", false},
		{"/data/a/..", false},
		{"../data/a", false},
		{"data/a", false},
		{"gs://bucket/train/a.parquet", true},
		{"gs://bucket/train", true},
		{"gs://bucket/training/a", false},
		{"gs://bucket/test/a", false},
		{"gs://bucket/train/../test/a", false},
		{"gs://whole/any/thing", true},
		{"gs://other/train/a", false},
		{"gs:///train", false},
		{"s3://bucket/train/a", false},
		{"file://data/a", false},
		{`/data/a..b/c`, true}, // ".." inside a name is not a segment
		{`/data/..\etc`, false},
		{`/data\..\etc`, false},
	}
	for _, tc := range cases {
		err := checkRoots([]string{tc.uri}, locs)
		if (err == nil) != tc.ok {
			t.Errorf("checkRoots(%q) = %v, want ok=%v", tc.uri, err, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrPermissionDenied) {
			t.Errorf("checkRoots(%q) = %v, want ErrPermissionDenied", tc.uri, err)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	dir := t.TempDir()
	tok := filepath.Join(dir, "token")
	if err := os.WriteFile(tok, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	cert, key := writeCert(t, dir)
	root := WithAllowedRoots("/data")
	cases := []struct {
		name string
		opts []Option
		want []string // nil: valid
	}{
		{"defaults", []Option{root}, nil},
		{"unix", []Option{root, WithAddress("unix:///tmp/x.sock")}, nil},
		{"localhost", []Option{root, WithAddress("localhost:8815")}, nil},
		{"ipv6 loopback", []Option{root, WithAddress("[::1]:0")}, nil},
		{"network without TLS", []Option{root, WithAddress("0.0.0.0:8815")},
			[]string{`listen address "0.0.0.0:8815" is not loopback`, "--tls-cert", "--token-file", "--insecure-network"}},
		{"empty host", []Option{root, WithAddress(":8815")}, []string{`":8815" is not loopback`}},
		{"host name", []Option{root, WithAddress("example.com:8815")}, []string{"is not loopback"}},
		{"network with token only", []Option{root, WithAddress("10.0.0.1:1"), WithTokenFile(tok)}, []string{"is not loopback"}},
		{"network with TLS and token", []Option{root, WithAddress("10.0.0.1:1"), WithTLS(cert, key), WithTokenFile(tok)}, nil},
		{"network insecure", []Option{root, WithAddress("0.0.0.0:0"), WithInsecureNetwork(true)}, nil},
		{"metrics on network", []Option{root, WithMetricsAddress("0.0.0.0:9090")}, []string{`metrics address "0.0.0.0:9090" is not loopback`}},
		{"everything wrong", []Option{
			WithAddress("nonsense"), WithTLS(cert, ""), WithTokenFile(empty), WithMaxStreams(0),
			WithPrefetch(-1), WithMemoryBudget(-1), WithMaxMessageSize(100), WithLogger(nil),
		}, []string{"listen address", "without a key file", "is empty", "no allowed roots", "max streams 0",
			"prefetch depth -1", "memory budget -1", "max message size 100", "logger is nil", "9 problems"}},
		{"negative arena", []Option{root, WithShmArena(-1)}, []string{"shared-memory arena -1 must be >= 0"}},
		{"bad files", []Option{root, WithTLS(filepath.Join(dir, "nope.pem"), key), WithTokenFile(filepath.Join(dir, "nope"))},
			[]string{"nope.pem", "token file"}},
		{"bad roots", []Option{WithAllowedRoots("/data/../etc", "ftp://x")}, []string{`"/data/../etc" has a ".." segment`, `scheme "ftp"`}},
	}
	for _, tc := range cases {
		err := NewConfig(tc.opts...).Validate()
		if tc.want == nil {
			if err != nil {
				t.Errorf("%s: Validate() = %v, want nil", tc.name, err)
			}
			continue
		}
		if !errors.Is(err, ErrConfig) {
			t.Errorf("%s: Validate() = %v, want ErrConfig", tc.name, err)
			continue
		}
		if missing := containsAll(err.Error(), tc.want...); len(missing) > 0 {
			t.Errorf("%s: Validate() = %v, lacks %q", tc.name, err, missing)
		}
	}
	if _, err := New(&DemoBackend{}, WithAddress("0.0.0.0:1"), root); !errors.Is(err, ErrConfig) {
		t.Errorf("New(non-loopback, no TLS) = %v, want ErrConfig", err)
	}
	if _, err := New(nil, root); !errors.Is(err, ErrConfig) {
		t.Errorf("New(nil backend) = %v, want ErrConfig", err)
	}
}
