// Package tokcount answers one question: how many tokens does each document
// of a file hold under a tokenizer? It owns the token-count index that
// concatenated packing plans from (batching.ConcatPlan): per file and Key
// (the tokenizer file's SHA-256, the column, whether special tokens are
// added) the token count of every row, per row group (Counts); its encoding
// as a manifest per-file fact (FactKind, Encode, Decode: kind
// "token-count/v1", key Key.String()); and the server's in-memory cache of
// them by file identity (objstore.Object.CacheKey) and key (Store,
// MemoryStore).
//
// Counting (reading the column, tokenizing it) is package feed's, and
// writing the fact into a manifest `meshfeed index`'s: this package does no
// I/O and imports nothing of meshfeed but internal/lru (the Store's cache).
//
// # Caveats
//
//   - A count is the tokens Encode gives the row, without the end-of-document
//     token concatenation appends (the planner adds one per document).
//   - Counts are only as true as the key: a Store answers for the key it is
//     asked, so callers key by the tokenizer file's hash, never its name.
//   - Counts of a file are shared by every caller of Get: do not modify them.
package tokcount
