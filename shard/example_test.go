package shard_test

import (
	"fmt"

	"github.com/meshfeed/meshfeed/shard"
)

// A 4x4 slice with 4 chips per host, as jax.make_mesh((4, 2, 2), ("data",
// "fsdp", "model")) lays it out off TPU, with the batch split over
// ("data", "fsdp"): D = 8, and each host's 4 devices hold 2 slices.
func ExampleNewLayout() {
	topo, err := shard.ParseTopology("4x4", 4)
	if err != nil {
		fmt.Println(err)
		return
	}
	mesh, err := topo.MakeMesh([]int{4, 2, 2}, []string{"data", "fsdp", "model"})
	if err != nil {
		fmt.Println(err)
		return
	}
	l, err := shard.NewLayout(mesh, []string{"data", "fsdp"})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(l)
	for _, p := range l.Processes() {
		s, _ := l.ProcessSlices(p)
		fmt.Printf("process %d needs slices %v\n", p, s)
	}
	start, end, _ := l.RowRange(5, 64)
	fmt.Printf("device 5 holds rows [%d, %d) of B=64\n", start, end)
	_, err = l.SliceRows(100)
	fmt.Println(err)
	// Output:
	// D=8 over (data, fsdp) of mesh(data=4, fsdp=2, model=2)
	// process 0 needs slices [0 1]
	// process 1 needs slices [2 3]
	// process 2 needs slices [4 5]
	// process 3 needs slices [6 7]
	// device 5 holds rows [16, 24) of B=64
	// shard: invalid global batch size: B=100 is not a multiple of the data-parallel degree D=8 (data=4 × fsdp=2): B % D = 4; nearest valid B: 96 or 104
}
