// Package shape answers one question: what does each column of a slice look
// like on the wire?
//
// Shaping runs on every slice just before it is sent. It narrows dtypes (so
// fewer bytes travel) and gives variable-length lists a static shape (so the
// Python client can hand XLA fixed shapes): a list column becomes
// fixed_size_list[L] plus a length column, or is packed first-fit into fewer,
// full rows.
//
// Every output schema is computable from the input schema and the []Column
// alone (OutputSchema), so the server answers GetFlightInfo before reading a
// byte. Shaping knows nothing of plans, steps or storage: it takes an Arrow
// record and returns another; it imports only arrow.
//
// # Caveats
//
//   - Shaper.ApplyParts packs the rows of several records (a mixture's slice,
//     one part per source block) as Apply packs them joined, without joining
//     them first, and can tag each token with its part's tag.
//   - Records returned by Shaper.Apply belong to the caller, who releases them;
//     the input record is not released. A column that needs no work is passed
//     through as the same array (retained), not copied.
//   - A Shaper is immutable after NewShaper and safe for concurrent use.
package shape
