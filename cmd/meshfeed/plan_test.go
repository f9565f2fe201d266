package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/meshfeed/meshfeed/batching"
	"github.com/meshfeed/meshfeed/internal/datagen"
	"github.com/meshfeed/meshfeed/loader"
	"github.com/meshfeed/meshfeed/objstore"
)

// planJSON is the JSON contract of `plan --json`, spelled out independently of
// the command's own types so that a renamed key fails the tests.
type planJSON struct {
	NumRows         int64 `json:"num_rows"`
	Files           int   `json:"files"`
	TotalBytes      int64 `json:"total_bytes"`
	GlobalBatchSize int   `json:"global_batch_size"`
	DataParallel    int   `json:"data_parallel"`
	SliceRows       int   `json:"slice_rows"`
	StepsPerEpoch   int   `json:"steps_per_epoch"`
	DroppedRows     int64 `json:"dropped_rows"`
	PaddedRows      int64 `json:"padded_rows"`
	Devices         int   `json:"devices"`
	Processes       []struct {
		Process       int   `json:"process"`
		Devices       []int `json:"devices"`
		Slices        []int `json:"slices"`
		StepsPerEpoch int   `json:"steps_per_epoch"`
		StreamRows    int64 `json:"stream_rows"`
		RowGroups     int   `json:"row_groups"`
		Bytes         int64 `json:"bytes"`
	} `json:"processes"`
}

// planDataset writes a small Parquet dataset into a temporary directory.
func planDataset(t *testing.T, rows int64, files int, rowGroupRows int64) (string, datagen.Result) {
	t.Helper()
	spec := datagen.DefaultSpec()
	spec.Rows, spec.Files, spec.RowGroupRows, spec.Features = rows, files, rowGroupRows, 4
	dir := t.TempDir()
	res, err := datagen.Write(context.Background(), datagen.LocalCreator{}, dir, spec)
	if err != nil {
		t.Fatalf("datagen.Write: %v", err)
	}
	if res.Rows != rows {
		t.Fatalf("datagen wrote %d rows, want %d", res.Rows, rows)
	}
	return dir, res
}

// planRunRaw runs plan with args and returns what it printed.
func planRunRaw(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	oldOut, oldErr := planStdout, planStderr
	planStdout, planStderr = &out, io.Discard
	defer func() { planStdout, planStderr = oldOut, oldErr }()
	err := runPlanOrMixture(context.Background(), args)
	return out.String(), err
}

// planRun runs plan --json with args, decodes the report and checks the
// invariant every report must hold: every process has the plan's steps.
func planRun(t *testing.T, args ...string) planJSON {
	t.Helper()
	out, err := planRunRaw(t, append([]string{"--json"}, args...)...)
	if err != nil {
		t.Fatalf("runPlan(%q) = %v, want nil", args, err)
	}
	var rep planJSON
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("runPlan(%q) printed invalid JSON: %v\n%s", args, err, out)
	}
	if len(rep.Processes) == 0 {
		t.Fatalf("runPlan(%q) reported no processes", args)
	}
	for _, p := range rep.Processes {
		if p.StepsPerEpoch != rep.StepsPerEpoch {
			t.Errorf("runPlan(%q): process %d has %d steps per epoch, plan has %d", args, p.Process, p.StepsPerEpoch, rep.StepsPerEpoch)
		}
	}
	return rep
}

func TestPlanPolicies(t *testing.T) {
	const n = 1000
	dir, _ := planDataset(t, n, 2, 100)
	for _, tc := range []struct {
		policy string
		B      int
	}{
		{"drop", 64}, {"pad", 64}, {"drop", 40}, {"pad", 40}, {"raise", 40},
		{"drop", 1000}, {"pad", 1024}, {"drop", 4}, {"pad", 8},
	} {
		args := []string{"--data", dir, "--global-batch-size", fmt.Sprint(tc.B), "--mesh", "data=4,model=2", "--batch-axes", "data", "--last-batch", tc.policy}
		rep := planRun(t, args...)
		var steps int
		var dropped, padded int64
		switch tc.policy {
		case "drop", "raise":
			steps = n / tc.B
			if tc.policy == "drop" {
				dropped = int64(n - steps*tc.B)
			}
		case "pad":
			steps = (n + tc.B - 1) / tc.B
			padded = int64(steps*tc.B - n)
		}
		if rep.NumRows != n || rep.StepsPerEpoch != steps || rep.DroppedRows != dropped || rep.PaddedRows != padded {
			t.Errorf("plan(%s, B=%d) = rows %d, steps %d, dropped %d, padded %d; want %d, %d, %d, %d",
				tc.policy, tc.B, rep.NumRows, rep.StepsPerEpoch, rep.DroppedRows, rep.PaddedRows, n, steps, dropped, padded)
		}
		if rep.GlobalBatchSize != tc.B || rep.DataParallel != 4 || rep.SliceRows != tc.B/4 {
			t.Errorf("plan(%s, B=%d): B, D, b = %d, %d, %d; want %d, 4, %d",
				tc.policy, tc.B, rep.GlobalBatchSize, rep.DataParallel, rep.SliceRows, tc.B, tc.B/4)
		}
	}
}

func TestPlanRaiseRemainder(t *testing.T) {
	dir, _ := planDataset(t, 1000, 2, 100)
	_, err := planRunRaw(t, "--data", dir, "--global-batch-size", "64", "--mesh", "data=4,model=2", "--batch-axes", "data", "--last-batch", "raise")
	if !errors.Is(err, batching.ErrIndivisible) {
		t.Fatalf("plan(raise, N=1000, B=64) = %v, want an error wrapping batching.ErrIndivisible", err)
	}
	for _, want := range []string{"1000", "64", "40"} { // N, B, N mod B
		if !strings.Contains(err.Error(), want) {
			t.Errorf("plan(raise, N=1000, B=64) error %q does not contain %q", err, want)
		}
	}
}

// planExpectSlices derives, from the mesh rule alone, the slices each process
// needs: devices 0..N-1 laid row-major over shape, process = device / (N/P),
// slice = mixed-radix index of the device's coordinates along batchAxes.
func planExpectSlices(axes []string, shape []int, batchAxes []string, procs int) (devices, slicesOf map[int][]int) {
	n := 1
	for _, s := range shape {
		n *= s
	}
	devices, slicesOf = map[int][]int{}, map[int][]int{}
	for dev := range n {
		coord := make(map[string]int)
		rest := dev
		for i := len(shape) - 1; i >= 0; i-- {
			coord[axes[i]] = rest % shape[i]
			rest /= shape[i]
		}
		slice := 0
		for _, ba := range batchAxes {
			size := shape[slices.Index(axes, ba)]
			slice = slice*size + coord[ba]
		}
		p := dev / (n / procs)
		devices[p] = append(devices[p], dev)
		if !slices.Contains(slicesOf[p], slice) {
			slicesOf[p] = append(slicesOf[p], slice)
		}
	}
	for p := range slicesOf {
		slices.Sort(slicesOf[p])
	}
	return devices, slicesOf
}

func TestPlanProcessSlices(t *testing.T) {
	dir, _ := planDataset(t, 1000, 2, 100)
	for _, tc := range []struct {
		mesh      string
		axes      []string
		shape     []int
		batchAxes string
		procs     int
	}{
		{"data=4,model=2", []string{"data", "model"}, []int{4, 2}, "data", 2},
		{"data=4,model=2", []string{"data", "model"}, []int{4, 2}, "data", 1},
		{"data=4,model=2", []string{"data", "model"}, []int{4, 2}, "data", 4},
		{"data=4,model=2", []string{"data", "model"}, []int{4, 2}, "data", 8},
		{"model=2,data=4", []string{"model", "data"}, []int{2, 4}, "data", 2},
		{"data=2,fsdp=2,model=2", []string{"data", "fsdp", "model"}, []int{2, 2, 2}, "fsdp,data", 4},
		{"data=4,model=2", []string{"data", "model"}, []int{4, 2}, "", 2},
	} {
		rep := planRun(t, "--data", dir, "--global-batch-size", "64", "--mesh", tc.mesh, "--batch-axes", tc.batchAxes, "--processes", fmt.Sprint(tc.procs))
		var ba []string
		if tc.batchAxes != "" {
			ba = strings.Split(tc.batchAxes, ",")
		}
		wantDevices, wantSlices := planExpectSlices(tc.axes, tc.shape, ba, tc.procs)
		name := fmt.Sprintf("plan(--mesh %s --batch-axes %q --processes %d)", tc.mesh, tc.batchAxes, tc.procs)
		if len(rep.Processes) != tc.procs {
			t.Errorf("%s: %d processes, want %d", name, len(rep.Processes), tc.procs)
			continue
		}
		for i, p := range rep.Processes {
			if p.Process != i || !slices.Equal(p.Slices, wantSlices[i]) || !slices.Equal(p.Devices, wantDevices[i]) {
				t.Errorf("%s: process %d has devices %v slices %v, want process %d devices %v slices %v",
					name, p.Process, p.Devices, p.Slices, i, wantDevices[i], wantSlices[i])
			}
		}
	}
	// The case of the issue, spelled out: process 0 -> slices [0 1], process 1 -> [2 3].
	rep := planRun(t, "--data", dir, "--global-batch-size", "64", "--mesh", "data=4,model=2", "--batch-axes", "data", "--processes", "2")
	if len(rep.Processes) != 2 || !slices.Equal(rep.Processes[0].Slices, []int{0, 1}) || !slices.Equal(rep.Processes[1].Slices, []int{2, 3}) {
		t.Errorf("plan(data=4,model=2 over 2 processes) = %+v, want slices [0 1] and [2 3]", rep.Processes)
	}
}

// TestPlanSameStepsAnyProcesses: the steps and per-slice work do not depend on
// how many processes serve the plan (DESIGN.md invariants 1 and 2).
func TestPlanSameStepsAnyProcesses(t *testing.T) {
	dir, _ := planDataset(t, 999, 3, 70)
	var steps []int
	for _, procs := range []int{1, 2, 4, 8} {
		rep := planRun(t, "--data", dir, "--global-batch-size", "32", "--mesh", "data=4,model=2", "--batch-axes", "data",
			"--processes", fmt.Sprint(procs), "--last-batch", "pad", "--seed", "9", "--shuffle-window", "64")
		steps = append(steps, rep.StepsPerEpoch)
		var rows int64
		seen := map[int]bool{}
		for _, p := range rep.Processes {
			for _, d := range p.Slices {
				seen[d] = true
			}
			rows += p.StreamRows
		}
		// Up to 4 processes each slice (a data row of the mesh, 2 devices) has
		// one process; with 8 each slice is served by its 2 devices' processes.
		wantRows := int64(999)
		if procs == 8 {
			wantRows = 2 * 999
		}
		if rows != wantRows {
			t.Errorf("plan(--processes %d): stream rows sum to %d, want %d", procs, rows, wantRows)
		}
		if len(seen) != 4 {
			t.Errorf("plan(--processes %d) serves slices %v, want all 4", procs, seen)
		}
	}
	for _, s := range steps {
		if s != (999+31)/32 {
			t.Errorf("steps per epoch over 1, 2, 4, 8 processes = %v, want all %d", steps, (999+31)/32)
			break
		}
	}
}

func TestPlanBytes(t *testing.T) {
	dir, _ := planDataset(t, 1000, 3, 70)
	ctx := context.Background()
	store, err := objstore.NewStore(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	for _, tc := range []struct {
		columns []string
		extra   []string
	}{
		{nil, nil},
		{[]string{"id"}, nil},
		{[]string{"features", "label"}, []string{"--epoch", "2"}},
		{nil, []string{"--seed", "11", "--shuffle-window", "50", "--epoch", "1"}},
		{[]string{"id", "label"}, []string{"--seed", "3"}},
	} {
		ds, err := loader.Open(ctx, store, []string{dir}, loader.WithColumns(tc.columns...))
		if err != nil {
			t.Fatal(err)
		}
		var total, maxRG int64
		for _, rg := range ds.RowGroups() {
			total += rg.Bytes
			maxRG = max(maxRG, rg.Bytes)
		}
		args := []string{"--data", dir, "--global-batch-size", "32", "--mesh", "data=4,model=2", "--batch-axes", "data",
			"--processes", "2", "--last-batch", "pad"}
		if tc.columns != nil {
			args = append(args, "--columns", strings.Join(tc.columns, ","))
		}
		rep := planRun(t, append(args, tc.extra...)...)
		name := fmt.Sprintf("plan(columns %v, %v)", tc.columns, tc.extra)
		if rep.TotalBytes != total {
			t.Errorf("%s: total_bytes %d, want %d (sum of projected row group bytes)", name, rep.TotalBytes, total)
		}
		// Under pad every row is read by some process; a row group that a
		// stream edge cuts is read by both sides: at most 2 extra per stream.
		var sum int64
		for _, p := range rep.Processes {
			sum += p.Bytes
			perProc := total/int64(len(rep.Processes)) + 2*int64(len(p.Slices))*maxRG
			if p.Bytes <= 0 || p.Bytes > perProc {
				t.Errorf("%s: process %d reads %d bytes, want in (0, %d] (total/P + 2 row groups per stream)", name, p.Process, p.Bytes, perProc)
			}
		}
		if hi := total + 2*int64(rep.DataParallel)*maxRG; sum < total || sum > hi {
			t.Errorf("%s: processes read %d bytes in all, want in [%d, %d]", name, sum, total, hi)
		}
	}
	// Projection reaches the byte counts: one column is fewer bytes than all.
	all := planRun(t, "--data", dir, "--global-batch-size", "32", "--mesh", "data=4", "--batch-axes", "data")
	one := planRun(t, "--data", dir, "--global-batch-size", "32", "--mesh", "data=4", "--batch-axes", "data", "--columns", "id")
	if one.TotalBytes <= 0 || one.TotalBytes >= all.TotalBytes {
		t.Errorf("plan --columns id: total_bytes %d, want in (0, %d) (all columns)", one.TotalBytes, all.TotalBytes)
	}
}

func TestPlanTopology(t *testing.T) {
	dir, _ := planDataset(t, 1000, 2, 100)
	for _, tc := range []struct {
		topo, chips, mesh string
		axes              []string
		shape             []int
		procs             int
	}{
		{"2x2", "2", "data=4", []string{"data"}, []int{4}, 2},
		{"2x2", "2", "data=2,model=2", []string{"data", "model"}, []int{2, 2}, 2},
		{"4x4", "4", "data=4,model=4", []string{"data", "model"}, []int{4, 4}, 4},
		{"2x4", "2", "model=2,data=4", []string{"model", "data"}, []int{2, 4}, 4},
	} {
		rep := planRun(t, "--data", dir, "--global-batch-size", "64", "--mesh", tc.mesh, "--batch-axes", "data",
			"--topology", tc.topo, "--chips-per-host", tc.chips)
		name := fmt.Sprintf("plan(--topology %s --chips-per-host %s --mesh %s)", tc.topo, tc.chips, tc.mesh)
		if len(rep.Processes) != tc.procs {
			t.Errorf("%s: %d processes, want %d", name, len(rep.Processes), tc.procs)
			continue
		}
		// Topology numbers devices host by host and MakeMesh lays them
		// row-major, which is the contiguous-block rule with P = hosts.
		wantDevices, wantSlices := planExpectSlices(tc.axes, tc.shape, []string{"data"}, tc.procs)
		for i, p := range rep.Processes {
			if !slices.Equal(p.Slices, wantSlices[i]) || !slices.Equal(p.Devices, wantDevices[i]) {
				t.Errorf("%s: process %d has devices %v slices %v, want %v %v", name, p.Process, p.Devices, p.Slices, wantDevices[i], wantSlices[i])
			}
		}
	}
}

func TestPlanDataForms(t *testing.T) {
	dir, res := planDataset(t, 1000, 2, 100)
	f0, f1 := res.Files[0].URI, res.Files[1].URI
	for _, data := range [][]string{
		{"--data", dir},
		{"--data", f0, "--data", f1},
		{"--data", f0 + "," + f1},
		{"--data", filepath.Join(dir, "*.parquet")},
		{"--data", f0},
	} {
		rep := planRun(t, append(data, "--global-batch-size", "8", "--mesh", "data=2", "--batch-axes", "data")...)
		wantFiles, wantRows := 2, int64(1000)
		if len(data) == 2 && data[1] == f0 {
			wantFiles, wantRows = 1, res.Files[0].Rows
		}
		if rep.Files != wantFiles || rep.NumRows != wantRows {
			t.Errorf("plan(%q) = %d files, %d rows; want %d, %d", data, rep.Files, rep.NumRows, wantFiles, wantRows)
		}
	}
}

func TestPlanTable(t *testing.T) {
	dir, _ := planDataset(t, 1000, 2, 100)
	out, err := planRunRaw(t, "--data", dir, "--global-batch-size", "64", "--mesh", "data=4,model=2", "--batch-axes", "data", "--processes", "2")
	if err != nil {
		t.Fatalf("runPlan(table) = %v", err)
	}
	for _, want := range []string{"1000 rows", "15 steps per epoch", "40 rows dropped", "B=64", "D=4", "b=16", "PROCESS", "\n0 ", "\n1 "} {
		if !strings.Contains(out, want) {
			t.Errorf("plan table does not contain %q:\n%s", want, out)
		}
	}
	if strings.HasPrefix(strings.TrimSpace(out), "{") {
		t.Errorf("plan without --json printed JSON:\n%s", out)
	}
}

func TestPlanHelp(t *testing.T) {
	if _, err := planRunRaw(t, "--help"); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("runPlan(--help) = %v, want flag.ErrHelp", err)
	}
}

func TestPlanBadFlags(t *testing.T) {
	dir, _ := planDataset(t, 1000, 2, 100)
	base := []string{"--data", dir, "--global-batch-size", "64", "--mesh", "data=4,model=2", "--batch-axes", "data"}
	// without returns base less the named flag and its value.
	without := func(name string) []string {
		i := slices.Index(base, name)
		return append(slices.Clone(base[:i]), base[i+2:]...)
	}
	for _, tc := range []struct {
		args []string
		want []string // every one must appear in the error
	}{
		{without("--data"), []string{"--data"}},
		{without("--global-batch-size"), []string{"--global-batch-size"}},
		{without("--mesh"), []string{"--mesh", "name=size"}},
		{without("--batch-axes"), []string{"--batch-axes"}},
		{append(base, "stray"), []string{"stray", "--data"}},
		{append(base, "--global-batch-size", "0"), []string{"--global-batch-size", "positive"}},
		{append(base, "--global-batch-size", "-8"), []string{"--global-batch-size", "positive"}},
		{append(base, "--global-batch-size", "x"), []string{"-global-batch-size", "positive integer"}},
		{append(base, "--global-batch-size", "6"), []string{"--global-batch-size", "multiple", "D=4"}},
		{append(base, "--mesh", "data=4,model"), []string{"--mesh", `"data=4,model"`, "name=size"}},
		{append(base, "--mesh", "data=x"), []string{"--mesh", "name=size"}},
		{append(base, "--mesh", "data=0"), []string{"--mesh", "name=size"}},
		{append(base, "--mesh", "=4"), []string{"--mesh", "name=size"}},
		{append(base, "--mesh", "data=4,data=2"), []string{"--mesh", "twice"}},
		{append(base, "--mesh", "data=1048576,model=2"), []string{"--mesh", "devices"}},
		{append(without("--batch-axes"), "--batch-axes", "nope"), []string{"--batch-axes", "nope"}},
		{append(without("--batch-axes"), "--batch-axes", "data,data"), []string{"--batch-axes", "data"}},
		{append(base, "--processes", "3"), []string{"--processes", "divisor"}},
		{append(base, "--processes", "0"), []string{"--processes", "divisor"}},
		{append(base, "--processes", "16"), []string{"--processes", "divisor"}},
		{append(base, "--processes", "two"), []string{"-processes", "positive integer"}},
		{append(base, "--topology", "2x4"), []string{"--topology", "--chips-per-host"}},
		{append(base, "--chips-per-host", "4"), []string{"--chips-per-host", "--topology"}},
		{append(base, "--topology", "2x4", "--chips-per-host", "3"), []string{"--topology", "--chips-per-host"}},
		{append(base, "--topology", "2y4", "--chips-per-host", "4"), []string{"--topology", "4x4"}},
		{append(base, "--topology", "3x3", "--chips-per-host", "3"), []string{"--mesh", "--topology"}},
		{append(base, "--topology", "2x4", "--chips-per-host", "4", "--processes", "2"), []string{"--processes", "--topology"}},
		{append(base, "--last-batch", "keep"), []string{"--last-batch", "keep", "drop, pad, raise"}},
		{append(base, "--shuffle-window", "-1"), []string{"--shuffle-window"}},
		{append(base, "--shuffle-window", "10"), []string{"--shuffle-window", "--seed"}},
		{append(base, "--shuffle-window", "1e3"), []string{"-shuffle-window", "row count"}},
		{append(base, "--seed", "-1"), []string{"-seed", "unsigned"}},
		{append(base, "--epoch", "-1"), []string{"--epoch", ">= 0"}},
		{append(base, "--columns", "nope"), []string{"nope"}},
		{append(without("--data"), "--data", filepath.Join(dir, "missing")), []string{"missing"}},
	} {
		_, err := planRunRaw(t, tc.args...)
		if err == nil {
			t.Errorf("runPlan(%q) = nil, want an error containing %q", tc.args, tc.want)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("runPlan(%q) = %v, want an error containing %q", tc.args, err, w)
			}
		}
	}
}

// TestPlanShuffle: --seed turns on row-group shuffling and --shuffle-window sets
// W; the per-process read sets are those of batching's plan under that config.
func TestPlanShuffle(t *testing.T) {
	dir, _ := planDataset(t, 1000, 3, 70)
	ctx := context.Background()
	store, err := objstore.NewStore(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	ds, err := loader.Open(ctx, store, []string{dir})
	if err != nil {
		t.Fatal(err)
	}
	var rgs []batching.RowGroup
	for _, r := range ds.RowGroups() {
		rgs = append(rgs, batching.RowGroup{File: r.File, Index: r.Index, Rows: r.Rows, Bytes: r.Bytes})
	}
	procSlices := [][]int{{0, 1}, {2, 3}}
	differs := false
	for _, tc := range []struct {
		seed, epoch int
		window      int64
	}{{1, 0, 0}, {2, 1, 0}, {3, 2, 100}, {4, 0, 30}, {5, 3, 0}} {
		args := []string{"--data", dir, "--global-batch-size", "32", "--mesh", "data=4,model=2", "--batch-axes", "data",
			"--processes", "2", "--seed", fmt.Sprint(tc.seed), "--epoch", fmt.Sprint(tc.epoch)}
		if tc.window > 0 {
			args = append(args, "--shuffle-window", fmt.Sprint(tc.window))
		}
		out, err := planRunRaw(t, append(args, "--json")...)
		if err != nil {
			t.Fatalf("runPlan(%q) = %v", args, err)
		}
		var rep struct {
			Seed             uint64 `json:"seed"`
			ShuffleRowGroups bool   `json:"shuffle_row_groups"`
			ShuffleWindow    int64  `json:"shuffle_window"`
		}
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatal(err)
		}
		if rep.Seed != uint64(tc.seed) || !rep.ShuffleRowGroups || rep.ShuffleWindow != tc.window {
			t.Errorf("runPlan(%q) = seed %d, shuffle_row_groups %v, window %d; want %d, true, %d",
				args, rep.Seed, rep.ShuffleRowGroups, rep.ShuffleWindow, tc.seed, tc.window)
		}
		got := planRun(t, args...)
		shuffled, err := batching.NewPlan(rgs, batching.Config{GlobalBatch: 32, D: 4, Seed: uint64(tc.seed), ShuffleRowGroups: true, Window: tc.window})
		if err != nil {
			t.Fatal(err)
		}
		ordered, err := batching.NewPlan(rgs, batching.Config{GlobalBatch: 32, D: 4})
		if err != nil {
			t.Fatal(err)
		}
		for p, sl := range procSlices {
			want := shuffled.Bytes(tc.epoch, sl)
			if got.Processes[p].Bytes != want || got.Processes[p].RowGroups != len(shuffled.ReadSet(tc.epoch, sl)) {
				t.Errorf("runPlan(%q): process %d reads %d row groups, %d bytes; want %d, %d",
					args, p, got.Processes[p].RowGroups, got.Processes[p].Bytes, len(shuffled.ReadSet(tc.epoch, sl)), want)
			}
			if !slices.Equal(shuffled.ReadSet(tc.epoch, sl), ordered.ReadSet(tc.epoch, sl)) {
				differs = true
			}
		}
	}
	if !differs {
		t.Errorf("no seed changed a process's read set: the test cannot tell shuffled from ordered plans")
	}
	// Without --seed: dataset order.
	out, err := planRunRaw(t, "--json", "--data", dir, "--global-batch-size", "32", "--mesh", "data=4", "--batch-axes", "data")
	if err != nil || !strings.Contains(out, `"shuffle_row_groups": false`) {
		t.Errorf("runPlan(no --seed) = %v, want shuffle_row_groups false:\n%s", err, out)
	}
}
