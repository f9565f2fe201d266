// Package batching answers one question: which row lands in which step?
//
// It owns the epoch plan of DESIGN.md's contract (row group order, the D
// contiguous streams, the shuffle window, the final-batch policy, padding and the
// mask, resume positions, and elastic resume: the [Remainder] of an epoch
// saved under one data-parallel degree and resumed under another, see
// docs/CONTRACT-elastic.md), mixtures of several sources (the per-step
// counts of each source, compose.go; the Mixture plan and its stop rules,
// mixture.go; SourceCursor reading a source's stream across its epochs,
// cut_take.go; DESIGN.md, "Mixtures"), concatenated packing (ConcatPlan:
// an epoch's documents as one token sequence cut into rows of L tokens,
// and PackRuns, concat.go; DESIGN.md, "Concatenated packing") and the
// stream cutters that turn
// decoded row groups into b-row slices. How each column of a slice looks on the wire (casts,
// fixed-length lists, packing) is package shape's question, not this one's.
//
// Planning is pure: it takes row counts, never reads a byte. The cutters work on
// Arrow records handed to them; they do not read storage (package loader) or
// send anything (package transport).
//
// # Caveats
//
//   - A Cutter is driven by its caller: when Next returns ok=false and Done is
//     false, push the segment Wants names (the whole row group's record, or its
//     rows), or the next piece of it (consecutive rows; Cutter.Reads lists
//     the pieces of a bounded size, cut on slice boundaries), then call Next
//     again. It is not safe for concurrent use.
//   - Records returned by Next belong to the caller, who
//     releases them. With no shuffle window a slice inside one row group is a
//     view of the pushed record (no column bytes copied); slices that straddle
//     row groups, shuffled slices and padding are copies, counted in
//     CopiedBytes.
//   - The permutations use this package's own SplitMix64, xoshiro256** and
//     Fisher-Yates (rand.go), not math/rand, so orders do not change with the
//     Go version; rand.go documents them precisely enough to port.
package batching
