// Package transport owns the wire: the Arrow Flight server that streams each
// client process the slices it needs, request validation, limits,
// backpressure, per-message metadata, and TLS and token checks for network mode.
//
// It does not plan (package batching) or read storage (package loader); it
// connects their output to gRPC and maps their errors to status codes, once.
// The seam is the Backend interface: Info answers GetFlightInfo, Open starts
// the Stream of a DoGet. docs/PROTOCOL.md specifies the wire (ticket JSON,
// message sequence, app_metadata, status codes) for clients in any language.
//
// # Caveats
//
//   - Records returned by Stream.Next belong to the server from then on: it
//     releases each one after sending it, or when the stream is cancelled. A
//     Backend that keeps a record (a cache) must Retain it before returning it.
//   - Stream.Next runs on its own goroutine, ahead of the send loop by at most
//     the prefetch depth and the shared memory budget; it must honour its
//     context, since the server waits for it to return before calling Close.
//   - Errors are converted to gRPC status codes only at the server's edge; a
//     Backend returns wrapped errors (this package's sentinels, or its own
//     registered with WithErrorCode), never status errors of its own making.
package transport
