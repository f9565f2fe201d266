package transport

// How a step's slices lie in a slot of the shared-memory wire: which columns
// can travel, and each slice's buffers, 64-byte aligned (see shm.go).

import (
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
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

// shmItemLayout returns the buffers of each of the item's slices (cut into
// one record per slice first, see splitSlices).
func shmItemLayout(it *item) ([][]shmBuf, error) {
	if err := splitSlices(it); err != nil {
		return nil, err
	}
	layouts := make([][]shmBuf, len(it.slices))
	for k, r := range it.slices {
		var err error
		if layouts[k], err = shmSliceLayout(r); err != nil {
			return nil, fmt.Errorf("transport: shm: epoch %d step %d slice %d: %w", it.meta.Epoch, it.meta.Step, it.meta.Slices[min(k, len(it.meta.Slices)-1)], err)
		}
		if r.NumRows() != it.slices[0].NumRows() {
			return nil, fmt.Errorf("transport: shm: epoch %d step %d: slices of %d and %d rows", it.meta.Epoch, it.meta.Step, it.slices[0].NumRows(), r.NumRows())
		}
	}
	return layouts, nil
}

// splitSlices makes it.slices one record per slice of it.meta.Slices: a
// backend may hand a step's slices already joined (transport.Step), which
// are cut into views here.
func splitSlices(it *item) error {
	n := len(it.meta.Slices)
	if len(it.slices) == n || n == 0 {
		return nil
	}
	if len(it.slices) != 1 || it.slices[0].NumRows()%int64(n) != 0 {
		return fmt.Errorf("transport: shm: epoch %d step %d: %d records for %d slices", it.meta.Epoch, it.meta.Step, len(it.slices), n)
	}
	rec, b := it.slices[0], it.slices[0].NumRows()/int64(n)
	parts := make([]arrow.RecordBatch, n)
	for k := range parts {
		parts[k] = rec.NewSlice(int64(k)*b, int64(k+1)*b)
	}
	rec.Release()
	it.slices = parts
	return nil
}

// shmBuf is one body buffer of a slice as it goes into the region: bytes
// to copy, or (bits > 0) a bitmap of bits bits starting at bit bitOff of b
// that is copied shifted to start at bit 0. A nil, zero shmBuf is an absent
// validity bitmap.
type shmBuf struct {
	b      []byte
	bitOff int
	bits   int
}

func (b shmBuf) len() int64 {
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
	var out []shmBuf
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
	dt := d.DataType()
	if ext, ok := dt.(arrow.ExtensionType); ok {
		dt = ext.StorageType()
	}
	off, n := d.Offset(), d.Len()
	validity := shmBuf{}
	if d.NullN() > 0 && d.Buffers()[0] != nil {
		validity = shmBuf{b: d.Buffers()[0].Bytes(), bitOff: off, bits: n}
	}
	out = append(out, validity)
	switch t := dt.(type) {
	case *arrow.BooleanType:
		return append(out, shmBuf{b: d.Buffers()[1].Bytes(), bitOff: off, bits: n}), true
	case *arrow.FixedSizeListType:
		size := int(t.Len())
		child := array.NewSliceData(d.Children()[0], int64(off*size), int64((off+n)*size))
		defer child.Release()
		return shmArrayLayout(out, child)
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
		bufs, err := shmSliceLayout(r)
		if err != nil {
			n += recordBytes(r)
			continue
		}
		for _, b := range bufs {
			n += b.len()
		}
	}
	return n
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
