package format

import (
	pqformat "github.com/parquet-go/parquet-go/format"
)

// checkPages walks the page headers of one fetched column chunk before
// parquet-go decodes it, so that a corrupt header cannot make the decoder
// allocate gigabytes or loop: every page must fit in the chunk, and the
// pages' uncompressed sizes and value counts must stay within the chunk's
// footer totals and the configured per-row-group limit. It reads headers
// only (a few bytes per page).
func checkPages(chunk []byte, md *pqformat.ColumnMetaData, limit int64) error {
	_, err := walkPages(chunk, md, limit)
	return err
}

// walkPages is checkPages, and reports whether some data page v2 of the
// chunk holds no value: parquet-go v0.32 dereferences the levels such a page
// does not have (column.go decodeDataPage), so arrow-go decodes the chunk.
func walkPages(chunk []byte, md *pqformat.ColumnMetaData, limit int64) (emptyV2 bool, err error) {
	lim, err := chunkLimits(md, limit)
	if err != nil {
		return false, err
	}
	it := newPageIter(chunk, lim)
	var p pageHead
	for it.next(&p, false) {
		emptyV2 = emptyV2 || p.kind == pageDataV2 && p.nvals == 0
	}
	return emptyV2, it.Err()
}

// withoutEmptyPages returns a copy of a column chunk's bytes with its data
// pages of 0 values moved after the others (the same bytes, reordered), or
// nil when no such page comes before a page with values (or the headers do
// not parse: the decoder reports those). arrow-go, like Arrow C++, takes a
// page of 0 values for the end of the chunk and reads no value after it.
func withoutEmptyPages(chunk []byte) []byte {
	var full, empty [][2]int64
	early := false
	it := newPageIter(chunk, noLimits)
	var p pageHead
	for it.next(&p, false) {
		page := [2]int64{p.at, p.end()}
		if (p.kind == pageDataV1 || p.kind == pageDataV2) && p.nvals == 0 {
			empty = append(empty, page)
			continue
		}
		early = early || len(empty) > 0
		full = append(full, page)
	}
	if !early || it.Err() != nil {
		return nil
	}
	out := make([]byte, 0, len(chunk))
	for _, p := range append(full, empty...) {
		out = append(out, chunk[p[0]:p[1]]...)
	}
	return out
}
