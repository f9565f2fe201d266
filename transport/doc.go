// Package transport owns the wire: the Arrow Flight server that streams each
// client process the slices it needs, request validation, limits,
// backpressure, per-message metadata, and TLS and token checks for network mode.
//
// It is a wire and nothing else: it imports arrow and grpc, never the packages
// that plan, read or shape (package feed composes those into a Backend). The
// seam is the Backend interface: Info answers GetFlightInfo, Open starts the
// Stream of a DoGet, and each Step comes as its slices plus metadata; how a
// step's slices go on the wire (their virtual concatenation into one Flight
// message, join.go and zerocopy.go) is private to this package, so a second
// transport is a new package or file beside this one, not a fork of the
// pipeline. The shared-memory wire (shm.go) is the second: steps go through
// memfd regions, by reference when the backend (an AllocatingBackend)
// allocated their buffers from the stream's arena (shm_arena.go), copied into
// a slot otherwise. Errors are mapped to status codes once, at the server's edge, by
// this package's sentinels and the Backend's own table (ErrorCoder). docs/PROTOCOL.md specifies the wire (ticket JSON,
// message sequence, app_metadata, status codes) for clients in any language.
//
// # Caveats
//
//   - Records of a Step returned by Stream.Next belong to the server from then
//     on: it releases each one after sending it, or when the stream is
//     cancelled. A Backend that keeps a record (a cache) must Retain it before
//     returning it. A panic in Next ends that stream with an error, not the
//     process.
//   - Stream.Next runs on its own goroutine, ahead of the send loop by at most
//     the prefetch depth and the shared memory budget; it must honour its
//     context, since the server waits for it to return before calling Close.
//   - Sizes a ticket names are bounded by DecodeRequest (limits.go); what a
//     plan needs of the server (a step against the max message size, a
//     stream's memory against the budget) is the backend's to check and
//     reserve, through the Limits and the one MemoryAccount New hands a
//     LimitedBackend. Queued steps, streams' reservations and shared-memory
//     regions all count against that account.
//   - A stream whose client takes no step for the idle timeout is ended
//     (ErrIdle): a DoGet's stream runs on its own goroutine so that a send
//     its client never takes can be abandoned. Waiting for the next step
//     counts too while gRPC holds steps of the stream it took but has not
//     written (they hold the memory the next step may wait for; idle.go).
//     Once abandoned, the stream starts no further send; it closes its
//     Stream after its call has returned, and Shutdown waits for that. A step whose zero-copy message
//     gRPC drops unfreed (its stream ended while it was queued) is released,
//     with its share of the memory account, once its frame is garbage
//     (zerocopy.go): the account can hold such bytes until the next GC.
//   - Errors are converted to gRPC status codes only at the server's edge; a
//     Backend returns wrapped errors (this package's sentinels, or its own
//     registered with WithErrorCode), never status errors of its own making.
package transport
