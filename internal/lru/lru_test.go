package lru

import "testing"

// Get refreshes an entry, Put evicts the least recently used past the
// bound, replaces a key's value and size, and keeps nothing over the bound.
func TestCacheEvictsLeastRecentlyUsed(t *testing.T) {
	c := New[string, int](30)
	c.Put("a", 1, 10)
	c.Put("b", 2, 10)
	c.Put("c", 3, 10)
	if _, ok := c.Get("a"); !ok {
		t.Fatal("a missing before any eviction")
	}
	c.Put("d", 4, 10) // evicts b, the least recently used
	for k, want := range map[string]bool{"a": true, "b": false, "c": true, "d": true} {
		if _, ok := c.Get(k); ok != want {
			t.Errorf("Get(%q) present = %v, want %v", k, ok, want)
		}
	}
	c.Put("a", 5, 25) // replaced: 25 + c 10 + d 10 > 30, so the two oldest go
	if v, ok := c.Get("a"); !ok || v != 5 || c.Len() != 1 {
		t.Errorf("after replacing a: Get(a) = %d, %v; Len = %d, want 5, true, 1", v, ok, c.Len())
	}
	c.Put("big", 6, 31)
	if _, ok := c.Get("big"); ok {
		t.Error("a value over the bound was kept")
	}
}
