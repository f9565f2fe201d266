package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPlanMixture: plan --mixture prints the mixture's steps and per-source
// rows; with weights 0.5/0.5 over 100 and 300 rows, B=8, D=2 and
// first_exhausted under drop, the 100-row source runs out first: 100 rows at
// 4 a step are 25 steps, its rows all delivered, the other's 100.
func TestPlanMixture(t *testing.T) {
	a, _ := planDataset(t, 100, 1, 30)
	b, _ := planDataset(t, 300, 2, 40)
	spec := filepath.Join(t.TempDir(), "mix.json")
	m := `{"sources": [{"datasets": ["` + a + `/*.parquet"], "weight": 0.5, "columns": [{"name": "id"}]},
	                   {"datasets": ["` + b + `/*.parquet"], "weight": 0.5, "columns": [{"name": "id"}]}],
	       "stop": {"rule": "first_exhausted"}, "source_column": "source"}`
	if err := os.WriteFile(spec, []byte(m), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := planRunRaw(t, "--json", "--mixture", spec, "--global-batch-size", "8", "--num-slices", "2")
	if err != nil {
		t.Fatalf("plan --mixture: %v", err)
	}
	var raw struct {
		Steps   int64 `json:"steps"`
		Sources []struct {
			Rows          int64 `json:"rows"`
			DeliveredRows int64 `json:"delivered_rows"`
		} `json:"sources"`
	}
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		t.Fatalf("invalid JSON %v:\n%s", err, out)
	}
	if raw.Steps != 25 || len(raw.Sources) != 2 || raw.Sources[0].Rows != 100 || raw.Sources[0].DeliveredRows != 100 ||
		raw.Sources[1].Rows != 300 || raw.Sources[1].DeliveredRows != 100 {
		t.Errorf("plan --mixture = %s, want 25 steps, sources 100/100 and 300/100 rows", out)
	}
	table, err := planRunRaw(t, "--mixture", spec, "--global-batch-size", "8", "--num-slices", "2")
	if err != nil || !strings.Contains(table, "steps") || !strings.Contains(table, a) {
		t.Errorf("plan --mixture table: %v\n%s", err, table)
	}
	if _, err := planRunRaw(t, "--mixture", spec, "--global-batch-size", "8", "--num-slices", "2", "--last-batch", "raise"); err != nil {
		t.Errorf("raise with an exact end: %v", err)
	}
}
