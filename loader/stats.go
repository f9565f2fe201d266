package loader

import (
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
