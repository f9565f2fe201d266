package tokenize

import "math/bits"

// pairTable is an open-addressing hash table from a pair of ids
// (left<<32 | right) to rank<<32 | merged id: the BPE hot path's lookup,
// a few times faster than a Go map with the same keys.
type pairTable struct {
	keys  []uint64
	vals  []uint64
	shift uint
	n     int
}

const pairEmpty = ^uint64(0)

func newPairTable(n int) *pairTable {
	size := 1 << bits.Len(uint(2*n+1))
	t := &pairTable{keys: make([]uint64, size), vals: make([]uint64, size), shift: uint(64 - bits.Len(uint(size-1)))}
	for i := range t.keys {
		t.keys[i] = pairEmpty
	}
	return t
}

func (t *pairTable) slot(k uint64) uint64 { return (k * 0x9E3779B97F4A7C15) >> t.shift }

// put stores v under k unless k is present (the first merge of a pair wins).
func (t *pairTable) put(k, v uint64) {
	mask := uint64(len(t.keys) - 1)
	for h := t.slot(k); ; h = (h + 1) & mask {
		switch t.keys[h] {
		case k:
			return
		case pairEmpty:
			t.keys[h], t.vals[h] = k, v
			t.n++
			return
		}
	}
}

func (t *pairTable) get(k uint64) (uint64, bool) {
	mask := uint64(len(t.keys) - 1)
	for h := t.slot(k); ; h = (h + 1) & mask {
		switch t.keys[h] {
		case k:
			return t.vals[h], true
		case pairEmpty:
			return 0, false
		}
	}
}
