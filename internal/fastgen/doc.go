// Package fastgen generates the test columns of the loader's and format's
// decode tests (the benchmark's layout: fixed-width values, fixed-size lists
// and lists of them, and columns the fast path must leave alone), writes
// them to Parquet files with arrow-go, and checks decoded columns against
// the formulas that generated them, not against either decoder.
package fastgen
