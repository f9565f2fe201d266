package shard

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// seq returns the ids 0..n-1.
func seq(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}

// chunked returns process ids for n devices, c consecutive devices per process.
func chunked(n, c int) []int {
	p := make([]int, n)
	for i := range p {
		p[i] = i / c
	}
	return p
}

func TestNewLayoutErrors(t *testing.T) {
	ok := Mesh{Axes: []string{"data", "model"}, Shape: []int{2, 4}, Devices: seq(8), Process: chunked(8, 4)}
	with := func(f func(m *Mesh)) Mesh {
		m := ok.clone()
		f(&m)
		return m
	}
	tests := []struct {
		name      string
		mesh      Mesh
		batchAxes []string
		wantErr   error
		wantMsg   []string // substrings the message must contain
	}{
		{"unknown axis", ok, []string{"dat"}, ErrUnknownAxis, []string{`"dat"`, `["data" "model"]`}},
		{"empty axis", ok, []string{""}, ErrUnknownAxis, []string{`""`}},
		{"axis listed twice", ok, []string{"data", "model", "data"}, ErrDuplicateAxis, []string{`"data"`, `["data" "model" "data"]`}},
		{"duplicate device", with(func(m *Mesh) { m.Devices[5] = 2 }), nil, ErrInvalidMesh, []string{"device 2 listed twice (mesh positions 2 and 5)"}},
		{"too few devices", with(func(m *Mesh) { m.Devices = seq(6); m.Process = chunked(6, 3) }), nil, ErrInvalidMesh, []string{"shape [2 4] holds 8 devices but 6 device ids are given"}},
		{"too many devices", with(func(m *Mesh) { m.Devices = seq(9); m.Process = chunked(9, 3) }), nil, ErrInvalidMesh, []string{"shape [2 4] holds 8 devices but 9 device ids are given"}},
		{"huge shape", with(func(m *Mesh) { m.Shape = []int{1 << 40, 1 << 40} }), nil, ErrInvalidMesh, []string{"shape [1099511627776 1099511627776] holds more devices than an int counts but 8 device ids are given"}},
		{"zero size", with(func(m *Mesh) { m.Shape[1] = 0 }), nil, ErrInvalidMesh, []string{`axis "model" has size 0`}},
		{"negative size", with(func(m *Mesh) { m.Shape[0] = -2 }), nil, ErrInvalidMesh, []string{`axis "data" has size -2`}},
		{"no axes", Mesh{Devices: []int{0}, Process: []int{0}}, nil, ErrInvalidMesh, []string{"no axes"}},
		{"sizes not parallel to axes", with(func(m *Mesh) { m.Shape = []int{8} }), nil, ErrInvalidMesh, []string{`2 axes ["data" "model"] but 1 sizes [8]`}},
		{"axis name twice", with(func(m *Mesh) { m.Axes[1] = "data" }), nil, ErrInvalidMesh, []string{`axis name "data" used twice (axes 0 and 1)`}},
		{"empty axis name", with(func(m *Mesh) { m.Axes[0] = "" }), nil, ErrInvalidMesh, []string{"axis 0 has an empty name"}},
		{"process not parallel", with(func(m *Mesh) { m.Process = m.Process[:7] }), nil, ErrInvalidMesh, []string{"7 process indices for 8 devices"}},
		{"negative process", with(func(m *Mesh) { m.Process[3] = -1 }), nil, ErrInvalidMesh, []string{"mesh position 3 has negative process index -1"}},
		{"negative device", with(func(m *Mesh) { m.Devices[0] = -7 }), nil, ErrInvalidMesh, []string{"negative device id -7 at mesh position 0"}},
		{"several problems at once", with(func(m *Mesh) { m.Devices[1] = 0; m.Process[2] = -3 }), nil, ErrInvalidMesh, []string{"device 0 listed twice", "negative process index -3"}},
	}
	for _, tt := range tests {
		l, err := NewLayout(tt.mesh, tt.batchAxes)
		if !errors.Is(err, tt.wantErr) {
			t.Errorf("%s: NewLayout(%v, %q) = %v, %v, want error %v", tt.name, tt.mesh, tt.batchAxes, l, err, tt.wantErr)
			continue
		}
		for _, s := range tt.wantMsg {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("%s: NewLayout(%v, %q) error %q does not contain %q", tt.name, tt.mesh, tt.batchAxes, err, s)
			}
		}
		if tt.wantErr == ErrInvalidMesh {
			if verr := tt.mesh.Validate(); verr == nil || verr.Error() != err.Error() {
				t.Errorf("%s: Validate() = %v, want the NewLayout error %v", tt.name, verr, err)
			}
		}
	}
	if err := ok.Validate(); err != nil {
		t.Errorf("Validate(%v) = %v, want nil", ok, err)
	}
}

func TestValidateCapsProblems(t *testing.T) {
	m := Mesh{Axes: []string{"data"}, Shape: []int{20}, Devices: make([]int, 20), Process: make([]int, 20)}
	err := m.Validate()
	if !errors.Is(err, ErrInvalidMesh) || !strings.Contains(err.Error(), "and 11 more") {
		t.Errorf("Validate(20 copies of device 0) = %v, want %v listing 8 problems and 11 more", err, ErrInvalidMesh)
	}
}

func TestSliceRows(t *testing.T) {
	m := Mesh{Axes: []string{"data", "fsdp", "model"}, Shape: []int{2, 2, 2}, Devices: seq(8), Process: chunked(8, 4)}
	l, err := NewLayout(m, []string{"data", "fsdp"}) // D = 4
	if err != nil {
		t.Fatal(err)
	}
	rep, err := NewLayout(m, nil) // D = 1
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		l       *Layout
		B       int
		want    int
		wantMsg []string // for errors: substrings of the message
	}{
		{l, 8, 2, nil},
		{l, 4, 1, nil},
		{l, 1024, 256, nil},
		{l, 10, 0, []string{"B=10", "D=4", "data=2 × fsdp=2", "B % D = 2", "nearest valid B: 8 or 12"}},
		{l, 3, 0, []string{"B=3", "D=4", "B % D = 3", "nearest valid B: 4"}},
		{l, 13, 0, []string{"B % D = 1", "nearest valid B: 12 or 16"}},
		{l, 0, 0, []string{"B=0", "positive"}},
		{l, -8, 0, []string{"B=-8", "positive"}},
		{rep, 7, 7, nil},
		{rep, 1, 1, nil},
	}
	for _, tt := range tests {
		got, err := tt.l.SliceRows(tt.B)
		if tt.wantMsg == nil {
			if err != nil || got != tt.want {
				t.Errorf("SliceRows(%d) on %v = %d, %v, want %d", tt.B, tt.l, got, err, tt.want)
			}
			continue
		}
		if !errors.Is(err, ErrBatchSize) {
			t.Errorf("SliceRows(%d) on %v = %d, %v, want %v", tt.B, tt.l, got, err, ErrBatchSize)
			continue
		}
		for _, s := range tt.wantMsg {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("SliceRows(%d) error %q does not contain %q", tt.B, err, s)
			}
		}
		if _, _, rerr := tt.l.RowRange(0, tt.B); !errors.Is(rerr, ErrBatchSize) {
			t.Errorf("RowRange(0, %d) error = %v, want %v", tt.B, rerr, ErrBatchSize)
		}
	}
}

// TestHandLayouts checks small layouts worked out by hand from the rule in
// Layout's doc comment (the JAX vectors check the same rule against JAX).
func TestHandLayouts(t *testing.T) {
	tests := []struct {
		name      string
		mesh      Mesh
		batchAxes []string
		// wantSlices lists the slice of each device in mesh order.
		wantSlices []int
		wantProc   map[int][]int
	}{
		{
			// Mesh (data=2, model=4), devices 0..7 row-major, 4 per process:
			// process 0 holds row data=0, process 1 row data=1.
			name: "data of 2x4", mesh: Mesh{[]string{"data", "model"}, []int{2, 4}, seq(8), chunked(8, 4)},
			batchAxes:  []string{"data"},
			wantSlices: []int{0, 0, 0, 0, 1, 1, 1, 1},
			wantProc:   map[int][]int{0: {0}, 1: {1}},
		},
		{
			// P(("model", "data")): slice = model*2 + data.
			name: "(model, data) of 2x4", mesh: Mesh{[]string{"data", "model"}, []int{2, 4}, seq(8), chunked(8, 4)},
			batchAxes:  []string{"model", "data"},
			wantSlices: []int{0, 2, 4, 6, 1, 3, 5, 7},
			wantProc:   map[int][]int{0: {0, 2, 4, 6}, 1: {1, 3, 5, 7}},
		},
		{
			// Sparse, permuted device ids and processes not starting at 0.
			name: "model of 2x2, permuted", mesh: Mesh{[]string{"data", "model"}, []int{2, 2}, []int{40, 10, 30, 20}, []int{7, 5, 7, 5}},
			batchAxes:  []string{"model"},
			wantSlices: []int{0, 1, 0, 1},
			wantProc:   map[int][]int{5: {1}, 7: {0}},
		},
		{
			// (c, a) of a 2x2x2 mesh (a, b, c): slice = c*2 + a; b replicates.
			name: "(c, a) of 2x2x2", mesh: Mesh{[]string{"a", "b", "c"}, []int{2, 2, 2}, seq(8), chunked(8, 2)},
			batchAxes:  []string{"c", "a"},
			wantSlices: []int{0, 2, 0, 2, 1, 3, 1, 3},
			wantProc:   map[int][]int{0: {0, 2}, 1: {0, 2}, 2: {1, 3}, 3: {1, 3}},
		},
		{
			name: "replicated", mesh: Mesh{[]string{"data"}, []int{3}, []int{2, 0, 1}, []int{0, 0, 1}},
			batchAxes:  []string{},
			wantSlices: []int{0, 0, 0},
			wantProc:   map[int][]int{0: {0}, 1: {0}},
		},
	}
	for _, tt := range tests {
		l, err := NewLayout(tt.mesh, tt.batchAxes)
		if err != nil {
			t.Fatalf("%s: NewLayout(%v, %q) error: %v", tt.name, tt.mesh, tt.batchAxes, err)
		}
		for i, dev := range tt.mesh.Devices {
			if got, err := l.SliceOf(dev); err != nil || got != tt.wantSlices[i] {
				t.Errorf("%s: SliceOf(%d) = %d, %v, want %d", tt.name, dev, got, err, tt.wantSlices[i])
			}
			if got := l.DeviceSlices()[dev]; got != tt.wantSlices[i] {
				t.Errorf("%s: DeviceSlices()[%d] = %d, want %d", tt.name, dev, got, tt.wantSlices[i])
			}
			want := Placement{Device: dev, Process: tt.mesh.Process[i], Slice: tt.wantSlices[i]}
			if got := l.Placements()[i]; got != want {
				t.Errorf("%s: Placements()[%d] = %+v, want %+v", tt.name, i, got, want)
			}
		}
		for p, want := range tt.wantProc {
			if got, err := l.ProcessSlices(p); err != nil || !slices.Equal(got, want) {
				t.Errorf("%s: ProcessSlices(%d) = %v, %v, want %v", tt.name, p, got, err, want)
			}
		}
		if got := len(l.Processes()); got != len(tt.wantProc) {
			t.Errorf("%s: Processes() = %v, want %d processes", tt.name, l.Processes(), len(tt.wantProc))
		}
	}
}

func TestLookupErrors(t *testing.T) {
	m := Mesh{Axes: []string{"data"}, Shape: []int{4}, Devices: []int{3, 5, 7, 9}, Process: []int{2, 2, 4, 4}}
	l, err := NewLayout(m, []string{"data"})
	if err != nil {
		t.Fatal(err)
	}
	for _, dev := range []int{-1, 0, 4, 6, 10} {
		if s, err := l.SliceOf(dev); !errors.Is(err, ErrUnknownDevice) || !strings.Contains(err.Error(), fmt.Sprintf("device %d ", dev)) {
			t.Errorf("SliceOf(%d) = %d, %v, want %v naming the device", dev, s, err, ErrUnknownDevice)
		}
		if _, _, err := l.RowRange(dev, 8); !errors.Is(err, ErrUnknownDevice) {
			t.Errorf("RowRange(%d, 8) error = %v, want %v", dev, err, ErrUnknownDevice)
		}
	}
	for _, p := range []int{0, 1, 3, 5} {
		if s, err := l.ProcessSlices(p); !errors.Is(err, ErrUnknownProcess) || !strings.Contains(err.Error(), "[2 4]") {
			t.Errorf("ProcessSlices(%d) = %v, %v, want %v listing [2 4]", p, s, err, ErrUnknownProcess)
		}
	}
}

// TestLayoutOwnsItsData checks that a Layout is not affected by later changes
// to the Mesh it was built from, nor to the slices it returned.
func TestLayoutOwnsItsData(t *testing.T) {
	m := Mesh{Axes: []string{"data", "model"}, Shape: []int{2, 2}, Devices: seq(4), Process: chunked(4, 2)}
	axes := []string{"data"}
	l, err := NewLayout(m, axes)
	if err != nil {
		t.Fatal(err)
	}
	m.Devices[0], m.Process[0], m.Axes[0], axes[0] = 99, 99, "x", "x"
	l.Processes()[0] = 42
	ps, _ := l.ProcessSlices(0)
	ps[0] = 42
	l.Mesh().Devices[1] = 77
	l.BatchAxes()[0] = "y"
	if s, err := l.SliceOf(0); err != nil || s != 0 {
		t.Errorf("SliceOf(0) after mutations = %d, %v, want 0", s, err)
	}
	if got := l.Processes(); !slices.Equal(got, []int{0, 1}) {
		t.Errorf("Processes() after mutations = %v, want [0 1]", got)
	}
	if got, _ := l.ProcessSlices(0); !slices.Equal(got, []int{0}) {
		t.Errorf("ProcessSlices(0) after mutations = %v, want [0]", got)
	}
	if got := l.String(); got != "D=2 over (data) of mesh(data=2, model=2)" {
		t.Errorf("String() = %q, want %q", got, "D=2 over (data) of mesh(data=2, model=2)")
	}
}
