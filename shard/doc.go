// Package shard answers one question: given a JAX mesh and the mesh axes the
// batch dimension is split over, which batch slice does each device hold, and
// which distinct slices does each process need?
//
// It is pure functions over small values: no I/O, no Arrow, no goroutines. Its
// layout rules follow JAX's NamedSharding and are cross-checked against JAX's own
// Sharding.devices_indices_map with vectors recorded by testdata/jax_vectors.py.
//
// It does not decide which rows make up a slice (package batching) nor move any
// bytes (packages loader and transport).
package shard
