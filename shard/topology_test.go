package shard

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestParseTopology(t *testing.T) {
	tests := []struct {
		spec         string
		chipsPerHost int
		wantDims     []int
		wantProcs    int
		wantMsg      string // non-empty: an ErrInvalidTopology error containing it
	}{
		{"4x4", 4, []int{4, 4}, 4, ""},
		{"2x2x4", 4, []int{2, 2, 4}, 4, ""},
		{"8", 8, []int{8}, 1, ""},
		{"8", 1, []int{8}, 8, ""},
		{"1", 1, []int{1}, 1, ""},
		{"", 4, nil, 0, `dimension "" is not a positive integer`},
		{"4x", 4, nil, 0, `dimension "" is not a positive integer`},
		{"x4", 4, nil, 0, `dimension "" is not a positive integer`},
		{"4x0", 4, nil, 0, `dimension "0" is not a positive integer`},
		{"-4", 4, nil, 0, `dimension "-4" is not a positive integer`},
		{"+4", 4, nil, 0, `dimension "+4" is not a positive integer`},
		{"4 x4", 4, nil, 0, `dimension "4 " is not a positive integer`},
		{"4X4", 4, nil, 0, `dimension "4X4" is not a positive integer`},
		{"v4-32", 4, nil, 0, `"v4-32"`},
		{"4x4", 0, nil, 0, "chips per host is 0"},
		{"4x4", -4, nil, 0, "chips per host is -4"},
		{"4x4", 3, nil, 0, `"4x4" has 16 chips, not a multiple of 3 chips per host (remainder 1)`},
		{"1024x1024x2", 4, nil, 0, "more than 1048576 chips"},
		{"99999999999999999999", 4, nil, 0, "not a positive integer"},
	}
	for _, tt := range tests {
		got, err := ParseTopology(tt.spec, tt.chipsPerHost)
		if tt.wantMsg != "" {
			if !errors.Is(err, ErrInvalidTopology) || !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("ParseTopology(%q, %d) = %v, %v, want %v containing %q", tt.spec, tt.chipsPerHost, got, err, ErrInvalidTopology, tt.wantMsg)
			}
			continue
		}
		if err != nil || !slices.Equal(got.Dims, tt.wantDims) || got.NumProcesses() != tt.wantProcs {
			t.Errorf("ParseTopology(%q, %d) = %v, %v, want dims %v, %d processes", tt.spec, tt.chipsPerHost, got, err, tt.wantDims, tt.wantProcs)
			continue
		}
		// Ids are 0..N-1 in order; process p owns [p*c, (p+1)*c).
		for i, d := range got.Devices {
			if d != i || got.Process[i] != i/tt.chipsPerHost {
				t.Errorf("ParseTopology(%q, %d): device %d = id %d process %d, want id %d process %d", tt.spec, tt.chipsPerHost, i, d, got.Process[i], i, i/tt.chipsPerHost)
			}
		}
	}
}

func TestTopologyMakeMesh(t *testing.T) {
	topo, err := ParseTopology("4x4", 4)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := topo.String(), "4x4 (4 chips per host, 4 hosts)"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	m, err := topo.MakeMesh([]int{2, 8}, []string{"data", "model"})
	if err != nil {
		t.Fatalf("MakeMesh([2 8]) error: %v", err)
	}
	if !slices.Equal(m.Devices, seq(16)) || !slices.Equal(m.Process, chunked(16, 4)) {
		t.Errorf("MakeMesh([2 8]) = %v %v, want devices 0..15 in order, 4 per process", m.Devices, m.Process)
	}
	// Batch over data: the two rows of 8 devices span processes {0,1} and {2,3}.
	l, err := NewLayout(m, []string{"data"})
	if err != nil {
		t.Fatal(err)
	}
	for p, want := range [][]int{{0}, {0}, {1}, {1}} {
		if got, err := l.ProcessSlices(p); err != nil || !slices.Equal(got, want) {
			t.Errorf("ProcessSlices(%d) = %v, %v, want %v", p, got, err, want)
		}
	}
	// The returned mesh does not alias the topology.
	m.Devices[0] = 100
	if topo.Devices[0] != 0 {
		t.Errorf("MakeMesh result aliases Topology.Devices")
	}

	errTests := []struct {
		shape   []int
		axes    []string
		wantErr error
		wantMsg string
	}{
		{[]int{4, 2}, []string{"data", "model"}, ErrInvalidTopology, "mesh shape [4 2] does not hold the 16 devices of topology 4x4"},
		{[]int{4, 8}, []string{"data", "model"}, ErrInvalidTopology, "mesh shape [4 8] does not hold the 16 devices"},
		{[]int{1 << 40, 1 << 40}, []string{"data", "model"}, ErrInvalidTopology, "does not hold the 16 devices"},
		{[]int{4, 4}, []string{"data", "data"}, ErrInvalidMesh, `axis name "data" used twice`},
		{[]int{16}, []string{"data", "model"}, ErrInvalidMesh, "2 axes"},
		{[]int{0, 4}, []string{"data", "model"}, ErrInvalidMesh, `axis "data" has size 0`},
		{nil, nil, ErrInvalidMesh, "no axes"},
	}
	for _, tt := range errTests {
		m, err := topo.MakeMesh(tt.shape, tt.axes)
		if !errors.Is(err, tt.wantErr) || !strings.Contains(err.Error(), tt.wantMsg) {
			t.Errorf("MakeMesh(%v, %q) = %v, %v, want %v containing %q", tt.shape, tt.axes, m, err, tt.wantErr, tt.wantMsg)
		}
	}
}

// FuzzParseTopology: invalid specs return an error, never a panic; valid ones
// round-trip through String and describe a consistent device set.
func FuzzParseTopology(f *testing.F) {
	for _, s := range []string{"4x4", "2x2x4", "8", "", "x", "4x-1", "0", "1024x1024x1024"} {
		f.Add(s, 4)
	}
	f.Fuzz(func(t *testing.T, spec string, c int) {
		topo, err := ParseTopology(spec, c)
		if err != nil {
			if !errors.Is(err, ErrInvalidTopology) {
				t.Fatalf("ParseTopology(%q, %d) error %v does not wrap %v", spec, c, err, ErrInvalidTopology)
			}
			return
		}
		again, err := ParseTopology(strings.SplitN(topo.String(), " ", 2)[0], c)
		if err != nil || !slices.Equal(again.Dims, topo.Dims) {
			t.Fatalf("ParseTopology(%q, %d) = %v; reparsing its String gives %v, %v", spec, c, topo, again, err)
		}
		if len(topo.Devices) > MaxDevices || len(topo.Devices)%c != 0 || topo.NumProcesses()*c != len(topo.Devices) {
			t.Fatalf("ParseTopology(%q, %d) = %d devices, %d processes", spec, c, len(topo.Devices), topo.NumProcesses())
		}
		if _, err := topo.MakeMesh([]int{len(topo.Devices)}, []string{"data"}); err != nil {
			t.Fatalf("MakeMesh of all %d devices: %v", len(topo.Devices), err)
		}
	})
}
