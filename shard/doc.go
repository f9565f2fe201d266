// Package shard answers one question: given a JAX mesh and the mesh axes the
// batch dimension is split over, which batch slice does each device hold, and
// which distinct slices does each process need?
//
// A Mesh lists axis names, sizes, device ids in mesh order and the process
// owning each device. NewLayout applies the rule of
// NamedSharding(mesh, PartitionSpec(batchAxes)) to dimension 0: D, the
// product of the batch axes' sizes, contiguous slices of b = B/D rows, and the
// slice of each device as the mixed-radix index of its coordinates along the
// batch axes in the order listed. ParseTopology and Topology.MakeMesh build a
// Mesh from the CLI's "--topology 4x4 --chips-per-host 4" shorthand.
//
// It is pure functions over small values: no I/O, no Arrow, no goroutines, only
// the standard library. Its layout rules are cross-checked against JAX's own
// Sharding.devices_indices_map with vectors recorded by testdata/jax_vectors.py
// (JAX's CPU backend, processes simulated as device id / devices per process).
//
// It does not decide which rows make up a slice (package batching) nor move any
// bytes (packages loader and transport).
//
// # Caveats
//
//   - B must be a multiple of D, as JAX itself requires (it raises
//     IndivisibleError, and so do the recorded vectors); SliceRows and
//     RowRange return an ErrBatchSize error naming the nearest valid B.
//   - Topology models device ids 0..N-1, process-major, reshaped row-major into
//     the mesh: jax.make_mesh's order off TPU. The torus-aware device order
//     that mesh_utils.create_device_mesh applies on TPU v4/v5 is not modelled;
//     on a real slice, build the Mesh from the JAX mesh's own device and
//     process ids.
//   - A Layout is immutable and safe for concurrent use; its accessors return
//     copies.
package shard
