package objstore

import (
	"container/list"
	"sync"
)

// FooterCache keeps what was parsed from objects (their footers), keyed by
// [Object.CacheKey] (URI plus GCS generation, S3/HTTPS ETag, or size and mtime), so
// re-planning the same files (a new epoch, a second stream, a restarted
// client) reads no footer twice. A changed object has a new key and is read
// again. It knows nothing of what it holds: V is the caller's parsed footer.
// Safe for concurrent use; a nil *FooterCache caches nothing.
type FooterCache[V any] struct {
	mu    sync.Mutex
	max   int
	order *list.List // front = most recently used; values are *footerEntry[V]
	items map[string]*list.Element
}

type footerEntry[V any] struct {
	key string
	v   V
}

// NewFooterCache returns a cache holding at most maxEntries values (least
// recently used evicted first). maxEntries <= 0 returns nil: no caching.
func NewFooterCache[V any](maxEntries int) *FooterCache[V] {
	if maxEntries <= 0 {
		return nil
	}
	return &FooterCache[V]{max: maxEntries, order: list.New(), items: map[string]*list.Element{}}
}

// Get returns the value cached for this version of obj.
func (c *FooterCache[V]) Get(obj Object) (V, bool) {
	var zero V
	if c == nil {
		return zero, false
	}
	key := obj.CacheKey()
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.items[key]
	if !ok {
		return zero, false
	}
	c.order.MoveToFront(e)
	return e.Value.(*footerEntry[V]).v, true
}

// Put caches v for this version of obj.
func (c *FooterCache[V]) Put(obj Object, v V) {
	if c == nil {
		return
	}
	key := obj.CacheKey()
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.items[key]; ok {
		e.Value.(*footerEntry[V]).v = v
		c.order.MoveToFront(e)
		return
	}
	c.items[key] = c.order.PushFront(&footerEntry[V]{key: key, v: v})
	for c.order.Len() > c.max {
		last := c.order.Back()
		c.order.Remove(last)
		delete(c.items, last.Value.(*footerEntry[V]).key)
	}
}

// Len reports how many values are cached.
func (c *FooterCache[V]) Len() int {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}
