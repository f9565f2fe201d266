package transport

// How a step's slices lie in a slot of the shared-memory wire: which columns
// can travel, and each slice's buffers, 64-byte aligned (see shm.go).

import (
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/bitutil"
)

// shmEligible reports whether every column of schema can travel as
// fixed-width buffers (what shmLayout lays out).
func shmEligible(schema *arrow.Schema) error {
	for _, f := range schema.Fields() {
		if !shmFixedType(f.Type) {
			return fmt.Errorf("transport: shm: %w (%w): column %q of type %s cannot travel through shared memory (only fixed-width columns: numbers, booleans, fixed-size lists and tensors of them); read it over Flight",
				ErrFailedPrecondition, errShmIneligible, f.Name, f.Type)
		}
	}
	return nil
}

func shmFixedType(dt arrow.DataType) bool {
	switch t := dt.(type) {
	case *arrow.BooleanType:
		return true
	case *arrow.FixedSizeListType:
		return shmFixedType(t.Elem())
	case arrow.ExtensionType:
		return shmFixedType(t.StorageType())
	}
	return virtualFixedWidth(dt.ID())
}

// shmItemLayout returns the buffers of each of the item's slices and the
// rows of each. The item's records, back to back, hold b rows of each slice
// of it.meta.Slices: one record per slice, one for the whole step, or
// several per slice (a mixture's parts, views of its sources' records).
// A slice made of several records is laid out as one: each of its buffers
// is their pieces back to back, joined as the wire copies it into the slot
// (joinLayouts), so that the client sees one record per slice whatever the
// backend handed over.
func shmItemLayout(it *item) ([][]shmBuf, int64, error) {
	starts, b, err := cutSlices(it)
	if err != nil {
		return nil, 0, err
	}
	layouts := make([][]shmBuf, len(starts)-1)
	for k := range layouts {
		pieces := it.slices[starts[k]:starts[k+1]]
		ls := make([][]shmBuf, len(pieces))
		for j, r := range pieces {
			if ls[j], err = shmSliceLayout(r); err != nil {
				return nil, 0, fmt.Errorf("transport: shm: epoch %d step %d slice %d: %w", it.meta.Epoch, it.meta.Step, it.meta.Slices[min(k, len(it.meta.Slices)-1)], err)
			}
		}
		layouts[k] = joinLayouts(ls)
	}
	return layouts, b, nil
}

// cutSlices makes it.slices pieces that each lie in one slice, in order:
// a record that straddles slices is cut into views (a record inside one
// slice stays as it is), and records without rows go. It returns where
// each slice's pieces start in it.slices (one entry per slice, then
// len(it.slices)) and the rows b of every slice. A step whose rows are not
// b for each slice of it.meta.Slices is an error.
func cutSlices(it *item) ([]int, int64, error) {
	n := int64(len(it.meta.Slices))
	var total int64
	for _, r := range it.slices {
		total += r.NumRows()
	}
	if n == 0 || total == 0 || total%n != 0 {
		return nil, 0, fmt.Errorf("transport: shm: epoch %d step %d: %d rows in %d records for %d slices", it.meta.Epoch, it.meta.Step, total, len(it.slices), n)
	}
	b := total / n
	out := make([]arrow.RecordBatch, 0, len(it.slices))
	starts := make([]int, 1, n+1)
	var at int64 // rows of the current slice so far
	for _, r := range it.slices {
		for lo := int64(0); lo < r.NumRows(); {
			take := min(r.NumRows()-lo, b-at)
			if take == r.NumRows() {
				r.Retain()
				out = append(out, r)
			} else {
				out = append(out, r.NewSlice(lo, lo+take))
			}
			lo, at = lo+take, at+take
			if at == b {
				starts, at = append(starts, len(out)), 0
			}
		}
		r.Release()
	}
	it.slices = out
	return starts, b, nil
}

// joinLayouts returns the layout of one slice made of the records whose
// layouts are ls (in order; one record is its own layout): every buffer is
// the records' buffers back to back (bitmaps bit after bit), and a
// validity bitmap is absent only when every record's is. A record without a
// validity bitmap where another has one contributes set bits.
func joinLayouts(ls [][]shmBuf) []shmBuf {
	if len(ls) == 1 {
		return ls[0]
	}
	out := make([]shmBuf, len(ls[0]))
	flat := make([]shmBuf, len(ls)*len(out)) // every buffer's pieces: one allocation
	for i := range out {
		absent, bitmap := true, false
		for _, l := range ls {
			absent = absent && l[i].b == nil
			bitmap = bitmap || l[i].bits > 0
		}
		if absent {
			continue // no nulls in any record: an absent validity bitmap
		}
		ps := flat[i*len(ls) : (i+1)*len(ls) : (i+1)*len(ls)]
		for j, l := range ls {
			ps[j] = l[i]
		}
		out[i] = shmBuf{pieces: ps, bitmap: bitmap}
	}
	return out
}

// shmBuf is one body buffer of a slice as it goes into the region: bytes
// to copy, or (bits > 0) a bitmap of bits bits starting at bit bitOff of b
// that is copied shifted to start at bit 0. A nil, zero shmBuf is an absent
// validity bitmap.
//
// A buffer joined from several records (joinLayouts) has pieces instead:
// theirs back to back, bit after bit when bitmap. An absent validity bitmap
// among them stands for valid set bits.
type shmBuf struct {
	b      []byte
	bitOff int
	bits   int
	valid  int // of an absent validity bitmap: the rows it stands for
	pieces []shmBuf
	bitmap bool
}

func (b shmBuf) len() int64 {
	if b.pieces != nil {
		var n int64
		for _, p := range b.pieces {
			if b.bitmap {
				n += int64(p.bits + p.valid)
			} else {
				n += int64(len(p.b))
			}
		}
		if b.bitmap {
			return (n + 7) / 8
		}
		return n
	}
	if b.bits > 0 {
		return int64(b.bits+7) / 8
	}
	return int64(len(b.b))
}

// shmSliceLayout returns the body buffers of one slice in IPC order
// (depth first, each array's validity bitmap first), without copying
// anything: ranges of the slice's own buffers, and bitmaps (booleans,
// validity of columns with nulls) to be copied shifted to bit 0.
func shmSliceLayout(rec arrow.RecordBatch) ([]shmBuf, error) {
	out := make([]shmBuf, 0, 3*rec.NumCols()) // a fixed-size list's: its validity, its child's and the values
	for j, col := range rec.Columns() {
		var ok bool
		if out, ok = shmArrayLayout(out, col.Data()); !ok {
			d := col.Data()
			return nil, fmt.Errorf("%w: column %q (%s) has no fixed-width layout: read it over Flight",
				ErrFailedPrecondition, rec.ColumnName(j), d.DataType())
		}
	}
	return out, nil
}

// shmArrayLayout appends the buffers of d (its offset and length applied)
// to out, and reports whether d's type is fixed-width (shmFixedType).
func shmArrayLayout(out []shmBuf, d arrow.ArrayData) ([]shmBuf, bool) {
	return shmRowsLayout(out, d, d.Offset(), d.Len())
}

// shmRowsLayout is shmArrayLayout of rows [off, off+n) of d's buffers (a
// fixed-size list's child's rows are its own rows times the list size,
// from the child's offset on: no view of the child is made).
func shmRowsLayout(out []shmBuf, d arrow.ArrayData, off, n int) ([]shmBuf, bool) {
	dt := d.DataType()
	if ext, ok := dt.(arrow.ExtensionType); ok {
		dt = ext.StorageType()
	}
	validity := shmBuf{valid: n}
	if shmSendsValidity(d, off, n) {
		validity = shmBuf{b: d.Buffers()[0].Bytes(), bitOff: off, bits: n}
	}
	out = append(out, validity)
	switch t := dt.(type) {
	case *arrow.BooleanType:
		return append(out, shmBuf{b: d.Buffers()[1].Bytes(), bitOff: off, bits: n}), true
	case *arrow.FixedSizeListType:
		size := int(t.Len())
		child := d.Children()[0]
		return shmRowsLayout(out, child, child.Offset()+off*size, n*size)
	case arrow.FixedWidthDataType:
		if !virtualFixedWidth(dt.ID()) {
			return nil, false
		}
		w := t.BitWidth() / 8
		return append(out, shmBuf{b: d.Buffers()[1].Bytes()[off*w : (off+n)*w]}), true
	}
	return nil, false
}

// slicesBytes is the bytes a step's slices hold for the memory budget: their
// visible rows' buffers (what the region receives), or, for a column that
// has no fixed-width layout, the record's whole buffers.
func slicesBytes(recs []arrow.RecordBatch) int64 {
	var n int64
	for _, r := range recs {
		var rn int64
		for _, col := range r.Columns() {
			d := col.Data()
			b, ok := shmRowsBytes(d, d.Offset(), d.Len())
			if !ok {
				rn = recordBytes(r)
				break
			}
			rn += b
		}
		n += rn
	}
	return n
}

// shmSendsValidity reports whether rows [off, off+n) of d hold a null, so
// that their validity bitmap goes: d's null count where they are all of d
// (a view's is unknown, -1, until counted), else counted in those rows.
func shmSendsValidity(d arrow.ArrayData, off, n int) bool {
	v := d.Buffers()[0]
	if v == nil || d.NullN() == 0 {
		return false
	}
	return d.NullN() > 0 && off == d.Offset() && n == d.Len() || bitutil.CountSetBits(v.Bytes(), off, n) < n
}

// shmRowsBytes returns the bytes of shmRowsLayout's buffers of rows [off,
// off+n) of d, without making them; false where d's type is not
// fixed-width.
func shmRowsBytes(d arrow.ArrayData, off, n int) (int64, bool) {
	dt := d.DataType()
	if ext, ok := dt.(arrow.ExtensionType); ok {
		dt = ext.StorageType()
	}
	var size int64
	if shmSendsValidity(d, off, n) {
		size = int64(n+7) / 8
	}
	switch t := dt.(type) {
	case *arrow.BooleanType:
		return size + int64(n+7)/8, true
	case *arrow.FixedSizeListType:
		child := d.Children()[0]
		b, ok := shmRowsBytes(child, child.Offset()+off*int(t.Len()), n*int(t.Len()))
		return size + b, ok
	case arrow.FixedWidthDataType:
		if !virtualFixedWidth(dt.ID()) {
			return 0, false
		}
		return size + int64(n)*int64(t.BitWidth()/8), true
	}
	return 0, false
}

// shmBytes is the slot room that a step's slices take, each buffer 64-byte
// aligned.
func shmBytes(slices [][]shmBuf) int64 {
	var n int64
	for _, bufs := range slices {
		for _, b := range bufs {
			n += alignUp(b.len(), shmAlign)
		}
	}
	return max(n, shmAlign)
}

func alignUp(n, a int64) int64 { return (n + a - 1) / a * a }
