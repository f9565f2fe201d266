package filter

import "github.com/meshfeed/meshfeed/internal/lru"

// FileSelection is the rows of one file a predicate keeps: one Selection
// per row group, in file order.
type FileSelection struct {
	RowGroups []*Selection
}

// Bytes estimates the memory fs holds.
func (fs *FileSelection) Bytes() int64 {
	n := int64(64)
	for _, s := range fs.RowGroups {
		n += s.Bytes()
	}
	return n
}

// Store keeps FileSelections by file identity (objstore.Object.CacheKey:
// URI plus generation, or size and modification time) and a predicate's
// canonical form (Predicate.Canonical). Implementations are safe for
// concurrent use; a FileSelection they return is shared and not modified.
type Store interface {
	Get(fileKey, predicate string) (*FileSelection, bool)
	Put(fileKey, predicate string, fs *FileSelection)
}

// DefaultStoreBytes is the memory a MemoryStore of NewMemoryStore(0) keeps.
const DefaultStoreBytes = 256 << 20

// MemoryStore is a Store in memory, least recently used entries evicted
// past its byte bound.
type MemoryStore struct {
	cache *lru.Cache[[2]string, *FileSelection]
}

// NewMemoryStore returns a MemoryStore holding at most maxBytes
// (DefaultStoreBytes when maxBytes <= 0). A selection larger than the bound
// is not kept.
func NewMemoryStore(maxBytes int64) *MemoryStore {
	if maxBytes <= 0 {
		maxBytes = DefaultStoreBytes
	}
	return &MemoryStore{cache: lru.New[[2]string, *FileSelection](maxBytes)}
}

// Get implements Store.
func (m *MemoryStore) Get(fileKey, predicate string) (*FileSelection, bool) {
	return m.cache.Get([2]string{fileKey, predicate})
}

// Put implements Store.
func (m *MemoryStore) Put(fileKey, predicate string, fs *FileSelection) {
	m.cache.Put([2]string{fileKey, predicate}, fs, fs.Bytes()+int64(len(fileKey)+len(predicate)))
}

// Len is the number of entries kept.
func (m *MemoryStore) Len() int { return m.cache.Len() }
