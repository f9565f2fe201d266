package lru

import (
	"container/list"
	"sync"
)

// Cache keeps values by key, evicting the least recently used past its byte
// bound.
type Cache[K comparable, V any] struct {
	mu    sync.Mutex
	max   int64
	bytes int64
	order *list.List // of *entry[K, V], most recent first
	index map[K]*list.Element
}

type entry[K comparable, V any] struct {
	key  K
	val  V
	size int64
}

// New returns a Cache holding values of at most maxBytes together.
func New[K comparable, V any](maxBytes int64) *Cache[K, V] {
	return &Cache[K, V]{max: maxBytes, order: list.New(), index: map[K]*list.Element{}}
}

// Get returns the value of key and marks it used.
func (c *Cache[K, V]) Get(key K) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.index[key]
	if !ok {
		var zero V
		return zero, false
	}
	c.order.MoveToFront(el)
	return el.Value.(*entry[K, V]).val, true
}

// Put keeps val of size bytes under key (replacing what was there) and
// evicts the least recently used past the bound; a value larger than the
// bound is not kept.
func (c *Cache[K, V]) Put(key K, val V, size int64) {
	if size > c.max {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.index[key]; ok {
		c.bytes -= el.Value.(*entry[K, V]).size
		c.order.Remove(el)
	}
	c.index[key] = c.order.PushFront(&entry[K, V]{key: key, val: val, size: size})
	for c.bytes += size; c.bytes > c.max; {
		el := c.order.Back()
		e := el.Value.(*entry[K, V])
		c.order.Remove(el)
		delete(c.index, e.key)
		c.bytes -= e.size
	}
}

// Len returns the values kept.
func (c *Cache[K, V]) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}
