package format

import (
	"encoding/binary"
	"testing"

	"github.com/parquet-go/parquet-go"
	pqformat "github.com/parquet-go/parquet-go/format"
)

// sparsePage returns the bytes of a v1 page of a fixed_size_list of
// float32: a header of hdr bytes, repetition and definition level sections
// of rep and def bytes (4-byte lengths claimed as given), then slots
// values.
func sparsePage(hdr, rep, def, repClaim, defClaim int, slots int64) []byte {
	b := make([]byte, hdr)
	b = binary.LittleEndian.AppendUint32(b, uint32(repClaim))
	b = append(b, make([]byte, rep)...)
	b = binary.LittleEndian.AppendUint32(b, uint32(defClaim))
	b = append(b, make([]byte, def)...)
	return append(b, make([]byte, 4*slots)...)
}

// TestSparseParts: the ranges a piece fetches of its edge pages leave out
// the values of the slots outside it (when at least sparseMin bytes), and
// the layout check accepts a page only when its level sections end where
// its values begin.
func TestSparseParts(t *testing.T) {
	c := &colDecoder{kind: kindFixedList, elemSize: 4, listSize: 8, maxDef: 1, phys: parquet.Float}
	md := &pqformat.ColumnMetaData{Codec: pqformat.Uncompressed}
	const slots = 1 << 18 // 1 MiB of float32 values a page
	page := sparsePage(20, 1000, 8, 1000, 8, slots)
	size := int64(len(page))
	locs := []pageLoc{{off: 100, size: size, first: 0, rows: slots, hdr: 20}, {off: 100 + size, size: size, first: slots, rows: slots, hdr: 20}}
	vs0, vs1 := 100+size-4*slots, 100+2*size-4*slots // where each page's values begin
	if !c.fastEligible() {
		t.Fatal("the test's column is not on the fast path")
	}
	got := c.sparseParts(md, locs, 100000, slots+50000)
	want := [][2]int64{{100, vs0}, {vs0 + 4*100000, vs1 + 4*50000}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("sparseParts = %v, want %v", got, want)
	}
	if p := c.sparseParts(md, locs, 0, 2*slots); p != nil {
		t.Errorf("sparseParts of whole pages = %v, want nil", p)
	}
	if p := c.sparseParts(md, locs, 100, 2*slots-100); p != nil {
		t.Errorf("sparseParts leaving out 400 bytes at each end = %v, want nil (under sparseMin)", p)
	}
	if p := c.sparseParts(&pqformat.ColumnMetaData{Codec: pqformat.Snappy}, locs, 100000, slots+50000); p != nil {
		t.Errorf("sparseParts of SNAPPY pages = %v, want nil", p)
	}
	b := append(append([]byte(nil), page...), page...)
	if !c.sparseLayout(b, 100, locs) {
		t.Error("sparseLayout of well-formed pages = false")
	}
	for _, bad := range [][]byte{
		sparsePage(20, 1000, 8, 1004, 8, slots),  // repetition levels claimed longer
		sparsePage(20, 1000, 8, 1000, 4, slots),  // definition levels claimed shorter
		sparsePage(20, 1000, 8, 1<<30, 8, slots), // past the page
	} {
		if c.sparseLayout(append(append([]byte(nil), bad...), page...), 100, locs) {
			t.Error("sparseLayout of a page whose level lengths do not end at its values = true")
		}
	}
	if c.sparseLayout(b, 100, []pageLoc{{off: 100, size: size, first: 0, rows: slots}}) {
		t.Error("sparseLayout of a page not located by its header (hdr 0) = true")
	}
}
