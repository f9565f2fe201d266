package shard

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// MaxDevices is the largest number of chips ParseTopology accepts.
const MaxDevices = 1 << 20

// Topology is the CLI's shorthand for the devices of a multi-host slice, such
// as "--topology 4x4 --chips-per-host 4": 16 devices on 4 hosts, one JAX
// process per host.
//
// What is modelled, and what is not:
//
//   - Device ids are 0..N-1 and process p owns devices [p*c, (p+1)*c), c being
//     ChipsPerHost: ids are process-major, and Devices lists them in id order,
//     the order of jax.devices(). This is an assumption about the runtime
//     (TPU slices number their chips host by host); it is not checked against
//     real hardware, since the test vectors come from JAX's CPU backend.
//   - MakeMesh reshapes the devices, in that order, row-major into the
//     requested mesh shape. That is what jax.make_mesh and
//     mesh_utils.create_device_mesh do on CPU and GPU backends, which the
//     cross-check vectors verify.
//   - Not modelled: the physical-topology-aware ordering that
//     mesh_utils.create_device_mesh (and so jax.make_mesh) applies on TPU v4
//     and v5, which maps mesh axes onto torus dimensions and may reorder
//     devices to form ICI rings; nor any device or process order other than
//     the one above. Dims only records the spec and does not influence the
//     order. On such a slice, take the device and process ids from the real
//     mesh (mesh.devices.flat and each device's process_index) and build the
//     Mesh from them instead.
type Topology struct {
	// Dims is the chip grid of the spec, e.g. [4 4] for "4x4".
	Dims []int
	// ChipsPerHost is the number of chips (devices) each process owns.
	ChipsPerHost int
	// Devices are the device ids 0..N-1, in jax.devices() order.
	Devices []int
	// Process[i] is the process that owns Devices[i]: Devices[i] / ChipsPerHost.
	Process []int
}

// ParseTopology parses a chip grid such as "4x4", "2x2x4" or "8" and assigns
// each device to a process, chipsPerHost consecutive ids per process. Every
// dimension must be positive, chipsPerHost must divide the number of chips,
// and the number of chips is at most MaxDevices. Errors wrap
// ErrInvalidTopology.
func ParseTopology(spec string, chipsPerHost int) (Topology, error) {
	fields := strings.Split(spec, "x")
	dims := make([]int, len(fields))
	n := 1
	for i, f := range fields {
		v, err := strconv.Atoi(f)
		if err != nil || v <= 0 || f[0] == '+' {
			return Topology{}, fmt.Errorf("shard: %w: %q: dimension %q is not a positive integer (want e.g. \"4x4\" or \"2x2x4\")", ErrInvalidTopology, spec, f)
		}
		if n > MaxDevices/v {
			return Topology{}, fmt.Errorf("shard: %w: %q has more than %d chips", ErrInvalidTopology, spec, MaxDevices)
		}
		dims[i] = v
		n *= v
	}
	if chipsPerHost <= 0 {
		return Topology{}, fmt.Errorf("shard: %w: chips per host is %d; it must be positive", ErrInvalidTopology, chipsPerHost)
	}
	if n%chipsPerHost != 0 {
		return Topology{}, fmt.Errorf("shard: %w: %q has %d chips, not a multiple of %d chips per host (remainder %d)", ErrInvalidTopology, spec, n, chipsPerHost, n%chipsPerHost)
	}
	t := Topology{Dims: dims, ChipsPerHost: chipsPerHost, Devices: make([]int, n), Process: make([]int, n)}
	for i := range n {
		t.Devices[i] = i
		t.Process[i] = i / chipsPerHost
	}
	return t, nil
}

// NumProcesses is the number of processes (hosts) of the topology.
func (t Topology) NumProcesses() int {
	if t.ChipsPerHost <= 0 {
		return 0
	}
	return len(t.Devices) / t.ChipsPerHost
}

// MakeMesh lays the topology's devices, in order, row-major over a mesh of the
// given shape and axis names, as jax.make_mesh(shape, axes) does off TPU. The
// shape must hold exactly the topology's devices (an ErrInvalidTopology
// error otherwise); a malformed shape or axis list is an ErrInvalidMesh error.
func (t Topology) MakeMesh(shape []int, axes []string) (Mesh, error) {
	m := Mesh{
		Axes:    slices.Clone(axes),
		Shape:   slices.Clone(shape),
		Devices: slices.Clone(t.Devices),
		Process: slices.Clone(t.Process),
	}
	if len(shape) > 0 && !slices.ContainsFunc(shape, func(s int) bool { return s <= 0 }) {
		if n, ok := product(shape, len(t.Devices)); !ok || n != len(t.Devices) {
			return Mesh{}, fmt.Errorf("shard: %w: mesh shape %v does not hold the %d devices of topology %v", ErrInvalidTopology, shape, len(t.Devices), t)
		}
	}
	if err := m.Validate(); err != nil {
		return Mesh{}, err
	}
	return m, nil
}

// String renders the topology as its spec and host count, e.g.
// "4x4 (4 chips per host, 4 hosts)".
func (t Topology) String() string {
	parts := make([]string, len(t.Dims))
	for i, d := range t.Dims {
		parts[i] = strconv.Itoa(d)
	}
	return fmt.Sprintf("%s (%d chips per host, %d hosts)", strings.Join(parts, "x"), t.ChipsPerHost, t.NumProcesses())
}
