package shard

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// maxProblems caps how many problems one Validate error lists.
const maxProblems = 8

// Mesh describes a JAX mesh: named axes of given sizes, the device ids laid out
// over them, and the process that owns each device.
//
// It corresponds to jax.sharding.Mesh(devices.reshape(Shape), Axes), with
// Devices[i] the id of the device at row-major position i of the mesh
// (mesh.devices.flat order) and Process[i] its process_index.
//
// A Mesh is a plain value; NewLayout copies what it keeps, so the caller may
// reuse the slices afterwards.
type Mesh struct {
	// Axes are the axis names, major to minor, e.g. ["data", "model"].
	Axes []string
	// Shape holds the size of each axis, parallel to Axes.
	Shape []int
	// Devices are the device ids in mesh order (row-major over Shape).
	Devices []int
	// Process[i] is the process index that owns Devices[i].
	Process []int
}

// Validate reports every problem with m at once, in one error wrapping
// ErrInvalidMesh. A valid mesh has at least one axis, distinct non-empty axis
// names, positive sizes, exactly prod(Shape) distinct non-negative device ids
// and a non-negative process index for each of them.
func (m Mesh) Validate() error {
	_, err := m.validate()
	return err
}

// validate is Validate that also returns the mesh positions sorted by device
// id, which NewLayout keeps as its device index.
func (m Mesh) validate() ([]int, error) {
	var problems []string
	add := func(format string, args ...any) {
		problems = append(problems, fmt.Sprintf(format, args...))
	}
	if len(m.Axes) == 0 {
		add("no axes")
	}
	if len(m.Shape) != len(m.Axes) {
		add("%d axes %q but %d sizes %v", len(m.Axes), m.Axes, len(m.Shape), m.Shape)
	}
	for i, a := range m.Axes {
		if a == "" {
			add("axis %d has an empty name", i)
			continue
		}
		if j := slices.Index(m.Axes[:i], a); j >= 0 {
			add("axis name %q used twice (axes %d and %d)", a, j, i)
		}
	}
	shapeOK := true
	for i, sz := range m.Shape {
		if sz <= 0 {
			add("axis %s has size %d; sizes must be positive", axisLabel(m.Axes, i), sz)
			shapeOK = false
		}
	}
	if shapeOK && len(m.Shape) > 0 {
		if n, ok := product(m.Shape, math.MaxInt); !ok {
			add("shape %v holds more devices than an int counts but %d device ids are given", m.Shape, len(m.Devices))
		} else if n != len(m.Devices) {
			add("shape %v holds %d devices but %d device ids are given", m.Shape, n, len(m.Devices))
		}
	}
	if len(m.Process) != len(m.Devices) {
		add("%d process indices for %d devices", len(m.Process), len(m.Devices))
	}
	for i, p := range m.Process {
		if p < 0 {
			add("device at mesh position %d has negative process index %d", i, p)
		}
	}
	byDevice := sortByDevice(m.Devices)
	for k, pos := range byDevice {
		d := m.Devices[pos]
		if d < 0 {
			add("negative device id %d at mesh position %d", d, pos)
		}
		if k > 0 && m.Devices[byDevice[k-1]] == d {
			add("device %d listed twice (mesh positions %d and %d)", d, byDevice[k-1], pos)
		}
	}
	if len(problems) == 0 {
		return byDevice, nil
	}
	extra := ""
	if len(problems) > maxProblems {
		extra = fmt.Sprintf("; and %d more", len(problems)-maxProblems)
		problems = problems[:maxProblems]
	}
	return nil, fmt.Errorf("shard: %w: %s%s", ErrInvalidMesh, strings.Join(problems, "; "), extra)
}

// sortByDevice returns the mesh positions 0..len(devices)-1 sorted by device
// id, ties by position.
func sortByDevice(devices []int) []int {
	idx := make([]int, len(devices))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int {
		if c := cmp.Compare(devices[a], devices[b]); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	return idx
}

// product returns prod(shape) and true when every size is positive and the
// product is at most limit; otherwise false. It cannot overflow.
func product(shape []int, limit int) (int, bool) {
	p := 1
	for _, s := range shape {
		if s <= 0 || p > limit/s {
			return 0, false
		}
		p *= s
	}
	return p, true
}

// axisLabel names axis i as "data" when the name exists, else by position.
func axisLabel(axes []string, i int) string {
	if i < len(axes) && axes[i] != "" {
		return strconv.Quote(axes[i])
	}
	return "#" + strconv.Itoa(i)
}

// String renders the mesh axes and sizes, e.g. "mesh(data=2, model=4)".
func (m Mesh) String() string {
	var b strings.Builder
	b.WriteString("mesh(")
	for i := range max(len(m.Axes), len(m.Shape)) {
		if i > 0 {
			b.WriteString(", ")
		}
		name, size := "?", "?"
		if i < len(m.Axes) {
			name = m.Axes[i]
		}
		if i < len(m.Shape) {
			size = strconv.Itoa(m.Shape[i])
		}
		b.WriteString(name + "=" + size)
	}
	b.WriteString(")")
	return b.String()
}

// clone returns a deep copy of m.
func (m Mesh) clone() Mesh {
	return Mesh{
		Axes:    slices.Clone(m.Axes),
		Shape:   slices.Clone(m.Shape),
		Devices: slices.Clone(m.Devices),
		Process: slices.Clone(m.Process),
	}
}
