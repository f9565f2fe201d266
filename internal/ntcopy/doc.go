// Package ntcopy answers one question: how are bytes copied that the
// copying core will not read again?
//
// [Copy] copies like the builtin copy, but on amd64 it writes the bulk of
// a long copy with non-temporal stores (MOVNTDQ, whole 64-byte lines), which
// go to memory without first reading each destination line into the cache
// (the read for ownership an ordinary store makes) and without evicting the
// copying core's working set. A mixture's decoder writes each page's values
// into the slices of dozens of steps, a run of 20 KiB or so into each, which
// the transport or the client reads later from another core: there the
// runtime's memmove, whose ordinary stores read each line first, took 40%
// more time a byte than Copy (BenchmarkCopyScattered; BENCHMARKS.md,
// "Mixtures"). The runtime makes non-temporal stores only for copies of
// 1 MiB and more. Elsewhere Copy is the builtin copy.
//
// # Caveats
//
// Bytes the caller reads back soon after are slower from memory than from
// the cache: Copy is for destinations another core or process reads, or
// that are read much later. It ends with a store fence, so the bytes are
// visible to other cores before any store the caller makes after it.
package ntcopy
