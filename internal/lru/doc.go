// Package lru answers one question: which values does a byte-bounded cache
// keep? Cache is a least-recently-used map from a key to a value of a
// stated size, safe for concurrent use; the per-file caches of filter
// selections (filter.MemoryStore) and token counts (tokcount.MemoryStore)
// are both one. It imports nothing of meshfeed.
package lru
