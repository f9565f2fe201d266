package shard

import (
	"errors"
	"flag"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/meshfeed/meshfeed/internal/testseed"
)

var seedFlag = flag.Uint64("shard.seed", 0, "seed for the randomized shard tests (0: MESHFEED_SEED, else the clock)")

// testSeed returns the seed from -shard.seed, else MESHFEED_SEED, else the
// clock, and logs it so that a failure can be replayed.
func testSeed(t *testing.T) uint64 { return testseed.Get(t, *seedFlag, "shard.seed") }

// randomMesh draws a mesh of 1 to 4 axes of sizes 1 to 5, with sparse device
// ids in a random order and processes that own either consecutive runs of
// devices or a random assignment.
func randomMesh(r *rand.Rand) Mesh {
	names := []string{"data", "fsdp", "model", "seq", "expert"}
	r.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
	k := 1 + r.IntN(4)
	m := Mesh{Axes: names[:k], Shape: make([]int, k)}
	n := 1
	for i := range m.Shape {
		m.Shape[i] = 1 + r.IntN(5)
		n *= m.Shape[i]
	}
	ids := r.Perm(3 * n)[:n] // distinct, sparse, unordered
	m.Devices = ids
	m.Process = make([]int, n)
	if r.IntN(2) == 0 {
		c := 1 + r.IntN(n)
		for i := range m.Process {
			m.Process[i] = m.Devices[i] / c
		}
	} else {
		for i := range m.Process {
			m.Process[i] = r.IntN(4) + 10
		}
	}
	return m
}

// refSlice is the slice rule written the slow way: decompose the mesh
// position into coordinates, then read the batch axes' coordinates as a
// mixed-radix number, first listed axis most significant.
func refSlice(m Mesh, batchAxes []string, pos int) int {
	coord := make(map[string]int, len(m.Axes))
	for j := len(m.Axes) - 1; j >= 0; j-- {
		coord[m.Axes[j]] = pos % m.Shape[j]
		pos /= m.Shape[j]
	}
	s := 0
	for _, a := range batchAxes {
		s = s*m.Shape[slices.Index(m.Axes, a)] + coord[a]
	}
	return s
}

func TestLayoutProperties(t *testing.T) {
	seed := testSeed(t)
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	for iter := range 2000 {
		m := randomMesh(r)
		batchAxes := slices.Clone(m.Axes)
		r.Shuffle(len(batchAxes), func(i, j int) { batchAxes[i], batchAxes[j] = batchAxes[j], batchAxes[i] })
		batchAxes = batchAxes[:r.IntN(len(batchAxes)+1)]
		l, err := NewLayout(m, batchAxes)
		if err != nil {
			t.Fatalf("seed %d iter %d: NewLayout(%v, %q) error: %v", seed, iter, m, batchAxes, err)
		}
		n := len(m.Devices)
		wantD := 1
		for _, a := range batchAxes {
			wantD *= m.Shape[slices.Index(m.Axes, a)]
		}
		if l.D() != wantD || l.Replicas()*wantD != n {
			t.Fatalf("seed %d iter %d: %v: D() = %d, Replicas() = %d, want D %d of %d devices", seed, iter, l, l.D(), l.Replicas(), wantD, n)
		}
		D := wantD
		b := 1 + r.IntN(5)
		B := D * b

		// Every slice 0..D-1 is held by exactly n/D devices, and each device's
		// slice agrees with the slow reference.
		holders := make([]int, D)
		for pos, dev := range m.Devices {
			s, err := l.SliceOf(dev)
			if err != nil || s != refSlice(m, batchAxes, pos) {
				t.Fatalf("seed %d iter %d: %v: SliceOf(%d) = %d, %v, want %d", seed, iter, l, dev, s, err, refSlice(m, batchAxes, pos))
			}
			holders[s]++
			start, end, err := l.RowRange(dev, B)
			if err != nil || end-start != b || start != s*b || end > B {
				t.Fatalf("seed %d iter %d: %v: RowRange(%d, %d) = [%d, %d), %v, want %d rows from %d", seed, iter, l, dev, B, start, end, err, b, s*b)
			}
		}
		for s, h := range holders {
			if h != n/D {
				t.Fatalf("seed %d iter %d: %v: slice %d held by %d devices, want %d", seed, iter, l, s, h, n/D)
			}
		}

		// ProcessSlices: ascending, distinct, exactly the slices of the
		// process's devices; together they cover [0, D).
		covered := make([]bool, D)
		procs := l.Processes()
		if !slices.IsSorted(procs) {
			t.Fatalf("seed %d iter %d: Processes() = %v, not ascending", seed, iter, procs)
		}
		for _, p := range procs {
			got, err := l.ProcessSlices(p)
			if err != nil {
				t.Fatalf("seed %d iter %d: ProcessSlices(%d) error: %v", seed, iter, p, err)
			}
			var want []int
			for pos := range m.Devices {
				if m.Process[pos] == p {
					want = append(want, refSlice(m, batchAxes, pos))
				}
			}
			slices.Sort(want)
			want = slices.Compact(want)
			if !slices.Equal(got, want) {
				t.Fatalf("seed %d iter %d: %v: ProcessSlices(%d) = %v, want %v", seed, iter, l, p, got, want)
			}
			for _, s := range got {
				covered[s] = true
			}
		}
		if i := slices.Index(covered, false); i >= 0 {
			t.Fatalf("seed %d iter %d: %v: slice %d needed by no process", seed, iter, l, i)
		}
		if want := len(slices.Compact(slices.Sorted(slices.Values(m.Process)))); len(procs) != want {
			t.Fatalf("seed %d iter %d: Processes() = %v, want %d processes", seed, iter, procs, want)
		}

		// A batch size that is not a multiple of D is refused.
		if D > 1 {
			bad := B + 1 + r.IntN(D-1)
			if _, err := l.SliceRows(bad); !errors.Is(err, ErrBatchSize) {
				t.Fatalf("seed %d iter %d: %v: SliceRows(%d) error = %v, want %v", seed, iter, l, bad, err, ErrBatchSize)
			}
		}
	}
}
