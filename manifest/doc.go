// Package manifest answers one question: what does a dataset hold, stored
// once beside it?
//
// A manifest is one Parquet file (by default _meshfeed_manifest.parquet in
// the dataset's directory) with a row per data file: its URI (relative to
// the manifest's directory where the file lies under it, so that the
// directory can be renamed or synced with its times kept), its identity
// (size, modification time, GCS generation, room for an ETag), its format
// and schema (an index into the distinct schemas, stored once each in the
// file's key-value metadata), and the plan-time facts of each column and
// row group that package loader would otherwise read from every footer:
// rows, the byte ranges of each column chunk, decoded-size estimates and
// read costs, the null counts and min/max statistics the footer stores, and
// the errors a projection of the column would raise. A generic facts list
// per file (kind, key, value bytes, and the identity of the file they were
// computed from) stores what other features compute once per file (token
// counts, filter selections); a fact whose identity is not the file's
// current one is never returned.
//
// The package reads, writes, merges and checks manifests; computing the
// facts from footers, and planning from a manifest, are package loader's
// (it imports this package). It knows nothing of Parquet decoding.
//
// # Caveats
//
// A manifest is a snapshot: planning from it sees the files it names, not
// files added to the directory later (rebuild it with `meshfeed manifest`
// after adding files). Files it names that changed since are refused when
// they are first read (loader checks the identity), never read stale.
// Writing is atomic where the store's Creator is (nothing visible until
// Close). The encoding is deterministic: the same files give the same
// bytes, however many parts the manifest was built in (Merge).
package manifest
