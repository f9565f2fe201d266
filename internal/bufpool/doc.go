// Package bufpool recycles byte buffers by size class (package sizeclass,
// from 64 KiB on): fetch buffers and decompressed pages live from a ranged
// read to the end of decoding (the decoders copy out of them), and fresh
// ones would be zeroed by the runtime on every row group.
//
// # Caveats
//
// A buffer from Get holds whatever its last user left in it. Put only
// buffers that nothing still reads.
package bufpool
