package transport

import (
	"errors"
	"testing"
)

// TestRemoteRoots: s3:// and http(s):// roots are a bucket (or host) and a
// segment-wise prefix, as gs:// ones are; http(s) paths are checked
// percent-decoded, hosts without case.
func TestRemoteRoots(t *testing.T) {
	var locs []location
	for _, r := range []string{"s3://bucket/train", "https://huggingface.co/datasets/org/ds/resolve/main", "http://127.0.0.1:8080/data"} {
		l, err := parseRoot(r)
		if err != nil {
			t.Fatalf("parseRoot(%q) = %v", r, err)
		}
		locs = append(locs, l)
	}
	for _, tc := range []struct {
		uri string
		ok  bool
	}{
		{"s3://bucket/train/a.parquet", true},
		{"s3://bucket/train", true},
		{"s3://bucket/training/a", false},
		{"s3://bucket/train/../test/a", false},
		{"s3://other/train/a", false},
		{"gs://bucket/train/a", false},
		{"s3:///train", false},
		{"https://huggingface.co/datasets/org/ds/resolve/main/data/train-0.parquet", true},
		{"https://HuggingFace.co/datasets/org/ds/resolve/main/a.parquet", true},
		{"https://huggingface.co/datasets/org/ds/resolve/main/a.parquet?download=true", true},
		{"https://huggingface.co/datasets/org/other/resolve/main/a.parquet", false},
		{"https://huggingface.co/datasets/org/ds/resolve/main/%2e%2e/%2e%2e/other/x", false},
		{"https://huggingface.co/datasets/org/ds/resolve/main%2f..%2fx", false},
		{"https://huggingface.co/datasets/org/ds/resolve/main/../../x", false},
		{"https://user@huggingface.co/datasets/org/ds/resolve/main/a", false},
		{"https://evil.example/datasets/org/ds/resolve/main/a", false},
		{"http://huggingface.co/datasets/org/ds/resolve/main/a", false},
		{"http://127.0.0.1:8080/data/a.parquet", true},
		{"http://127.0.0.1:8081/data/a.parquet", false},
		{"ftp://127.0.0.1/data/a", false},
	} {
		err := checkRoots([]string{tc.uri}, locs)
		if (err == nil) != tc.ok {
			t.Errorf("checkRoots(%q) = %v, want ok=%v", tc.uri, err, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrPermissionDenied) {
			t.Errorf("checkRoots(%q) = %v, want ErrPermissionDenied", tc.uri, err)
		}
	}
}
