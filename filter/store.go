package filter

import (
	"container/list"
	"sync"
)

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
	mu    sync.Mutex
	max   int64
	bytes int64
	lru   *list.List // of *storeEntry, most recent first
	byKey map[[2]string]*list.Element
}

type storeEntry struct {
	key [2]string
	fs  *FileSelection
	n   int64
}

// NewMemoryStore returns a MemoryStore holding at most maxBytes
// (DefaultStoreBytes when maxBytes <= 0). A selection larger than the bound
// is not kept.
func NewMemoryStore(maxBytes int64) *MemoryStore {
	if maxBytes <= 0 {
		maxBytes = DefaultStoreBytes
	}
	return &MemoryStore{max: maxBytes, lru: list.New(), byKey: map[[2]string]*list.Element{}}
}

// Get implements Store.
func (m *MemoryStore) Get(fileKey, predicate string) (*FileSelection, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.byKey[[2]string{fileKey, predicate}]
	if !ok {
		return nil, false
	}
	m.lru.MoveToFront(e)
	return e.Value.(*storeEntry).fs, true
}

// Put implements Store.
func (m *MemoryStore) Put(fileKey, predicate string, fs *FileSelection) {
	n := fs.Bytes() + int64(len(fileKey)+len(predicate))
	if n > m.max {
		return
	}
	key := [2]string{fileKey, predicate}
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.byKey[key]; ok {
		m.bytes -= e.Value.(*storeEntry).n
		m.lru.Remove(e)
	}
	m.byKey[key] = m.lru.PushFront(&storeEntry{key: key, fs: fs, n: n})
	m.bytes += n
	for m.bytes > m.max {
		last := m.lru.Back()
		ent := last.Value.(*storeEntry)
		m.lru.Remove(last)
		delete(m.byKey, ent.key)
		m.bytes -= ent.n
	}
}

// Len is the number of entries kept.
func (m *MemoryStore) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lru.Len()
}
