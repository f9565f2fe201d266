package shard

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Layout is the batch layout of one mesh: which of the D batch slices each
// device holds, and which distinct slices each process needs.
//
// It models jax.sharding.NamedSharding(mesh, PartitionSpec(batchAxes)) applied
// to dimension 0 of an array of global batch size B: the batch is cut into D
// contiguous slices of b = B/D rows, D being the product of the sizes of the
// batch axes. The device at mesh coordinates c holds slice
//
//	sum over k of c[batchAxes[k]] * prod(size(batchAxes[j]) for j > k)
//
// that is, the mixed-radix number formed by its coordinates along the batch
// axes in the order they are listed (the first listed axis is the most
// significant digit, whatever its place in the mesh). Every other mesh axis
// replicates: devices that differ only along it hold the same slice. With no
// batch axes (PartitionSpec() or PartitionSpec(None)) D is 1 and every device
// holds the whole batch.
//
// A Layout is immutable and safe for concurrent use. Methods return fresh
// slices and maps that the caller may modify.
type Layout struct {
	mesh      Mesh
	batchAxes []string
	d         int
	// slice[i] is the slice held by the device at mesh position i.
	slice []int
	// byDevice holds the mesh positions sorted by device id.
	byDevice []int
	// procs are the distinct process indices, ascending; the slices process
	// procs[k] needs are procSlices[procStart[k]:procStart[k+1]].
	procs      []int
	procStart  []int
	procSlices []int
}

// Placement is one device of a Layout: its id, its process and the batch slice
// it holds.
type Placement struct {
	Device  int
	Process int
	Slice   int
}

// NewLayout validates m and computes the layout of a batch split over
// batchAxes, listed in PartitionSpec order (("data", "fsdp") makes "data" the
// major digit of the slice index). Nil or empty batchAxes means replicated.
//
// Errors wrap ErrInvalidMesh, ErrUnknownAxis or ErrDuplicateAxis.
func NewLayout(m Mesh, batchAxes []string) (*Layout, error) {
	byDevice, err := m.validate()
	if err != nil {
		return nil, err
	}
	// coef[j] is the weight of mesh axis j's coordinate in the slice index:
	// 0 for replicated axes, the mixed-radix place value for batch axes.
	coef := make([]int, len(m.Axes))
	d := 1
	for k := len(batchAxes) - 1; k >= 0; k-- {
		a := batchAxes[k]
		j := slices.Index(m.Axes, a)
		if j < 0 {
			return nil, fmt.Errorf("shard: %w: batch axis %q is not one of the mesh axes %q", ErrUnknownAxis, a, m.Axes)
		}
		if slices.Index(batchAxes[:k], a) >= 0 {
			return nil, fmt.Errorf("shard: %w: %q appears more than once in batch axes %q", ErrDuplicateAxis, a, batchAxes)
		}
		coef[j] = d
		d *= m.Shape[j]
	}

	mesh := m.clone()
	n := len(mesh.Devices)
	l := &Layout{
		mesh:      mesh,
		batchAxes: slices.Clone(batchAxes),
		d:         d,
		slice:     make([]int, n),
		byDevice:  byDevice,
	}
	// Walk the mesh positions in row-major order with an odometer over the
	// coordinates, keeping the slice index up to date.
	coord := make([]int, len(mesh.Shape))
	s := 0
	for i := range n {
		l.slice[i] = s
		for j := len(coord) - 1; j >= 0; j-- {
			coord[j]++
			s += coef[j]
			if coord[j] < mesh.Shape[j] {
				break
			}
			s -= coef[j] * coord[j]
			coord[j] = 0
		}
	}
	l.indexProcesses()
	return l, nil
}

// indexProcesses fills procs, procStart and procSlices.
func (l *Layout) indexProcesses() {
	type ps struct{ proc, slice int }
	pairs := make([]ps, len(l.slice))
	for i, s := range l.slice {
		pairs[i] = ps{l.mesh.Process[i], s}
	}
	slices.SortFunc(pairs, func(a, b ps) int {
		if c := cmp.Compare(a.proc, b.proc); c != 0 {
			return c
		}
		return cmp.Compare(a.slice, b.slice)
	})
	pairs = slices.Compact(pairs)
	l.procSlices = make([]int, len(pairs))
	for i, p := range pairs {
		l.procSlices[i] = p.slice
		if i == 0 || p.proc != pairs[i-1].proc {
			l.procs = append(l.procs, p.proc)
			l.procStart = append(l.procStart, i)
		}
	}
	l.procStart = append(l.procStart, len(pairs))
}

// D is the data-parallel degree: the number of distinct batch slices, the
// product of the sizes of the batch axes (1 when replicated).
func (l *Layout) D() int { return l.d }

// Replicas is the number of devices that hold each slice: devices / D.
func (l *Layout) Replicas() int { return len(l.slice) / l.d }

// Mesh returns a copy of the mesh the layout was computed for.
func (l *Layout) Mesh() Mesh { return l.mesh.clone() }

// BatchAxes returns a copy of the batch axes, in PartitionSpec order.
func (l *Layout) BatchAxes() []string { return slices.Clone(l.batchAxes) }

// position returns the mesh position of device, or an ErrUnknownDevice error.
func (l *Layout) position(device int) (int, error) {
	k, ok := slices.BinarySearchFunc(l.byDevice, device, func(pos, dev int) int {
		return cmp.Compare(l.mesh.Devices[pos], dev)
	})
	if !ok {
		return 0, fmt.Errorf("shard: %w: device %d is not one of the %d devices of %v", ErrUnknownDevice, device, len(l.slice), l.mesh)
	}
	return l.byDevice[k], nil
}

// SliceOf returns the batch slice, in [0, D), that device holds.
func (l *Layout) SliceOf(device int) (int, error) {
	pos, err := l.position(device)
	if err != nil {
		return 0, err
	}
	return l.slice[pos], nil
}

// DeviceSlices maps every device id to the slice it holds.
func (l *Layout) DeviceSlices() map[int]int {
	out := make(map[int]int, len(l.slice))
	for i, s := range l.slice {
		out[l.mesh.Devices[i]] = s
	}
	return out
}

// Placements lists every device with its process and slice, in mesh order.
func (l *Layout) Placements() []Placement {
	out := make([]Placement, len(l.slice))
	for i, s := range l.slice {
		out[i] = Placement{Device: l.mesh.Devices[i], Process: l.mesh.Process[i], Slice: s}
	}
	return out
}

// Processes returns the distinct process indices that own devices, ascending.
func (l *Layout) Processes() []int { return slices.Clone(l.procs) }

// ProcessSlices returns the distinct slices the devices of process p hold,
// ascending: the slices a data server feeding p must deliver for every step.
// A process that owns no device is an ErrUnknownProcess error.
func (l *Layout) ProcessSlices(p int) ([]int, error) {
	k, ok := slices.BinarySearch(l.procs, p)
	if !ok {
		return nil, fmt.Errorf("shard: %w: process %d (processes are %v)", ErrUnknownProcess, p, l.procs)
	}
	return slices.Clone(l.procSlices[l.procStart[k]:l.procStart[k+1]]), nil
}

// SliceRows returns b = B / D, the rows of each slice of a global batch of B
// rows. B must be positive and a multiple of D; otherwise the ErrBatchSize
// error names B, D, the remainder and the nearest valid batch sizes.
func (l *Layout) SliceRows(B int) (int, error) {
	if B <= 0 {
		return 0, fmt.Errorf("shard: %w: B=%d; the global batch size must be positive (and a multiple of D=%d)", ErrBatchSize, B, l.d)
	}
	r := B % l.d
	if r == 0 {
		return B / l.d, nil
	}
	var near []string
	if B-r > 0 {
		near = append(near, strconv.Itoa(B-r))
	}
	if B <= math.MaxInt-(l.d-r) {
		near = append(near, strconv.Itoa(B+l.d-r))
	}
	return 0, fmt.Errorf("shard: %w: B=%d is not a multiple of the data-parallel degree D=%d (%s): B %% D = %d; nearest valid B: %s",
		ErrBatchSize, B, l.d, l.degreeFactors(), r, strings.Join(near, " or "))
}

// degreeFactors renders D as the product of batch axis sizes, e.g.
// "data=4 × fsdp=2".
func (l *Layout) degreeFactors() string {
	if len(l.batchAxes) == 0 {
		return "replicated"
	}
	parts := make([]string, len(l.batchAxes))
	for k, a := range l.batchAxes {
		parts[k] = a + "=" + strconv.Itoa(l.mesh.Shape[slices.Index(l.mesh.Axes, a)])
	}
	return strings.Join(parts, " × ")
}

// RowRange returns the rows [start, end) of a global batch of B rows that
// device holds: what JAX's devices_indices_map((B, ...)) gives for dimension
// 0. Replicated layouts give [0, B).
func (l *Layout) RowRange(device, B int) (start, end int, err error) {
	b, err := l.SliceRows(B)
	if err != nil {
		return 0, 0, err
	}
	s, err := l.SliceOf(device)
	if err != nil {
		return 0, 0, err
	}
	return s * b, (s + 1) * b, nil
}

// String describes the layout, e.g. "D=8 over (data, fsdp) of mesh(data=4, fsdp=2, model=2)".
func (l *Layout) String() string {
	return fmt.Sprintf("D=%d over (%s) of %v", l.d, strings.Join(l.batchAxes, ", "), l.mesh)
}
