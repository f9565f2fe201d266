// Package datagen writes synthetic Parquet and Arrow IPC datasets (ids, labels,
// fixed-size feature vectors, variable-length token lists, image tensors) for
// `meshfeed gen`, tests and benchmarks. Rows are a pure function of (seed, row
// id), so a test can recompute any value without reading the file back: see
// Label, Feature, Tokens and Pixel, and Spec for the schema.
//
// It is not on the data path: nothing in loader, batching or transport imports it.
//
// A Spec describes a dataset completely (rows, files, row group size, columns,
// format, codec, seed); Write turns it into files part-00000.<ext>, ... (sorted
// names are in row order) through a Creator, so that local disk and object
// stores are written alike. LocalCreator writes each file atomically.
//
// # Caveats
//
//   - arrow-go v18.8.0 has no fixed_shape_tensor type and its Parquet writer
//     cannot map an extension type over fixed_size_list, so datagen carries
//     TensorType and writes the image column's storage with the extension kept
//     in the ARROW:schema metadata. Readers return *TensorType only after
//     RegisterTensorType (or another registration of the same name); otherwise
//     they return the fixed_size_list storage with ARROW:extension:name on the field.
//   - Write is single-threaded and holds one row group (Arrow: one record batch)
//     of generated data, capped at 64 MiB per chunk for Parquet.
//   - Byte-identical output is promised only for the same arrow-go version; the
//     values themselves are fixed by the functions in values.go.
package datagen
