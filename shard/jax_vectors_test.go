package shard

import (
	"encoding/json"
	"errors"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// jaxCase is one case recorded by testdata/jax_vectors.py.
type jaxCase struct {
	Name              string   `json:"name"`
	Build             string   `json:"build"`
	PartitionSpec     string   `json:"partition_spec"`
	Axes              []string `json:"axes"`
	Shape             []int    `json:"shape"`
	Devices           []int    `json:"devices"`
	DevicesPerProcess int      `json:"devices_per_process"`
	Process           []int    `json:"process"`
	BatchAxes         []string `json:"batch_axes"`
	B                 int      `json:"B"`
	D                 int      `json:"D"`
	ShardRows         int      `json:"shard_rows"`
	// Rows maps a device id (as a string) to [start, stop) of dimension 0.
	Rows map[string][2]int `json:"rows"`
	// Error names the exception JAX raised instead (IndivisibleError for a
	// B that is not a multiple of D); Rows, D and ShardRows are then absent.
	Error string `json:"error"`
}

type jaxVectors struct {
	JAXVersion string    `json:"jax_version"`
	Cases      []jaxCase `json:"cases"`
}

func loadJAXVectors(t *testing.T) jaxVectors {
	t.Helper()
	raw, err := os.ReadFile("../testdata/jax_vectors.json")
	if err != nil {
		t.Fatalf("reading JAX vectors (regenerate with .venv/bin/python testdata/jax_vectors.py --out testdata/jax_vectors.json): %v", err)
	}
	var v jaxVectors
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("parsing JAX vectors: %v", err)
	}
	if len(v.Cases) < 24 {
		t.Fatalf("JAX vectors hold %d cases, want at least 24", len(v.Cases))
	}
	return v
}

// TestJAXVectors reproduces every device -> row range map that JAX's
// NamedSharding.devices_indices_map produced, together with D and the
// distinct slices each (simulated) process needs.
func TestJAXVectors(t *testing.T) {
	v := loadJAXVectors(t)
	t.Logf("%d cases recorded with jax %s", len(v.Cases), v.JAXVersion)
	kinds := map[string]int{}
	for _, c := range v.Cases {
		if c.Error != "" {
			kinds["error"]++
		}
		kinds[strconv.Itoa(len(c.Shape))+"d/"+strconv.Itoa(len(c.BatchAxes))+"axes"]++
		t.Run(c.Name, func(t *testing.T) { checkJAXCase(t, c) })
	}
	// The vectors must keep covering what the cross-check is for.
	for _, k := range []string{"1d/0axes", "1d/1axes", "2d/0axes", "2d/1axes", "2d/2axes", "3d/0axes", "3d/1axes", "3d/2axes", "3d/3axes", "error"} {
		if kinds[k] == 0 {
			t.Errorf("no JAX vector of kind %s (have %v)", k, kinds)
		}
	}
}

func checkJAXCase(t *testing.T, c jaxCase) {
	m := Mesh{Axes: c.Axes, Shape: c.Shape, Devices: c.Devices, Process: c.Process}
	l, err := NewLayout(m, c.BatchAxes)
	if err != nil {
		t.Fatalf("%s: NewLayout(%v, %q) error: %v", c.Name, m, c.BatchAxes, err)
	}
	if c.Error != "" {
		// JAX refused B; so must we, for the slice size and every device.
		if c.Error != "IndivisibleError" {
			t.Fatalf("%s: unexpected recorded JAX error %q", c.Name, c.Error)
		}
		if b, err := l.SliceRows(c.B); !errors.Is(err, ErrBatchSize) {
			t.Errorf("%s (%s): SliceRows(%d) = %d, %v, want %v as JAX raised %s", c.Name, c.PartitionSpec, c.B, b, err, ErrBatchSize, c.Error)
		}
		for _, dev := range c.Devices {
			if _, _, err := l.RowRange(dev, c.B); !errors.Is(err, ErrBatchSize) {
				t.Errorf("%s: RowRange(%d, %d) error = %v, want %v", c.Name, dev, c.B, err, ErrBatchSize)
			}
		}
		return
	}
	if len(c.Rows) != len(c.Devices) {
		t.Fatalf("%s: JAX recorded %d devices, mesh has %d", c.Name, len(c.Rows), len(c.Devices))
	}

	// D, from JAX's shard shape and from the number of distinct row ranges.
	distinct := map[[2]int]bool{}
	for _, r := range c.Rows {
		distinct[r] = true
	}
	if got := l.D(); got != c.D || got != len(distinct) {
		t.Errorf("%s (%s): D() = %d, want %d (JAX shard_shape), %d distinct ranges", c.Name, c.PartitionSpec, got, c.D, len(distinct))
	}
	if got, err := l.SliceRows(c.B); err != nil || got != c.ShardRows {
		t.Errorf("%s: SliceRows(%d) = %d, %v, want %d", c.Name, c.B, got, err, c.ShardRows)
	}

	// Every device's row range, exactly.
	for key, want := range c.Rows {
		dev, err := strconv.Atoi(key)
		if err != nil {
			t.Fatalf("%s: device key %q: %v", c.Name, key, err)
		}
		start, end, err := l.RowRange(dev, c.B)
		if err != nil || start != want[0] || end != want[1] {
			t.Errorf("%s (%s): RowRange(%d, %d) = [%d, %d), %v, want [%d, %d)", c.Name, c.PartitionSpec, dev, c.B, start, end, err, want[0], want[1])
		}
	}

	// Per process: the distinct slices its devices hold, derived from the JAX
	// map (slice = start / b), ascending.
	wantProc := map[int][]int{}
	for i, dev := range c.Devices {
		p := c.Process[i]
		s := c.Rows[strconv.Itoa(dev)][0] / c.ShardRows
		if !slices.Contains(wantProc[p], s) {
			wantProc[p] = append(wantProc[p], s)
		}
	}
	var wantProcs []int
	for p := range wantProc {
		wantProcs = append(wantProcs, p)
		slices.Sort(wantProc[p])
	}
	slices.Sort(wantProcs)
	if got := l.Processes(); !slices.Equal(got, wantProcs) {
		t.Errorf("%s: Processes() = %v, want %v", c.Name, got, wantProcs)
	}
	for _, p := range wantProcs {
		got, err := l.ProcessSlices(p)
		if err != nil || !slices.Equal(got, wantProc[p]) {
			t.Errorf("%s (%s): ProcessSlices(%d) = %v, %v, want %v", c.Name, c.PartitionSpec, p, got, err, wantProc[p])
		}
	}

	// Meshes JAX built with jax.make_mesh over its first N devices (CPU
	// backend) must come out of Topology.MakeMesh in the same order.
	if c.Build == "make_mesh" {
		dims := make([]string, len(c.Shape))
		for i, s := range c.Shape {
			dims[i] = strconv.Itoa(s)
		}
		spec := strings.Join(dims, "x")
		topo, err := ParseTopology(spec, c.DevicesPerProcess)
		if err != nil {
			t.Fatalf("%s: ParseTopology(%q, %d) error: %v", c.Name, spec, c.DevicesPerProcess, err)
		}
		tm, err := topo.MakeMesh(c.Shape, c.Axes)
		if err != nil {
			t.Fatalf("%s: MakeMesh(%v, %q) error: %v", c.Name, c.Shape, c.Axes, err)
		}
		if !slices.Equal(tm.Devices, c.Devices) || !slices.Equal(tm.Process, c.Process) {
			t.Errorf("%s: MakeMesh(%v, %q) = devices %v processes %v, want jax.make_mesh's %v, %v", c.Name, c.Shape, c.Axes, tm.Devices, tm.Process, c.Devices, c.Process)
		}
	}
}
