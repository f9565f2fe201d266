package transport

import (
	"errors"
	"testing"
)

func TestAzureRoots(t *testing.T) {
	var locs []location
	for _, r := range []string{"az://data/train", "abfs://other@acct.dfs.core.windows.net/eval", "/local"} {
		l, err := parseRoot(r)
		if err != nil {
			t.Fatal(err)
		}
		locs = append(locs, l)
	}
	for _, tc := range []struct {
		uri string
		ok  bool
	}{
		{"az://data/train/a.parquet", true},
		{"az://data/train", true},
		{"az://data/train/**/*.parquet", true},
		{"abfs://data/train/a.parquet", true}, // the same blobs, another spelling
		{"abfss://data/train/a.parquet", true},
		{"az://data/training/a", false},
		{"az://data/test/a", false},
		{"az://data/train/../test/a", false},
		{"az://data2/train/a", false},
		{"az:///train/a", false},
		{"abfs://data@acct.dfs.core.windows.net/train/a", false}, // names an account the root does not
		{"abfs://other@acct.dfs.core.windows.net/eval/x", true},
		{"abfs://other@ACCT.dfs.core.windows.net/eval/x", true},
		{"az://other@acct.blob.core.windows.net/eval/x", true}, // dfs and blob hosts of one account
		{"abfs://other@acct2.dfs.core.windows.net/eval/x", false},
		{"abfs://other/eval/x", false}, // the server's account, not acct
		{"abfs://other@.dfs.core.windows.net/eval/x", false},
		{"gs://data/train/a", false},
	} {
		err := checkRoots([]string{tc.uri}, locs)
		if (err == nil) != tc.ok {
			t.Errorf("checkRoots(%q) = %v, want ok=%v", tc.uri, err, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrPermissionDenied) {
			t.Errorf("checkRoots(%q) = %v, want ErrPermissionDenied", tc.uri, err)
		}
	}
	if got := locs[1].String(); got != "az://other@acct.blob.core.windows.net/eval" {
		t.Errorf("root String() = %q", got)
	}
}
