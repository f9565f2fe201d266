package tokcount

import "github.com/meshfeed/meshfeed/internal/lru"

// Store keeps Counts by file identity (objstore.Object.CacheKey) and a
// Key's String. Implementations are safe for concurrent use; the Counts
// they return are shared and not modified.
type Store interface {
	Get(fileKey, key string) (*Counts, bool)
	Put(fileKey, key string, c *Counts)
}

// DefaultStoreBytes is the memory a MemoryStore of NewMemoryStore(0) keeps:
// the counts of about 64 million documents.
const DefaultStoreBytes = 256 << 20

// MemoryStore is a Store in memory; past its byte bound the least recently
// used entries are evicted.
type MemoryStore struct {
	cache *lru.Cache[[2]string, *Counts]
}

// NewMemoryStore returns a MemoryStore holding at most maxBytes
// (DefaultStoreBytes when maxBytes <= 0). Counts larger than the bound are
// not kept.
func NewMemoryStore(maxBytes int64) *MemoryStore {
	if maxBytes <= 0 {
		maxBytes = DefaultStoreBytes
	}
	return &MemoryStore{cache: lru.New[[2]string, *Counts](maxBytes)}
}

// Get implements Store.
func (s *MemoryStore) Get(fileKey, key string) (*Counts, bool) {
	return s.cache.Get([2]string{fileKey, key})
}

// Put implements Store.
func (s *MemoryStore) Put(fileKey, key string, c *Counts) {
	s.cache.Put([2]string{fileKey, key}, c, c.Bytes()+int64(len(fileKey)+len(key)))
}

// Len returns the entries kept.
func (s *MemoryStore) Len() int { return s.cache.Len() }
