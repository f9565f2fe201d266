package filter

import (
	"encoding/binary"
	"fmt"
)

// SelectionFactKind is the kind under which a file's selection by a
// predicate is stored as a fact of a dataset manifest (the key: the
// predicate's Canonical form; the value: EncodeFileSelection). The suffix
// is the encoding's version: a later encoding gets a new kind, so an old
// manifest's facts are passed over, never misread.
const SelectionFactKind = "filter-selection/v1"

// EncodeFileSelection encodes fs compactly: the row group count, then per
// row group its rows, its run count and each run as (gap from the previous
// run's end, length), all unsigned varints. A row group kept whole is 3 to
// about 12 bytes; a scattered one about 2 bytes per run.
func EncodeFileSelection(fs *FileSelection) []byte {
	b := binary.AppendUvarint(nil, uint64(len(fs.RowGroups)))
	for _, s := range fs.RowGroups {
		b = binary.AppendUvarint(b, uint64(s.Rows()))
		b = binary.AppendUvarint(b, uint64(len(s.runs)))
		prev := int64(0)
		for _, r := range s.runs {
			b = binary.AppendUvarint(b, uint64(r.Lo-prev))
			b = binary.AppendUvarint(b, uint64(r.Hi-r.Lo))
			prev = r.Hi
		}
	}
	return b
}

// DecodeFileSelection decodes what EncodeFileSelection wrote, checking
// every run (sorted, disjoint, non-empty, within its row group) and that
// nothing follows; a damaged value is an error, never a wrong selection.
func DecodeFileSelection(b []byte) (*FileSelection, error) {
	d := uvarints{b: b}
	n := d.next()
	if d.err != nil || n > uint64(len(b)) {
		return nil, fmt.Errorf("filter: stored selection: bad row group count: %w", ErrInvalid)
	}
	fs := &FileSelection{RowGroups: make([]*Selection, n)}
	for i := range fs.RowGroups {
		rows, nruns := d.next(), d.next()
		if d.err != nil || rows > 1<<62 || nruns > uint64(len(d.b)) {
			return nil, fmt.Errorf("filter: stored selection: row group %d: truncated or damaged: %w", i, ErrInvalid)
		}
		runs := make([]Run, nruns)
		prev := uint64(0)
		for j := range runs {
			gap, n := d.next(), d.next()
			lo := prev + gap
			if d.err != nil || gap > rows || n > rows || lo > rows {
				return nil, fmt.Errorf("filter: stored selection: row group %d run %d: truncated or damaged: %w", i, j, ErrInvalid)
			}
			runs[j] = Run{int64(lo), int64(lo + n)}
			prev = lo + n
		}
		if nruns == 0 {
			runs = nil
		}
		s, err := NewSelection(int64(rows), runs)
		if err != nil {
			return nil, fmt.Errorf("filter: stored selection: row group %d: %w: %w", i, ErrInvalid, err)
		}
		fs.RowGroups[i] = s
	}
	if len(d.b) != 0 {
		return nil, fmt.Errorf("filter: stored selection: %d bytes after the last row group: %w", len(d.b), ErrInvalid)
	}
	return fs, nil
}

// uvarints reads unsigned varints, remembering the first error.
type uvarints struct {
	b   []byte
	err error
}

func (d *uvarints) next() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = fmt.Errorf("bad varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}
