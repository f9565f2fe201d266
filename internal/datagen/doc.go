// Package datagen writes synthetic Parquet and Arrow IPC datasets (ids, labels,
// fixed-size feature vectors, variable-length token lists, image tensors) for
// `meshfeed gen`, tests and benchmarks. Rows are a pure function of (seed, row
// id), so a test can recompute any value without reading the file back.
//
// It is not on the data path: nothing in loader, batching or transport imports it.
package datagen
