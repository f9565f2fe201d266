package loader

import (
	"bytes"
	"fmt"

	"github.com/parquet-go/parquet-go/encoding/thrift"
	"github.com/parquet-go/parquet-go/format"
)

// checkPages walks the page headers of one fetched column chunk before
// parquet-go decodes it, so that a corrupt header cannot make the decoder
// allocate gigabytes or loop: every page must fit in the chunk, and the
// pages' uncompressed sizes and value counts must stay within the chunk's
// footer totals and the configured per-row-group limit. It reads headers
// only (a few bytes per page).
func checkPages(chunk []byte, md *format.ColumnMetaData, limit int64) error {
	_, err := walkPages(chunk, md, limit)
	return err
}

// walkPages is checkPages, and reports whether some data page v2 of the
// chunk holds no value: parquet-go v0.32 dereferences the levels such a page
// does not have (column.go decodeDataPage), so arrow-go decodes the chunk.
func walkPages(chunk []byte, md *format.ColumnMetaData, limit int64) (emptyV2 bool, err error) {
	var proto thrift.CompactProtocol
	br := bytes.NewReader(chunk)
	dec := thrift.NewDecoder(proto.NewReader(br))
	var uncompressed, values int64
	maxValues := md.NumValues
	if maxValues < 0 || maxValues > limit {
		return false, fmt.Errorf("footer claims %d values in the chunk, over the limit of %d: %w; the footer is corrupt, or raise WithMaxRowGroupBytes", md.NumValues, limit, ErrCorrupt)
	}
	for page := 0; br.Len() > 0; page++ {
		var h format.PageHeader
		if err := dec.Decode(&h); err != nil {
			return false, fmt.Errorf("page %d header at chunk offset %d: %w: %w", page, len(chunk)-br.Len(), err, ErrCorrupt)
		}
		if h.CompressedPageSize < 0 || int64(h.CompressedPageSize) > int64(br.Len()) {
			return false, fmt.Errorf("page %d: %d compressed bytes, but %d left in the chunk: %w", page, h.CompressedPageSize, br.Len(), ErrCorrupt)
		}
		if h.UncompressedPageSize < 0 {
			return false, fmt.Errorf("page %d: negative uncompressed size %d: %w", page, h.UncompressedPageSize, ErrCorrupt)
		}
		uncompressed += int64(h.UncompressedPageSize)
		if uncompressed > limit {
			return false, fmt.Errorf("pages decompress to more than %d bytes: %w; the file is corrupt, or raise WithMaxRowGroupBytes", limit, ErrCorrupt)
		}
		var n int32
		switch {
		case h.DataPageHeader.Valid:
			n = h.DataPageHeader.V.NumValues
		case h.DataPageHeaderV2.Valid:
			n = h.DataPageHeaderV2.V.NumValues
			emptyV2 = emptyV2 || n == 0
		}
		if n < 0 {
			return false, fmt.Errorf("page %d: negative value count %d: %w", page, n, ErrCorrupt)
		}
		values += int64(n)
		if values > maxValues {
			return false, fmt.Errorf("pages hold more values than the footer's %d: %w", maxValues, ErrCorrupt)
		}
		br.Seek(int64(h.CompressedPageSize), 1)
	}
	return emptyV2, nil
}

// withoutEmptyPages returns a copy of a column chunk's bytes with its data
// pages of 0 values moved after the others (the same bytes, reordered), or
// nil when no such page comes before a page with values (or the headers do
// not parse: the decoder reports those). arrow-go, like Arrow C++, takes a
// page of 0 values for the end of the chunk and reads no value after it.
func withoutEmptyPages(chunk []byte) []byte {
	var proto thrift.CompactProtocol
	br := bytes.NewReader(chunk)
	dec := thrift.NewDecoder(proto.NewReader(br))
	var full, empty [][2]int
	early := false
	for br.Len() > 0 {
		start := len(chunk) - br.Len()
		var h format.PageHeader
		if err := dec.Decode(&h); err != nil || h.CompressedPageSize < 0 || int64(h.CompressedPageSize) > int64(br.Len()) {
			return nil
		}
		br.Seek(int64(h.CompressedPageSize), 1)
		page := [2]int{start, len(chunk) - br.Len()}
		if (h.DataPageHeader.Valid && h.DataPageHeader.V.NumValues == 0) || (h.DataPageHeaderV2.Valid && h.DataPageHeaderV2.V.NumValues == 0) {
			empty = append(empty, page)
			continue
		}
		early = early || len(empty) > 0
		full = append(full, page)
	}
	if !early {
		return nil
	}
	out := make([]byte, 0, len(chunk))
	for _, p := range append(full, empty...) {
		out = append(out, chunk[p[0]:p[1]]...)
	}
	return out
}
