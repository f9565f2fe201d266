// Package batching answers one question: which row lands in which step?
//
// It owns the epoch plan of DESIGN.md's contract (row group order, the D
// contiguous streams, the shuffle window, the final-batch policy, padding and the
// mask, resume positions) and the stream cutters that turn decoded row groups
// into b-row slices, plus per-column shaping (dtype casts, fixed-length lists,
// sequence packing).
//
// Planning is pure: it takes row counts, never reads a byte. The cutters work on
// Arrow records handed to them; they do not read storage (package loader) or
// send anything (package transport).
package batching
