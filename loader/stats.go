package loader

import (
	"context"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/meshfeed/meshfeed/format"
)

// ColumnStats is what a file's footer says of one column chunk: rows, null
// count, and bounds of its values as the column's output type.
type ColumnStats = format.ColumnStats

// ColumnStats returns the footer's statistics of projected column column in
// row group rowGroup of file file, its bounds allocated from mem (the
// caller releases ColumnStats.MinMax); ok false when the file's format or
// footer records none (Arrow IPC files record none). No data page is read.
func (ds *Dataset) ColumnStats(file, rowGroup int, column string, mem memory.Allocator) (ColumnStats, bool) {
	if file < 0 || file >= len(ds.Files) {
		return ColumnStats{}, false
	}
	sf, ok := ds.Files[file].footer.(format.StatsFooter)
	idx := ds.Schema.FieldIndices(column)
	if !ok || len(idx) == 0 {
		return ColumnStats{}, false
	}
	return sf.ColumnStats(rowGroup, column, ds.Schema.Field(idx[0]).Type, mem)
}

// ColumnDictionary returns every distinct value of projected column column
// in row group rowGroup of file file, from the chunk's dictionary page (one
// ranged read of it), allocated from mem (the caller releases it); ok false
// when the chunk has none usable (no dictionary page, a data page not
// dictionary-encoded, a type it does not convert; Arrow IPC files). An
// error names the file, row group and column.
func (ds *Dataset) ColumnDictionary(ctx context.Context, file, rowGroup int, column string, mem memory.Allocator) (arrow.Array, bool, error) {
	if file < 0 || file >= len(ds.Files) {
		return nil, false, nil
	}
	f := ds.Files[file]
	df, ok := f.footer.(format.DictFooter)
	idx := ds.Schema.FieldIndices(column)
	if !ok || len(idx) == 0 {
		return nil, false, nil
	}
	dict, ok, err := df.ColumnDictionary(ctx, objSource{store: ds.store, obj: f.Object}, rowGroup, column, ds.Schema.Field(idx[0]).Type, mem)
	if err != nil {
		return nil, false, fmt.Errorf("loader: %s row group %d column %q dictionary: %w", f.Object.URI, rowGroup, column, err)
	}
	return dict, ok, nil
}

// ColumnBloom returns the bloom filter of projected column column in row
// group rowGroup of file file (a ranged read of it), nil when the chunk has
// none (or its type is not one bloom filters are checked for). An error
// names the file, row group and column.
func (ds *Dataset) ColumnBloom(ctx context.Context, file, rowGroup int, column string) (format.Bloom, error) {
	if file < 0 || file >= len(ds.Files) {
		return nil, nil
	}
	f := ds.Files[file]
	bf, ok := f.footer.(format.BloomFooter)
	idx := ds.Schema.FieldIndices(column)
	if !ok || len(idx) == 0 {
		return nil, nil
	}
	b, err := bf.ColumnBloom(ctx, objSource{store: ds.store, obj: f.Object}, rowGroup, column, ds.Schema.Field(idx[0]).Type)
	if err != nil {
		return nil, fmt.Errorf("loader: %s row group %d column %q bloom filter: %w", f.Object.URI, rowGroup, column, err)
	}
	return b, nil
}
