package loader

import (
	"container/list"
	"sync"
)

// FooterCache keeps parsed footers keyed by Object.CacheKey (URI plus GCS
// generation, or size and mtime on disk), so re-planning the same files (a new
// epoch, a second stream, a restarted client) reads no footer twice. A changed
// object has a new key and is read again. Safe for concurrent use; a nil
// *FooterCache caches nothing.
type FooterCache struct {
	mu    sync.Mutex
	max   int
	order *list.List // front = most recently used; values are *footerEntry
	items map[string]*list.Element
}

type footerEntry struct {
	key string
	ft  footer
}

var defaultFooterCache = NewFooterCache(4096)

// NewFooterCache returns a cache holding at most maxEntries footers (least
// recently used evicted first). maxEntries <= 0 returns nil: no caching.
func NewFooterCache(maxEntries int) *FooterCache {
	if maxEntries <= 0 {
		return nil
	}
	return &FooterCache{max: maxEntries, order: list.New(), items: map[string]*list.Element{}}
}

func (c *FooterCache) get(key string) (footer, bool) {
	if c == nil {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.items[key]
	if !ok {
		return nil, false
	}
	c.order.MoveToFront(e)
	return e.Value.(*footerEntry).ft, true
}

func (c *FooterCache) put(key string, ft footer) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.items[key]; ok {
		e.Value.(*footerEntry).ft = ft
		c.order.MoveToFront(e)
		return
	}
	c.items[key] = c.order.PushFront(&footerEntry{key: key, ft: ft})
	for c.order.Len() > c.max {
		last := c.order.Back()
		c.order.Remove(last)
		delete(c.items, last.Value.(*footerEntry).key)
	}
}

// Len reports how many footers are cached.
func (c *FooterCache) Len() int {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}
