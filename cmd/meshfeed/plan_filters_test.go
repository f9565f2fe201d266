package main

import (
	"strings"
	"testing"
)

// TestPlanFilters: --filters plans the rows the filter keeps, statistics
// ruling row groups out; a bad filter names the flag, the column and, where
// the files decide, the file.
func TestPlanFilters(t *testing.T) {
	dir, _ := planDataset(t, 1000, 2, 100)
	base := []string{"--data", dir, "--columns", "id", "--global-batch-size", "8", "--mesh", "data=4", "--batch-axes", "data"}
	rep := planRun(t, append(base, "--filters", `[["id", ">=", 250], ["id", "<", 430]]`)...)
	if rep.NumRows != 180 || rep.StepsPerEpoch != 180/8 {
		t.Errorf("plan --filters id in [250, 430): %d rows, %d steps, want 180 rows, %d steps", rep.NumRows, rep.StepsPerEpoch, 180/8)
	}
	var rgs int
	for _, p := range rep.Processes {
		rgs += p.RowGroups
	}
	if rgs != 3 {
		t.Errorf("the process reads %d row groups, want the 3 that hold ids 250..429", rgs)
	}
	for _, tc := range []struct {
		filters string
		want    []string
	}{
		{`[["id", "<>", 1]]`, []string{"--filters", `"<>"`}},
		{`[["nope", "==", 1]]`, []string{`"nope"`, "part-00000"}},
		{`[["label", "==", "x"]]`, []string{`"label"`, "part-00000", "string"}},
	} {
		_, err := planRunRaw(t, append(base, "--filters", tc.filters)...)
		if err == nil {
			t.Errorf("plan --filters %s: no error", tc.filters)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("plan --filters %s: error %q does not name %s", tc.filters, err, w)
			}
		}
	}
}
