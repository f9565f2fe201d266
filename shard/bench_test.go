package shard

import (
	"strconv"
	"testing"
)

// BenchmarkNewLayout builds the layout of meshes of growing size, batch split
// over two of three axes, 4 devices per process.
func BenchmarkNewLayout(b *testing.B) {
	for _, shape := range [][]int{{4, 4, 4}, {8, 8, 8}, {16, 16, 16}} {
		n := shape[0] * shape[1] * shape[2]
		m := Mesh{Axes: []string{"data", "fsdp", "model"}, Shape: shape, Devices: seq(n), Process: chunked(n, 4)}
		batchAxes := []string{"data", "fsdp"}
		b.Run("devices="+strconv.Itoa(n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := NewLayout(m, batchAxes); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkSliceOf looks up one device of a 4096-device layout.
func BenchmarkSliceOf(b *testing.B) {
	m := Mesh{Axes: []string{"data", "fsdp", "model"}, Shape: []int{16, 16, 16}, Devices: seq(4096), Process: chunked(4096, 4)}
	l, err := NewLayout(m, []string{"data", "fsdp"})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	dev := 0
	for b.Loop() {
		if _, err := l.SliceOf(dev); err != nil {
			b.Fatal(err)
		}
		dev = (dev + 797) % 4096
	}
}
