// Package transport owns the wire: the Arrow Flight server that streams each
// client process the slices it needs, request validation, limits,
// backpressure, per-message metadata, and TLS and token checks for network mode.
//
// It does not plan (package batching) or read storage (package loader); it
// connects their output to gRPC and maps their errors to status codes, once.
package transport
